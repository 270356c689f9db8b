"""LossChart: train and validation loss on the same axes, drawn with braille dots (or another
figure with a train and a validation series: a preference run's reward margin)."""

from __future__ import annotations

import math

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from zyquo_tui.dashboard.run_feed import DEFAULT_SMOOTHING, DisplaySeries

# Braille: each cell is 2 dots wide and 4 high; the bit of the dot at (column, row).
_DOT_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
_BRAILLE = 0x2800


def _line(x0: int, y0: int, x1: int, y1: int):
    """Pixels of the segment from (x0, y0) to (x1, y1) (Bresenham)."""
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    error = dx + dy
    while True:
        yield x0, y0
        if x0 == x1 and y0 == y1:
            return
        doubled = 2 * error
        if doubled >= dy:
            error += dy
            x0 += sx
        if doubled <= dx:
            error += dx
            y0 += sy


class BrailleCanvas:
    """A grid of braille cells drawn in layers. A cell shows only the dots of the highest layer
    that drew in it, in that layer's style, so crossing lines stay distinct."""

    def __init__(self, columns: int, rows: int, layers: int) -> None:
        self.columns, self.rows = columns, rows
        self.bits = [[[0] * columns for _ in range(rows)] for _ in range(layers)]
        self.top = [[-1] * columns for _ in range(rows)]  # the highest layer in each cell

    @property
    def pixel_width(self) -> int:
        return self.columns * 2

    @property
    def pixel_height(self) -> int:
        return self.rows * 4

    def dot(self, x: int, y: int, layer: int) -> None:
        if 0 <= x < self.columns * 2 and 0 <= y < self.rows * 4:
            row, column = y >> 2, x >> 1
            self.bits[layer][row][column] |= _DOT_BITS[y & 3][x & 1]
            if layer > self.top[row][column]:
                self.top[row][column] = layer

    def polyline(self, points: list[tuple[int, int]], layer: int, every: int = 1) -> None:
        """Connect the points; with `every` > 1, a dotted line (one dot in `every`)."""
        if len(points) == 1:
            self.dot(*points[0], layer)
            return
        # dot() inlined: a chart draws thousands of dots several times a second.
        bits, top = self.bits[layer], self.top
        width, height = self.columns * 2, self.rows * 4
        count = 0
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            for x, y in _line(x0, y0, x1, y1):
                count += 1
                if (count - 1) % every or not (0 <= x < width and 0 <= y < height):
                    continue
                row, column = y >> 2, x >> 1
                bits[row][column] |= _DOT_BITS[y & 3][x & 1]
                if layer > top[row][column]:
                    top[row][column] = layer

    def trace(self, points: list[tuple[int, int]], layer: int) -> None:
        """A dense line (many points per pixel column): each column's span from its lowest to
        its highest point, joined to the next column. Extremes stay; cost is per column."""
        spans: dict[int, list[int]] = {}
        order: list[int] = []
        for x, y in points:
            span = spans.get(x)
            if span is None:
                spans[x] = [y, y, y, y]  # first, last, top, bottom
                order.append(x)
            else:
                span[1] = y
                if y < span[2]:
                    span[2] = y
                elif y > span[3]:
                    span[3] = y
        previous = None
        for x in order:
            first, last, top, bottom = spans[x]
            for y in range(top, bottom + 1):
                self.dot(x, y, layer)
            if previous is not None:
                px, py = previous
                if x - px > 1 or abs(first - py) > 1:
                    for lx, ly in _line(px, py, x, first):
                        self.dot(lx, ly, layer)
            previous = (x, last)

    def row_segments(self, row: int, styles: list[Style], blank: Style) -> list[Segment]:
        """One row as segments: runs of cells that share a style become one segment."""
        segments: list[Segment] = []
        layer_rows = [layer[row] for layer in self.bits]
        top = self.top[row]
        run_style = blank
        run: list[str] = []
        append = run.append
        for column in range(self.columns):
            layer = top[column]
            if layer < 0:
                char, style = " ", blank
            else:
                char, style = chr(_BRAILLE | layer_rows[layer][column]), styles[layer]
            if style is not run_style:
                if run:
                    segments.append(Segment("".join(run), run_style))
                    run.clear()
                run_style = style
            append(char)
        if run:
            segments.append(Segment("".join(run), run_style))
        return segments


def axis_labels(low: float, high: float, count: int = 3) -> list[str]:
    """Evenly spaced labels from high to low, all with the same number of decimals."""
    span = high - low
    decimals = min(6, max(0, 2 - math.floor(math.log10(span)))) if span > 0 else 2
    values = [high - span * i / (count - 1) for i in range(count)]
    return [f"{value:.{decimals}f}" for value in values]


