"""CompletionsPanel: a grpo run's sampled answers at an evaluation, with their rewards."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from zyquo_tui.dashboard.widgets.samples_panel import SamplesPanel, one_line


def fmt_reward(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "–"


class CompletionsPanel(SamplesPanel):
    """The `sample` events of one evaluation of a grpo run (the latest, or the one stepped
    back to with [ and ]): each prompt, then the reward the model's completion got (the
    weighted total), the answer the row expects and the completion itself, so the user sees
    what the rewards are paying for."""

    TITLE = "Completions"

    def answer_line(self, sample: dict[str, Any]) -> Text:
        """`  r 1.00  answer 7  │ The sum of 3 and 4 is 7.`: reward and expected answer
        first, since a long completion is cut at the panel's edge."""
        line = Text("  r ", no_wrap=True, overflow="ellipsis")
        line.append(fmt_reward(sample.get("reward")), style="bold")
        line.append("  answer ", style="dim")
        line.append(one_line(str(sample.get("answer", ""))), style="bold")
        line.append("  │ ", style="dim")
        line.append(one_line(str(sample.get("text", ""))))
        return line
