"""CompareChart: the loss curves of several runs on the same axes, by step or by tokens."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from rich.style import Style
from textual.strip import Strip

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.formatting import fmt_rate
from zyquo_tui.dashboard.widgets.braille_chart import (
    BrailleCanvas,
    BrailleChart,
    ChartFrame,
    square,
    text_strip,
)

# One colour per run, in the order the runs are listed (the legend and the tables use the
# same letters, so the chart reads without colour too).
RUN_COLOURS = ("cyan", "magenta", "yellow", "green", "red", "blue", "bright_white")
BY_STEP = "step"
BY_TOKENS = "tokens"


def run_colour(index: int) -> str:
    return RUN_COLOURS[index % len(RUN_COLOURS)]


@dataclass
class Curve:
    """One run's points: train loss (a line) and validation loss (markers), as (x, loss)."""

    train: list[tuple[float, float]]
    val: list[tuple[float, float]]


def tokens_at(metrics: RunMetrics, step: float) -> float:
    """The tokens trained by `step`, between the reports around it (0 at step 0)."""
    series = metrics.series["trained_tokens"]
    steps, tokens = [0, *series.steps], [0.0, *series.values]
    i = bisect.bisect_left(steps, step)
    if i >= len(steps):
        last = len(steps) - 1
        rate = tokens[last] / steps[last] if steps[last] else 0.0
        return tokens[last] + rate * (step - steps[last])
    if steps[i] == step or i == 0:
        return tokens[i]
    before, after = steps[i - 1], steps[i]
    share = (step - before) / (after - before)
    return tokens[i - 1] + share * (tokens[i] - tokens[i - 1])


def curve(metrics: RunMetrics, axis: str) -> Curve:
    def x(step: float) -> float:
        return float(step) if axis == BY_STEP else tokens_at(metrics, step)
    train, val = metrics.series["train_loss"], metrics.series["val_loss"]
    return Curve([(x(s), v) for s, v in zip(train.steps, train.values)],
                 [(x(s), v) for s, v in zip(val.steps, val.values)])


class CompareChart(BrailleChart):
    """Each run's train loss as a line and its validation losses as squares, in its colour;
    the x axis is the step or the tokens trained (`axis`)."""

    COMPONENT_CLASSES = {"compare-chart--axis"}
    DEFAULT_CSS = """
    CompareChart {
        height: 1fr;
        min-height: 6;
        border: round $panel-lighten-2;
        border-title-color: $foreground;
        border-subtitle-color: $foreground-muted;
        padding: 0 1 0 0;
    }
    CompareChart > .compare-chart--axis { color: $foreground-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.curves: list[Curve] = []
        self.labels: list[str] = []
        self.axis = BY_STEP
        self.message: str | None = "reading the runs' events…"
        self.border_title = "Loss by step"

    def show(self, curves: list[Curve], labels: list[str], axis: str) -> None:
        self.curves, self.labels, self.axis = curves, labels, axis
        self.message = None
        self.border_title = "Loss by step" if axis == BY_STEP else "Loss by tokens trained"
        legend = "   ".join(f"[{run_colour(i)}]━━ {label}[/]" for i, label in enumerate(labels))
        self.border_subtitle = f"{legend}   ━━ train  ■ validation "
        self.redraw()

    def _draw(self) -> list[Strip]:
        width, height = self.content_size.width, self.content_size.height
        base = self.rich_style
        axis_style = base + self.get_component_rich_style("compare-chart--axis")
        if self.message:
            return [text_strip(self.message, width, axis_style)]
        values = [v for c in self.curves for _, v in c.train + c.val if v == v]
        xs = [x for c in self.curves for x, _ in c.train + c.val]
        if not values or width < 12 or height < 3:
            return [text_strip("no losses to draw yet", width, axis_style)]
        frame = ChartFrame.fit(min(values), max(values), width, height)
        if frame is None:
            return [text_strip("window too small for the chart", width, axis_style)]
        # Two layers a run: its line below, its validation squares above every line.
        count = len(self.curves)
        canvas = BrailleCanvas(frame.columns, frame.rows, layers=2 * count)
        x_max = max([*xs, 1])
        x_scale = (canvas.pixel_width - 1) / x_max
        y_scale = frame.y_scale(canvas)
        high = frame.high

        def pixel(x: float, value: float) -> tuple[int, int]:
            return round(x * x_scale), round((high - value) * y_scale)

        styles: list[Style] = []
        for i in range(count):
            styles.append(base + Style.parse(run_colour(i)))
        styles += [base + Style.parse(f"bold {run_colour(i)}") for i in range(count)]
        for i, run_curve in enumerate(self.curves):
            points = [pixel(x, v) for x, v in run_curve.train if v == v]
            if points:
                canvas.trace(points, i)
            for x, y in (pixel(x, v) for x, v in run_curve.val if v == v):
                square(canvas, x, y, count + i)

        def x_text(x: float) -> str:
            return f"{int(x):,}" if self.axis == BY_STEP else fmt_rate(x)
        return frame.strips(canvas, styles, base, axis_style, width,
                            ("0", x_text(x_max / 2), x_text(x_max)))