class LossChart(Widget):
    """Train loss (raw, and smoothed on top when smoothing is on) and validation loss against
    the step, from 0 to the run's last step. Reads DisplaySeries, so a redraw costs the number
    of buckets (at most 1,024 a series), never the number of events."""

    COMPONENT_CLASSES = {"loss-chart--train", "loss-chart--train-raw", "loss-chart--val",
                         "loss-chart--axis"}
    DEFAULT_CSS = """
    LossChart {
        height: 1fr;
        min-height: 5;
        border: round $panel-lighten-2;
        border-title-color: $foreground;
        border-subtitle-color: $foreground-muted;
        padding: 0 1 0 0;
    }
    LossChart > .loss-chart--train { color: $primary-lighten-2; }
    LossChart > .loss-chart--train-raw { color: $primary-darken-1; text-style: dim; }
    LossChart > .loss-chart--val { color: $warning; text-style: bold; }
    LossChart > .loss-chart--axis { color: $foreground-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.train: DisplaySeries | None = None
        self.val: DisplaySeries | None = None
        self.x_max = 0
        self.smoothing = True
        self.weight = DEFAULT_SMOOTHING
        self._key: tuple | None = None
        self._strips: list[Strip] | None = None
        self.message: str | None = None
        self.title = "Loss"
        self.border_title = self.title

    def on_mount(self) -> None:
        self._update_legend()

    def set_data(self, train: DisplaySeries, val: DisplaySeries, x_max: int | None,
                 smoothing: bool, version: int, title: str = "Loss") -> None:
        """`title` names the figure charted (its border title): Loss, or Reward margin."""
        key = (version, x_max, smoothing, title)
        if key == self._key:
            return
        self._key = key
        if title != self.title:
            self.title = self.border_title = title
        self.message = None
        self.train, self.val = train, val
        self.x_max = x_max or 0
        if smoothing != self.smoothing:
            self.smoothing = smoothing
            self._update_legend()
        self._strips = None
        self.refresh()

    def show_message(self, text: str) -> None:
        """A line in place of the chart (while the history loads)."""
        if text != self.message:
            self.message = text
            self._key = None
            self._strips = None
            self.refresh()

    def _update_legend(self) -> None:
        if self.smoothing:
            self.border_subtitle = ("[$primary-lighten-2]━━[/] train, smoothed   "
                                    "[dim $primary-darken-1]━━[/] raw   "
                                    "[b $warning]━━[/] validation ")
        else:
            self.border_subtitle = ("[$primary-lighten-2]━━[/] train   "
                                    "[b $warning]━━[/] validation ")

    def on_resize(self) -> None:
        self._strips = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips = None

    def render_line(self, y: int) -> Strip:
        """The chart is drawn once per change of data or size, then served line by line."""
        if self._strips is None:
            self._strips = self._draw()
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.content_size.width, self.rich_style)

    def _draw(self) -> list[Strip]:
        width, height = self.content_size.width, self.content_size.height
        base = self.rich_style
        axis = base + self.get_component_rich_style("loss-chart--axis")

        def text_line(text: str) -> Strip:
            return Strip([Segment(text[:width].ljust(width), axis)], width)

        if self.message:
            return [text_line(self.message)]
        train, val = self.train, self.val
        ranges = [r for r in (train.value_range() if train else None,
                              val.value_range() if val else None) if r]
        if not ranges or width < 12 or height < 3:
            return [text_line(f"waiting for the first {self.title.lower()}…")]
        low = min(r[0] for r in ranges)
        high = max(r[1] for r in ranges)
        if high - low < 1e-12:
            pad = abs(high) * 0.05 or 0.5
        else:
            pad = (high - low) * 0.04
        low, high = low - pad, high + pad
        labels = axis_labels(low, high)
        gutter = max(len(label) for label in labels) + 1
        columns, rows = width - gutter - 1, height - 1
        if columns < 4 or rows < 1:
            return [text_line("window too small for the chart")]
        canvas = BrailleCanvas(columns, rows, layers=4)
        last_steps = [s.last_step for s in (train, val) if s and s.last_step is not None]
        x_max = max([self.x_max, *last_steps, 1])
        x_scale = (canvas.pixel_width - 1) / x_max
        y_scale = (canvas.pixel_height - 1) / (high - low)

        def pixel(step: float, value: float) -> tuple[int, int]:
            return round(step * x_scale), round((high - value) * y_scale)

        # Layers, bottom to top: raw train, the validation line (dotted), train (smoothed or
        # raw), validation markers. A cell shows its top layer only.
        raw, val_line, train_line, val_marks = range(4)
        val_style = base + self.get_component_rich_style("loss-chart--val")
        styles = [base + self.get_component_rich_style("loss-chart--train-raw"), val_style,
                  base + self.get_component_rich_style("loss-chart--train"), val_style]
        if train is not None and len(train):
            raw_points = []
            for first, last, lo, hi, low_first in train.points():
                x = round((first + last) / 2 * x_scale)
                a, b = (lo, hi) if low_first else (hi, lo)
                raw_points.append((x, round((high - a) * y_scale)))
                if a != b:
                    raw_points.append((x, round((high - b) * y_scale)))
            canvas.trace(raw_points, raw if self.smoothing else train_line)
            if self.smoothing:
                smoothed = [pixel(step, value) for step, value in train.smoothed(self.weight)]
                canvas.polyline(smoothed, train_line)
        if val is not None and len(val):
            val_points = [pixel((first + last) / 2, (lo + hi) / 2)
                          for first, last, lo, hi, _ in val.points()]
            canvas.polyline(val_points, val_line, every=3)
            for x, y in val_points:  # each measurement: a 2x2 square
                x = min(x, canvas.pixel_width - 2)
                for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
                    canvas.dot(x + dx, y + dy, val_marks)

        label_rows = {0: labels[0], rows // 2: labels[1], rows - 1: labels[2]}
        strips = []
        for row in range(rows):
            gauge = "┤" if row in label_rows else "│"
            segments = [Segment(label_rows.get(row, "").rjust(gutter - 1) + " " + gauge, axis)]
            segments += canvas.row_segments(row, styles, base)
            strips.append(Strip(segments, width))
        left, middle, right = "0", f"{x_max // 2:,}", f"{x_max:,}"
        axis_line = " " * gutter + "└" + left
        middle_at = gutter + 1 + columns // 2 - len(middle) // 2
        axis_line = axis_line.ljust(middle_at) + middle
        axis_line = axis_line.ljust(gutter + 1 + columns - len(right)) + right
        strips.append(text_line(axis_line))
        return strips
