"""Charts drawn with braille dots: the canvas, the frame around it (value labels on the left,
the x axis below), and a widget base that draws once per change of data or size."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

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


def square(canvas: BrailleCanvas, x: int, y: int, layer: int) -> None:
    """A 2x2 mark (a validation measurement), kept inside the canvas's right edge."""
    x = min(x, canvas.pixel_width - 2)
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        canvas.dot(x + dx, y + dy, layer)


@dataclass
class ChartFrame:
    """Where a chart goes in `width` x `height` cells: the value range (padded a little so no
    point sits on the edge), its three labels in a gutter, and the canvas's size."""

    low: float
    high: float
    labels: list[str]
    gutter: int
    columns: int
    rows: int

    @classmethod
    def fit(cls, low: float, high: float, width: int, height: int) -> "ChartFrame | None":
        """None when the cells leave no room for a canvas."""
        if high - low < 1e-12:
            pad = abs(high) * 0.05 or 0.5
        else:
            pad = (high - low) * 0.04
        low, high = low - pad, high + pad
        labels = axis_labels(low, high)
        gutter = max(len(label) for label in labels) + 1
        columns, rows = width - gutter - 1, height - 1
        if columns < 4 or rows < 1:
            return None
        return cls(low, high, labels, gutter, columns, rows)

    def y_scale(self, canvas: BrailleCanvas) -> float:
        return (canvas.pixel_height - 1) / (self.high - self.low)

    def strips(self, canvas: BrailleCanvas, styles: list[Style], base: Style, axis: Style,
               width: int, x_labels: tuple[str, str, str]) -> list[Strip]:
        """The canvas's rows behind the labelled gutter, then the x axis with its labels at
        the left, the middle and the right."""
        label_rows = {0: self.labels[0], self.rows // 2: self.labels[1],
                      self.rows - 1: self.labels[2]}
        strips = []
        for row in range(self.rows):
            gauge = "┤" if row in label_rows else "│"
            segments = [Segment(label_rows.get(row, "").rjust(self.gutter - 1) + " " + gauge,
                                axis)]
            segments += canvas.row_segments(row, styles, base)
            strips.append(Strip(segments, width))
        left, middle, right = x_labels
        line = " " * self.gutter + "└" + left
        middle_at = self.gutter + 1 + self.columns // 2 - len(middle) // 2
        line = line.ljust(middle_at) + middle
        line = line.ljust(self.gutter + 1 + self.columns - len(right)) + right
        strips.append(text_strip(line, width, axis))
        return strips


def text_strip(text: str, width: int, style: Style) -> Strip:
    """One line of text in place of a chart (a message, or the x axis)."""
    return Strip([Segment(text[:width].ljust(width), style)], width)


class BrailleChart(Widget):
    """Drawn once per change of data or size (`_draw`, in the subclass), then served line by
    line: a redraw costs the chart's points, never once per line."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._strips: list[Strip] | None = None

    def redraw(self) -> None:
        self._strips = None
        self.refresh()

    def on_resize(self) -> None:
        self._strips = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips = None

    def render_line(self, y: int) -> Strip:
        if self._strips is None:
            self._strips = self._draw()
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.content_size.width, self.rich_style)

    def _draw(self) -> list[Strip]:
        raise NotImplementedError
