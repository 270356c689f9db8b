"""SamplesPanel: the answers the model gave at a validation (`--sample-prompts`)."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from zyquo_tui.dashboard.widgets.live_text import LiveText

MAX_HEIGHT = 12


def one_line(text: str) -> str:
    """An answer's words on one line (its line breaks would take the panel's few rows)."""
    words = " ".join(text.split())
    return words if words else "(empty answer)"


class SamplesPanel(LiveText):
    """Hidden until the run has samples; then the prompts and answers of one validation step
    (the latest, or the one the user stepped back to with [ and ]), so the user sees the
    answers change as the model learns."""

    DEFAULT_CSS = """
    SamplesPanel {
        height: 6;
        border: round $panel-lighten-2;
        border-title-color: $foreground;
        border-subtitle-color: $foreground-muted;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        display: none;
    }
    SamplesPanel.-shown { display: block; }
    """

    TITLE = "Samples"  # the border title's first word

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.steps: list[int] = []
        self.step: int | None = None

    def show(self, samples: dict[int, list[dict[str, Any]]], step: int | None) -> None:
        """The samples of `step` (None: the latest validation that has samples)."""
        self.steps = sorted(samples)
        if not self.steps:
            self.set_class(False, "-shown")
            return
        shown = step if step in samples else self.steps[-1]
        self.step = shown
        answers = samples[shown]
        height = min(MAX_HEIGHT, 2 * len(answers) + 2)
        if self.styles.height is None or self.styles.height.value != height:
            self.styles.height = height
        position = self.steps.index(shown) + 1
        self.border_title = f"{self.TITLE} at step {shown} ({position} of {len(self.steps)})"
        self.border_subtitle = "\\[ earlier  ] later " if len(self.steps) > 1 else ""
        lines = []
        for sample in answers:
            lines.append(Text("› " + one_line(str(sample.get("prompt", ""))), style="bold",
                              no_wrap=True, overflow="ellipsis"))
            lines.append(self.answer_line(sample))
        self.text = Text("\n").join(lines)
        self.set_class(True, "-shown")

    def answer_line(self, sample: dict[str, Any]) -> Text:
        """The line under a sample's prompt: the model's answer."""
        return Text("  " + one_line(str(sample.get("text", ""))), no_wrap=True,
                    overflow="ellipsis")
