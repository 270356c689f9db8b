"""FailurePanel: why a run failed or was interrupted, and what to try."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static


class FailurePanel(Static):
    """Hidden unless the run has a failure: then its cause, the sentence saying what happened,
    and the suggestion, so nobody has to open the log to know what to do next."""

    DEFAULT_CSS = """
    FailurePanel {
        height: auto;
        max-height: 5;
        padding: 0 1;
        border-left: thick $error;
        background: $error 10%;
        display: none;
    }
    FailurePanel.-shown { display: block; }
    """

    def show(self, failure: dict[str, Any] | None, state: str) -> None:
        if not failure:
            self.set_class(False, "-shown")
            return
        text = Text()
        text.append(f"{state} ({failure.get('cause', '?')}): ", style="bold")
        text.append(str(failure.get("message") or ""))
        suggestion = failure.get("suggestion")
        if suggestion:
            text.append("\nTry: ", style="bold")
            text.append(str(suggestion))
        self.update(text)
        self.set_class(True, "-shown")
