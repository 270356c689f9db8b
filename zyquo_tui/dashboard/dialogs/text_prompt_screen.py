"""TextPromptScreen: asks for one line of text (a path, a preset name) and returns it."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class TextPromptScreen(ModalScreen[str | None]):
    """A question, a detail line and an input: enter answers with the text, escape with None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]
    DEFAULT_CSS = """
    TextPromptScreen { align: center middle; }
    TextPromptScreen > Vertical {
        width: 72;
        max-width: 96%;
        height: auto;
        border: thick $accent;
        background: $surface;
        padding: 1 2;
    }
    TextPromptScreen .question { text-style: bold; }
    TextPromptScreen .detail { color: $text-muted; margin-bottom: 1; }
    TextPromptScreen .keys { color: $text-muted; margin-top: 1; }
    """

    def __init__(self, question: str, detail: str = "", value: str = "", *,
                 placeholder: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, classes="question", markup=False)
            if self.detail:
                yield Static(self.detail, classes="detail", markup=False)
            yield Input(self.value, placeholder=self.placeholder, id="prompt-input")
            yield Static("enter: OK · esc: cancel", classes="keys", markup=False)

    def on_mount(self) -> None:
        field = self.query_one(Input)
        field.cursor_blink = False
        field.focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        self.dismiss(text or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
