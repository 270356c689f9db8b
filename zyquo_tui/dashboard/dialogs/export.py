"""ExportDialog: where to write a fused model of a checkpoint, and in which weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from zyquo_tui.dashboard.dialogs.dialog import Dialog


@dataclass(frozen=True)
class ExportChoice:
    """What the user chose: the folder, the bits to quantize to (None: float), and GGUF."""

    output: Path
    quantize: int | None = None
    gguf: bool = False


# Option id -> (quantize, gguf).
WEIGHTS = {"float": (None, False), "8": (8, False), "4": (4, False), "gguf": (None, True)}


class ExportDialog(Dialog[ExportChoice | None]):
    """The output folder (a default in the models folder, where the models list finds it) and
    the weights: float (a quantized base is de-quantized), 8-bit, 4-bit, or float plus a GGUF
    file when mlx-lm converts the model's type. Enter exports; escape backs out."""

    BINDINGS = [Binding("escape", "close", "Cancel", id="export.cancel")]
    DEFAULT_CSS = """
    ExportDialog > .dialog-frame { width: 76; max-width: 96%; }
    ExportDialog .dialog-heading { margin-bottom: 0; }
    ExportDialog .detail { color: $text-muted; margin-bottom: 1; }
    ExportDialog OptionList { height: auto; margin-top: 1; }
    """

    def __init__(self, heading: str, output: Path, *, quantized_base: bool,
                 gguf_supported: bool) -> None:
        super().__init__(heading)
        self.output = output
        self.quantized_base = quantized_base
        self.gguf_supported = gguf_supported

    def compose_content(self) -> ComposeResult:
        yield Static("Fused with mlx-lm, then checked against base + adapter on the first "
                     "validation rows; a model that lost the adapter is not kept. It runs in "
                     "the background, also after the dashboard closes.", classes="detail",
                     markup=False)
        yield Input(str(self.output), id="export-folder")
        float_words = "Float weights" + (" (the 4-bit base de-quantized)"
                                         if self.quantized_base else "")
        options = [Option(float_words, id="float"), Option("8-bit weights", id="8"),
                   Option("4-bit weights", id="4")]
        if self.gguf_supported:
            options.append(Option("Float weights and a GGUF file (fp16)", id="gguf"))
        yield OptionList(*options, id="export-weights")
        yield Static("tab: folder / weights · enter: export · esc: cancel",
                     classes="dialog-keys", markup=False)

    def on_mount(self) -> None:
        self.query_one(Input).cursor_blink = False
        choices = self.query_one(OptionList)
        choices.highlighted = 0
        choices.focus()

    def _export(self, option_id: str | None) -> None:
        folder = self.query_one(Input).value.strip()
        if not folder:
            self.notify("Give the folder to write the model to.", severity="warning")
            return
        quantize, gguf = WEIGHTS[option_id or "float"]
        self.dismiss(ExportChoice(Path(folder).expanduser(), quantize, gguf))

    @on(OptionList.OptionSelected)
    def chosen(self, event: OptionList.OptionSelected) -> None:
        self._export(event.option.id)

    @on(Input.Submitted)
    def folder_given(self, event: Input.Submitted) -> None:
        event.stop()
        choices = self.query_one(OptionList)
        highlighted = choices.highlighted
        self._export(choices.get_option_at_index(highlighted).id if highlighted is not None
                     else None)
