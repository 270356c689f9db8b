"""ModelsScreen: every model found, with its facts, and the folders searched for them.

Models come from $ZYQUO_HOME/models, the folders in config.toml (`[models] folders`), the
Hugging Face cache and LM Studio (docs/models-and-datasets.md); below them, the GGUF files of
LM Studio and Ollama, which `i` imports into $ZYQUO_HOME/models (the importer subprocess, in a
worker: the dashboard never imports mlx). `a` adds a folder to config.toml; enter starts a new
run with the highlighted model. Discovery reads only config.json, the safetensors headers and
the GGUF files' first bytes, in a worker thread.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static
from textual.worker import get_current_worker

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.formatting import DASH, fmt_bytes
from zyquo_tui.core.library.gguf_files import GGUFFile
from zyquo_tui.core.library.model_import import import_gguf_model
from zyquo_tui.core.library.models import READY, ModelInfo
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.dashboard.dialogs.text_prompt import TextPromptDialog
from zyquo_tui.dashboard.library_text import parameters_text
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen
from zyquo_tui.dashboard.screens.zyquo_screen import ZyquoScreen
from zyquo_tui.dashboard.setup_sources import setup_sources
from zyquo_tui.dashboard.widgets.title_bar import TitleBar
from zyquo_tui.resources import styles_dir

STATUS_LOOK = {
    "ready": ("✓ ready", "green"),
    "needs-conversion": ("↻ convert", "yellow"),
    "unsupported": ("✗ unsupported", "red"),
    "incomplete": ("✗ incomplete", "red"),
    "importable": ("⇩ importable", "cyan"),
}
# key, header, width (the name takes what the others leave, at least NAME_MIN)
COLUMNS = (("name", "Name", 0), ("status", "Status", 13), ("arch", "Arch", 8),
           ("params", "Params", 6), ("weights", "Size", 9), ("quant", "Quant", 6),
           ("chat", "Chat", 4))
NAME_MIN = 16
NAME_MAX = 48


def _params(count: int | None) -> str:
    return parameters_text(count).replace(" params", "") if count is not None else DASH


def model_cells(model: ModelInfo) -> tuple:
    word, style = STATUS_LOOK.get(model.status, (model.status, ""))
    quant = DASH
    if model.quantization:
        quant = f"{model.quantization.bits}-bit"
    elif model.weight_dtypes:
        quant = max(model.weight_dtypes, key=model.weight_dtypes.get).lower()
    return (
        Text(model.name),
        Text(word, style=style),
        model.architecture or DASH,
        _params(model.parameters),
        fmt_bytes(model.weight_bytes) if model.weight_bytes is not None else DASH,
        quant,
        "✓" if model.chat_template else "–",
    )


def gguf_cells(entry: GGUFFile) -> tuple:
    word, style = STATUS_LOOK.get(entry.status, (entry.status, ""))
    return (Text(entry.name), Text(word, style=style), entry.architecture or DASH, DASH,
            fmt_bytes(entry.size), "gguf", DASH)


def gguf_detail(entry: GGUFFile) -> Text:
    text = Text()
    text.append(entry.name, style="bold")
    text.append(f"  {entry.path} ({entry.source})\n", style="dim")
    if entry.importable:
        text.append(f"A GGUF file (version {entry.version}, {fmt_bytes(entry.size)}): i imports "
                    f"it as {entry.import_name}, an MLX model in $ZYQUO_HOME/models.")
    else:
        word, style = STATUS_LOOK.get(entry.status, (entry.status, ""))
        text.append(f"{word}: {entry.status_detail}", style=style)
    return text


def model_detail(model: ModelInfo) -> Text:
    text = Text()
    text.append(model.name, style="bold")
    text.append(f"  {model.path} ({model.source})\n", style="dim")
    if model.status != READY:
        word, style = STATUS_LOOK.get(model.status, (model.status, ""))
        text.append(f"{word}: {model.status_detail}\n", style=style)
    shape = []
    for label, value in (("hidden", model.hidden_size), ("layers", model.num_layers),
                         ("heads", model.num_heads), ("kv heads", model.num_kv_heads),
                         ("vocab", model.vocab_size), ("context", model.context_length)):
        if value is not None:
            shape.append(f"{label} {value}")
    if shape:
        text.append(" · ".join(shape) + "\n")
    facts = [parameters_text(model.parameters)]
    if model.weight_bytes is not None:
        facts.append(f"{fmt_bytes(model.weight_bytes)} in {model.weight_files} file"
                     f"{'s' if model.weight_files != 1 else ''}")
    if model.quantization:
        q = model.quantization
        facts.append(f"{q.bits}-bit, group {q.group_size}, {q.mode}"
                     + (" (some layers differ)" if q.per_layer else ""))
    if model.weight_dtypes:
        facts.append(", ".join(f"{dtype} {fmt_bytes(size)}"
                               for dtype, size in sorted(model.weight_dtypes.items())))
    facts.append("chat template" if model.chat_template else "no chat template: text data only")
    if model.mlx_module:
        facts.append(f"mlx-lm module {model.mlx_module}")
    text.append(" · ".join(facts))
    return text


def add_model_folder(home: Path, folder: str) -> bool:
    """Add `folder` to `[models] folders` in config.toml; False when it is there already.
    (Settings.save keeps the file's other keys: the dashboard's [keys], notifications.)"""
    settings = Settings.load(home)
    if folder in settings.model_folders:
        return False
    settings.model_folders.append(folder)
    settings.save(home)
    return True


class ModelsScreen(ZyquoScreen):
    """The model list (see the module docstring)."""

    AREA = "Models"
    CSS_PATH = str(styles_dir() / "setup.tcss")
    BINDINGS = [
        Binding("n", "new_run", "New run", id="models.new_run",
                tooltip="Set up a new run with the highlighted model (enter too)"),
        Binding("a", "add_folder", "Add folder", id="models.add_folder",
                tooltip="Search another folder for models (saved in config.toml)"),
        Binding("r", "rescan", "Rescan", id="models.rescan",
                tooltip="Look for models again"),
        Binding("i", "import_gguf", "Import", id="models.import",
                tooltip="Import the highlighted GGUF file as an MLX model "
                        "($ZYQUO_HOME/models)"),
        Binding("escape", "back", "Back", id="models.back", tooltip="Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.models: list[ModelInfo] = []
        self.gguf_files: list[GGUFFile] = []
        self.importing: str | None = None  # the GGUF file being imported, by name
        self.import_started = 0.0
        self.import_name = ""
        self.searched: list[tuple[str, str, bool]] = []
        self.discovered = False  # the first discovery is done

    def compose(self) -> ComposeResult:
        yield TitleBar("models", "Models · looking…", id="title")
        table = DataTable(id="models", cursor_type="row", zebra_stripes=False)
        others = sum(width + 2 for _, _, width in COLUMNS[1:])
        name_width = min(NAME_MAX, max(NAME_MIN, self.app.size.width - others - 4))
        for key, label, width in COLUMNS:
            table.add_column(label, key=key, width=width or name_width)
        yield table
        yield Static("", id="model-detail", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.rescan()

    def rescan(self) -> None:
        sources = setup_sources(self.app)

        def discover() -> None:
            try:
                models, searched, error = sources.models(), sources.search_folders(), None
            except UserError as problem:  # a broken config.toml
                models, searched, error = [], [], problem.message
            gguf_files = sources.gguf_files()
            self.app.call_from_thread(self._discovered, models, gguf_files, searched, error)
        self.run_worker(discover, thread=True, group="discover", exclusive=True,
                        exit_on_error=False, name="discover models")

    def _discovered(self, models: list[ModelInfo], gguf_files: list[GGUFFile],
                    searched: list[tuple[str, str, bool]], error: str | None) -> None:
        if not self.is_attached:
            return
        if error:
            self.notify(error, title="Models", severity="error", timeout=10)
        self.models = models
        self.gguf_files = gguf_files
        self.searched = searched
        self.discovered = True
        table = self.query_one(DataTable)
        table.clear()
        for model in models:
            table.add_row(*model_cells(model), key=str(model.path))
        for entry in gguf_files:
            table.add_row(*gguf_cells(entry), key=f"gguf:{entry.path}")
        self._show_title()
        self._show_detail()

    def _show_title(self) -> None:
        if self.importing:
            seconds = time.monotonic() - self.import_started
            # The library name, shorter than a file's listed name: the seconds stay in view.
            context = f"Models · importing as {self.import_name}… {seconds:.0f} s"
        elif self.models:
            ready = sum(m.ready for m in self.models)
            context = f"Models · {len(self.models)} found, {ready} ready"
        else:
            context = "Models · none found"
        importable = sum(f.importable for f in self.gguf_files)
        if importable and not self.importing:
            context += f", {importable} GGUF importable"
        self.query_one(TitleBar).context = context

    def _highlighted(self) -> ModelInfo | None:
        entry = self._highlighted_entry()
        return entry if isinstance(entry, ModelInfo) else None

    def _highlighted_entry(self) -> ModelInfo | GGUFFile | None:
        rows: list[ModelInfo | GGUFFile] = [*self.models, *self.gguf_files]
        table = self.query_one(DataTable)
        if not rows or table.cursor_row is None or table.cursor_row >= len(rows):
            return None
        return rows[table.cursor_row]

    @on(DataTable.RowHighlighted, "#models")
    def _highlight_moved(self) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        detail = self.query_one("#model-detail", Static)
        model = self._highlighted_entry()
        if isinstance(model, GGUFFile):
            text = gguf_detail(model)
        elif model is not None:
            text = model_detail(model)
        else:
            text = Text(
            "No models found. Build the sample (ctrl+p: Sample), put MLX models in "
            "$ZYQUO_HOME/models, or press a to add a folder that holds some.")
        text.append("\nSearched: ", style="bold")
        text.append("; ".join(f"{path} ({source}{'' if exists else ', missing'})"
                              for path, source, exists in self.searched), style="dim")
        detail.update(text)

    @on(DataTable.RowSelected, "#models")
    def _selected(self) -> None:
        self.action_new_run()

    def action_new_run(self) -> None:
        entry = self._highlighted_entry()
        if isinstance(entry, GGUFFile):
            self.notify(f"{entry.name} is a GGUF file: press i to import it first.",
                        title="Models", timeout=8)
            return
        model = self._highlighted()
        if model is None:
            return
        if not model.ready:
            self.notify(f"{model.name} cannot train here: {model.status_detail}",
                        title="Models", severity="error", timeout=10)
            return
        self.app.push_screen(NewRunScreen(model=str(model.path)))

    def action_rescan(self) -> None:
        self.query_one(TitleBar).context = "Models · looking…"
        self.rescan()

    def action_add_folder(self) -> None:
        home = self.app.store.home

        def chosen(path: str | None) -> None:
            if not path:
                return
            folder = Path(path).expanduser()
            if not folder.is_dir():
                self.notify(f"{folder}: no such folder.", title="Add folder", severity="error")
                return
            resolved = str(folder.resolve())
            try:
                if not add_model_folder(home, resolved):
                    self.notify(f"{resolved} is searched already.", title="Add folder")
                    return
            except (UserError, OSError) as error:
                self.notify(str(error), title="Add folder", severity="error", timeout=10)
                return
            self.notify(f"Added {resolved} to the model folders (config.toml).",
                        title="Add folder")
            self.action_rescan()
        self.app.push_screen(TextPromptDialog(
            "Search this folder for models", "Saved in config.toml ([models] folders); "
            "models up to three folders deep are found.", str(Path.home()) + "/"), chosen)

    def action_import_gguf(self) -> None:
        entry = self._highlighted_entry()
        if self.importing:
            self.notify(f"{self.importing} is being imported; one import at a time.",
                        title="Import")
            return
        if not isinstance(entry, GGUFFile):
            self.notify("Highlight a GGUF file (listed below the models) to import it.",
                        title="Import")
            return
        if not entry.importable:
            self.notify(entry.status_detail, title="Import", severity="error", timeout=10)
            return
        self.importing, self.import_started = entry.name, time.monotonic()
        self.import_name = entry.import_name
        self._show_title()
        self._ticker = self.set_interval(1.0, self._show_title)
        self.import_gguf(entry, self.app.store.home)

    @work(thread=True, group="import", exit_on_error=False, name="import a GGUF file")
    def import_gguf(self, entry: GGUFFile, home: Path) -> None:
        worker = get_current_worker()
        try:
            made, error = import_gguf_model(str(entry.path), name=entry.import_name, home=home,
                                            cancelled=lambda: worker.is_cancelled), None
        except UserError as problem:
            made, error = None, problem.message
        if not worker.is_cancelled:
            self.app.call_from_thread(self._imported, entry, made, error)

    def _imported(self, entry: GGUFFile, made: dict | None, error: str | None) -> None:
        self.importing = None
        self._ticker.stop()
        if not self.is_attached:
            return
        if error is not None:
            self.notify(error, title=f"Import of {entry.name} failed", severity="error",
                        timeout=15)
        else:
            self.notify(f"Imported {made['name']}: {made['path']}; it is ready to train.",
                        title="Import", timeout=10)
        self.action_rescan()
