"""ConfirmDialog: a yes/no question before anything that cannot be undone."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Static

from zyquo_tui.dashboard.dialogs.dialog import Dialog


class ConfirmDialog(Dialog[bool]):
    """Asks a question; dismisses with True for `y` (or the confirm button) and False for `n`
    or escape. The safe button has the focus, so a stray enter keeps things as they are."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]
    DEFAULT_CSS = """
    ConfirmDialog > .dialog-frame { border: thick $warning; }
    ConfirmDialog Horizontal { height: auto; margin-top: 1; align-horizontal: right; }
    ConfirmDialog Button { margin-left: 2; }
    """

    def __init__(self, question: str, detail: str = "", *, confirm_label: str = "Yes",
                 keep_label: str = "No") -> None:
        super().__init__(question)
        self.detail = detail
        self.confirm_label = confirm_label
        self.keep_label = keep_label

    def compose_content(self) -> ComposeResult:
        if self.detail:
            yield Static(self.detail, markup=False)
        with Horizontal():
            yield Button(f"{self.keep_label} (n)", id="keep")
            yield Button(f"{self.confirm_label} (y)", id="confirm", variant="error")

    def on_mount(self) -> None:
        self.query_one("#keep", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")
