"""LossChart: train and validation loss on the same axes, drawn with braille dots (or another
figure with a train and a validation series: a preference run's reward margin)."""

from __future__ import annotations

from textual.strip import Strip

from zyquo_tui.dashboard.run_feed import DEFAULT_SMOOTHING, DisplaySeries
from zyquo_tui.dashboard.widgets.braille_chart import (
    BrailleCanvas,
    BrailleChart,
    ChartFrame,
    square,
    text_strip,
)


class LossChart(BrailleChart):
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
        self.redraw()

    def show_message(self, text: str) -> None:
        """A line in place of the chart (while the history loads)."""
        if text != self.message:
            self.message = text
            self._key = None
            self.redraw()

    def _update_legend(self) -> None:
        if self.smoothing:
            self.border_subtitle = ("[$primary-lighten-2]━━[/] train, smoothed   "
                                    "[dim $primary-darken-1]━━[/] raw   "
                                    "[b $warning]━━[/] validation ")
        else:
            self.border_subtitle = ("[$primary-lighten-2]━━[/] train   "
                                    "[b $warning]━━[/] validation ")

    def _draw(self) -> list[Strip]:
        width, height = self.content_size.width, self.content_size.height
        base = self.rich_style
        axis = base + self.get_component_rich_style("loss-chart--axis")
        if self.message:
            return [text_strip(self.message, width, axis)]
        train, val = self.train, self.val
        ranges = [r for r in (train.value_range() if train else None,
                              val.value_range() if val else None) if r]
        if not ranges or width < 12 or height < 3:
            return [text_strip(f"waiting for the first {self.title.lower()}…", width, axis)]
        frame = ChartFrame.fit(min(r[0] for r in ranges), max(r[1] for r in ranges),
                               width, height)
        if frame is None:
            return [text_strip("window too small for the chart", width, axis)]
        canvas = BrailleCanvas(frame.columns, frame.rows, layers=4)
        last_steps = [s.last_step for s in (train, val) if s and s.last_step is not None]
        x_max = max([self.x_max, *last_steps, 1])
        x_scale = (canvas.pixel_width - 1) / x_max
        y_scale = frame.y_scale(canvas)
        high = frame.high

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
                square(canvas, x, y, val_marks)
        return frame.strips(canvas, styles, base, axis, width,
                            ("0", f"{x_max // 2:,}", f"{x_max:,}"))
