"""TextPromptDialog: asks for one line of text (a path, a preset name) and returns it."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Static

from zyquo_tui.dashboard.dialogs.dialog import Dialog


class TextPromptDialog(Dialog[str | None]):
    """A question, a detail line and an input: enter answers with the text, escape with None."""

    BINDINGS = [Binding("escape", "close", "Cancel", id="prompt.cancel")]
    DEFAULT_CSS = """
    TextPromptDialog > .dialog-frame { width: 72; max-width: 96%; }
    TextPromptDialog .dialog-heading { margin-bottom: 0; }
    TextPromptDialog .detail { color: $text-muted; margin-bottom: 1; }
    """

    def __init__(self, question: str, detail: str = "", value: str = "", *,
                 placeholder: str = "") -> None:
        super().__init__(question)
        self.detail = detail
        self.value = value
        self.placeholder = placeholder

    def compose_content(self) -> ComposeResult:
        if self.detail:
            yield Static(self.detail, classes="detail", markup=False)
        yield Input(self.value, placeholder=self.placeholder, id="prompt-input")
        yield Static("enter: OK · esc: cancel", classes="dialog-keys", markup=False)

    def on_mount(self) -> None:
        field = self.query_one(Input)
        field.cursor_blink = False
        field.focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        self.dismiss(text or None)
