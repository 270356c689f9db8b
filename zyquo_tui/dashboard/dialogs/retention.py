"""RetentionDialog: choose which checkpoints a run keeps when it completes."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from zyquo_tui.core.store.retention import KEEP_LAST_CHOICES, RetentionPolicy
from zyquo_tui.dashboard.dialogs.dialog import Dialog

KEEP_EVERYTHING = "keep-everything"


class RetentionDialog(Dialog[object]):
    """A list of choices: keep every checkpoint, or the best one and the last N. Dismisses with
    a RetentionPolicy, KEEP_EVERYTHING, or None when the user backs out."""

    BINDINGS = [Binding("escape", "close", "Back", id="retention.back")]
    DEFAULT_CSS = """
    RetentionDialog .dialog-heading { margin-bottom: 0; }
    RetentionDialog OptionList { height: auto; margin-top: 1; }
    """

    def __init__(self, current: RetentionPolicy | None, completed: bool = False) -> None:
        super().__init__("Which checkpoints to keep (applied now: the run has completed)"
                         if completed else "Which checkpoints to keep when the run completes")
        self.current = current

    def compose_content(self) -> ComposeResult:
        options = [Option("Keep every checkpoint", id=KEEP_EVERYTHING)]
        for n in KEEP_LAST_CHOICES:
            options.append(Option(RetentionPolicy(n).describe().capitalize(), id=str(n)))
        yield Static("The best is the one with the lowest validation loss. A cancelled, "
                     "failed or interrupted run keeps them all, for resuming.", markup=False)
        yield OptionList(*options, id="choices")

    def on_mount(self) -> None:
        choices = self.query_one(OptionList)
        key = str(self.current.keep_last) if self.current else KEEP_EVERYTHING
        choices.highlighted = choices.get_option_index(key)
        choices.focus()

    @on(OptionList.OptionSelected)
    def chosen(self, event: OptionList.OptionSelected) -> None:
        key = event.option.id
        self.dismiss(KEEP_EVERYTHING if key == KEEP_EVERYTHING else RetentionPolicy(int(key)))
