"""MetricSparkline: one metric of a run as a label, a sparkline and its current value."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from zyquo_tui.core.events.metrics import downsample

BARS = "▁▂▃▄▅▆▇█"
LABEL_WIDTH = 12
VALUE_WIDTH = 11


class MetricSparkline(Widget):
    """One line: the metric's name, its history as bars, its latest value.

    Drawn with the Line API into one cached strip, so a new value costs one line of
    segments: the metrics of a followed run change several times a second, and Textual's
    Sparkline widget blends a colour per bar on every render. `show()` takes the values in
    order (bucket extremes from a DisplaySeries) and keeps each bar's maximum, like Textual's
    Sparkline; bars run from the min colour (low values) to the max colour."""

    COMPONENT_CLASSES = {"metric-sparkline--label", "metric-sparkline--value",
                         "metric-sparkline--min-color", "metric-sparkline--max-color"}
    DEFAULT_CSS = """
    MetricSparkline { height: 1; }
    MetricSparkline > .metric-sparkline--label { color: $foreground-muted; }
    MetricSparkline > .metric-sparkline--value { text-style: bold; }
    MetricSparkline > .metric-sparkline--min-color { color: $primary 40%; }
    MetricSparkline > .metric-sparkline--max-color { color: $primary; }
    """

    def __init__(self, label: str, *, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.label = label
        self.values: list[float] = []
        self.current = "–"
        self._shown: object = None
        self._strip: Strip | None = None

    def show(self, values: list[float], current: str, key: object = None) -> None:
        """New data; `key` (when given) says whether anything changed since the last call."""
        if key is not None and (key, current) == self._shown:
            return
        self._shown = (key, current)
        self.values = values
        self.current = current
        self._strip = None
        self.refresh()

    @property
    def bars_width(self) -> int:
        return max(0, self.size.width - LABEL_WIDTH - VALUE_WIDTH - 1)

    def on_resize(self) -> None:
        self._strip = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strip = None

    def render_line(self, y: int) -> Strip:
        if y != 0:
            return Strip.blank(self.size.width, self.rich_style)
        if self._strip is None:
            self._strip = self._draw()
        return self._strip

    def bars(self, width: int) -> list[int]:
        """Each bar's level, 0 to 7 (an empty list without data)."""
        values = self.values
        if not values or width <= 0:
            return []
        if len(values) > width * 2:
            values = downsample(list(range(len(values))), values, width * 2)
        n = len(values)
        low, high = min(values), max(values)
        if high == low:
            return [3] * width  # a constant: a level line
        extent = high - low
        levels = []
        for i in range(width):
            start = i * n // width
            chunk = values[start:max(start + 1, (i + 1) * n // width)]
            levels.append(min(7, int((max(chunk) - low) / extent * 8)))
        return levels

    def _draw(self) -> Strip:
        width = self.size.width
        base = self.rich_style
        label_style = base + self.get_component_rich_style("metric-sparkline--label")
        value_style = base + self.get_component_rich_style("metric-sparkline--value")
        segments = [Segment(self.label[:LABEL_WIDTH].ljust(LABEL_WIDTH), label_style)]
        bars_width = self.bars_width
        levels = self.bars(bars_width)
        if levels:
            levels = (levels + [0] * bars_width)[:bars_width]  # the value stays in its column
            styles = self._level_styles(base)
            run_level, run = levels[0], []
            for level in levels:
                if level != run_level:
                    segments.append(Segment("".join(run), styles[run_level]))
                    run_level, run = level, []
                run.append(BARS[level])
            segments.append(Segment("".join(run), styles[run_level]))
        else:
            segments.append(Segment(BARS[0] * bars_width, label_style))
        segments.append(Segment(" " + self.current[-VALUE_WIDTH:].rjust(VALUE_WIDTH), value_style))
        return Strip(segments, width).adjust_cell_length(width, base)

    def _level_styles(self, base: Style) -> list[Style]:
        background = self.background_colors[1]
        low = background + self.get_component_styles("metric-sparkline--min-color").color
        high = background + self.get_component_styles("metric-sparkline--max-color").color
        return [base + Style.from_color(low.blend(high, level / 7).rich_color)
                for level in range(8)]

