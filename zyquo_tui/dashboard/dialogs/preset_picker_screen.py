"""PresetPickerScreen: the saved presets, to load one into the new-run form."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static


class PresetPickerScreen(ModalScreen[str | None]):
    """Lists preset names ($ZYQUO_HOME/presets/*.toml); enter picks one, escape none."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="presets.cancel")]
    DEFAULT_CSS = """
    PresetPickerScreen { align: center middle; }
    PresetPickerScreen > Vertical {
        width: 60;
        max-width: 96%;
        height: auto;
        max-height: 90%;
        border: thick $accent;
        background: $surface;
        padding: 1 2;
    }
    PresetPickerScreen .question { text-style: bold; margin-bottom: 1; }
    PresetPickerScreen OptionList { height: auto; max-height: 14; }
    PresetPickerScreen .keys { color: $text-muted; margin-top: 1; }
    """

    def __init__(self, names: list[str], folder: str) -> None:
        super().__init__()
        self.names = names
        self.folder = folder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Load a preset (from {self.folder})", classes="question",
                         markup=False)
            yield OptionList(*self.names, id="preset-list")
            yield Static("enter: load · esc: cancel", classes="keys", markup=False)

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected)
    def picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.names[event.option_index])

    def action_cancel(self) -> None:
        self.dismiss(None)
