"""PresetPickerDialog: the saved presets, to load one into the new-run form."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import OptionList, Static

from zyquo_tui.dashboard.dialogs.dialog import Dialog


class PresetPickerDialog(Dialog[str | None]):
    """Lists preset names ($ZYQUO_HOME/presets/*.toml); enter picks one, escape none."""

    BINDINGS = [Binding("escape", "close", "Cancel", id="presets.cancel")]
    DEFAULT_CSS = """
    PresetPickerDialog > .dialog-frame { width: 60; max-width: 96%; max-height: 90%; }
    PresetPickerDialog OptionList { height: auto; max-height: 14; }
    """

    def __init__(self, names: list[str], folder: str) -> None:
        super().__init__(f"Load a preset (from {folder})")
        self.names = names

    def compose_content(self) -> ComposeResult:
        yield OptionList(*self.names, id="preset-list")
        yield Static("enter: load · esc: cancel", classes="dialog-keys", markup=False)

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected)
    def picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.names[event.option_index])
