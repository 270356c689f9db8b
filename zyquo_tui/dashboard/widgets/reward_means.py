"""RewardMeans: a grpo run's mean of each reward function, on one line under its sparklines."""

from __future__ import annotations

from rich.text import Text

from zyquo_tui.dashboard.widgets.live_text import LiveText
from zyquo_tui.dashboard.widgets.metric_sparkline import LABEL_WIDTH


class RewardMeans(LiveText):
    """`rewards     exact_answer 0.62 · length 0.91`: the latest train report's unweighted
    mean of each reward function, by the name the run gave it, so a total made of several
    rewards shows which one moves."""

    DEFAULT_CSS = """
    RewardMeans { height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, means: dict[str, float] | None) -> None:
        line = Text("rewards".ljust(LABEL_WIDTH), style="dim")
        if not means:
            line.append("–")
        for index, (name, value) in enumerate(means.items() if means else ()):
            if index:
                line.append(" · ", style="dim")
            line.append(f"{name.rsplit('/', 1)[-1]} ")  # a file's function without its folder
            line.append(f"{value:.2f}", style="bold")
        if line != self.text:
            self.text = line
