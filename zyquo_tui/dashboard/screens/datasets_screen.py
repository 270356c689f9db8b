"""DatasetsScreen: the datasets found, each one's validation report, and its tokens.

For the highlighted dataset: the validation report (format, rows per split, every problem as
file:line), then, on `t`, token statistics under a chosen model's own tokenizer and chat
template (rows, min, median, p95, max, total, rows max_seq_length cuts) and one row as
training sees it with mask_prompt: the masked prompt, the trained tokens, the cut tail. `[`
and `]` preview the previous or next row. A preference dataset shows one pair side by side
(the prompt, then chosen and rejected next to each other), and `[` `]` move through the pairs.
Validation and counting run in worker threads, and counting is cancelled when the dataset or
model changes. Counts are remembered for the session (SetupSources) while the files are
unchanged, so going back to a row shows it at once.
"""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Footer, Select, Static
from textual.worker import get_current_worker

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.formatting import DASH, fmt_bytes
from zyquo_tui.core.library.data_argument import resolve_data
from zyquo_tui.core.library.datasets import DatasetInfo, DatasetReport
from zyquo_tui.core.library.models import ModelInfo
from zyquo_tui.core.library.rows import PREFERENCE
from zyquo_tui.core.library.token_stats import DEFAULT_MAX_SEQ_LENGTH, TokenStats
from zyquo_tui.dashboard.dialogs.text_prompt import TextPromptDialog
from zyquo_tui.dashboard.library_text import (
    dataset_problems,
    dataset_summary,
    model_label,
    pair_preview,
)
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen
from zyquo_tui.dashboard.screens.zyquo_screen import ZyquoScreen
from zyquo_tui.dashboard.setup_sources import setup_sources
from zyquo_tui.dashboard.widgets.title_bar import TitleBar
from zyquo_tui.resources import styles_dir

COLUMNS = (("name", "Name", 20), ("format", "Format", 11), ("train", "Train", 9),
           ("valid", "Valid", 9), ("test", "Test", 9), ("source", "Source", 6))
SPAN_STYLES = {"masked": "dim", "trained": "bold green", "truncated": "red strike"}


def dataset_cells(info: DatasetInfo) -> tuple:
    sizes = [fmt_bytes(info.split_bytes[s]) if s in info.split_bytes else DASH
             for s in ("train", "valid", "test")]
    return (info.name, info.format or "?", *sizes, info.source)


def stats_table(stats: TokenStats) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for label in ("split", "rows", "min", "median", "p95", "max", "tokens", "cut"):
        table.add_column(label, justify="left" if label == "split" else "right")
    for split, s in stats.splits.items():
        table.add_row(split, str(s.rows), str(s.min), f"{s.median:g}", str(s.p95), str(s.max),
                      str(s.total_tokens),
                      Text(str(s.truncated_rows), style="bold red" if s.truncated_rows else ""))
    return table


def preview_text(stats: TokenStats) -> Text:
    preview = stats.preview
    if preview is None:
        return Text("No row to preview.", style="dim")
    text = Text()
    text.append(f"{preview.split}.jsonl line {preview.line}: {preview.tokens} tokens  ",
                style="bold")
    text.append("([ ] other rows)  ", style="dim")
    for kind, style in SPAN_STYLES.items():
        text.append(kind, style=style)
        text.append(" ")
    text.append("\n")
    for span in preview.spans:
        shown = span.text.replace("\n", "↵\n")
        text.append(shown, style=SPAN_STYLES.get(span.kind, ""))
    counts = {}
    for span in preview.spans:
        counts[span.kind] = counts.get(span.kind, 0) + span.tokens
    text.append("\n" + " · ".join(f"{kind} {count} tokens" for kind, count in counts.items()),
                style="dim")
    return text


class DatasetsScreen(ZyquoScreen):
    """The dataset list, its validation and token statistics (see the module docstring)."""

    AREA = "Datasets"
    CSS_PATH = str(styles_dir() / "setup.tcss")
    BINDINGS = [
        Binding("n", "new_run", "New run", id="datasets.new_run",
                tooltip="Set up a new run with the highlighted dataset (enter too)"),
        Binding("t", "count_tokens", "Tokens", id="datasets.tokens",
                tooltip="Token statistics and a masked/trained preview under the chosen "
                        "model's tokenizer"),
        Binding("left_square_bracket", "preview(-1)", "Prev row", id="datasets.preview.prev",
                show=False,
                tooltip="Preview the previous row"),
        Binding("right_square_bracket", "preview(1)", "Next row", id="datasets.preview.next",
                show=False,
                tooltip="Preview the next row"),
        Binding("o", "open_folder", "Open", id="datasets.open",
                tooltip="Check a dataset folder that is not listed"),
        Binding("escape", "back", "Back", id="datasets.back", tooltip="Back"),
    ]

    def __init__(self, model: str | None = None) -> None:
        super().__init__()
        self.datasets: list[DatasetInfo] = []
        self.models: list[ModelInfo] = []
        self.extra: list[str] = []
        self.model_path = model
        self.preview_line = 1
        self.report: DatasetReport | None = None
        self.stats: TokenStats | None = None
        self.stats_key: tuple | None = None

    def compose(self) -> ComposeResult:
        yield TitleBar("datasets", "Datasets · looking…", id="title")
        table = DataTable(id="datasets", cursor_type="row")
        for key, label, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        yield table
        with VerticalScroll(id="dataset-detail"):
            yield Static("Validation", classes="section", id="validation-title")
            yield Static("", id="validation", markup=False)
            yield Static("", id="problems", markup=False)
            yield Static("", id="pair", markup=False)
            yield Static("Tokens", classes="section")
            with Horizontal(classes="tokens-line"):
                yield Static("Tokenize with", classes="field-label")
                yield Select([], prompt="no models", compact=True, id="token-model")
            yield Static("", id="tokens", markup=False)
            yield Static("", id="preview", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.set_class(self.app.size.height >= 36, "-tall")
        self.query_one(DataTable).focus()
        self.rescan()

    def on_resize(self) -> None:
        self.set_class(self.app.size.height >= 36, "-tall")

    @property
    def sources(self):
        return setup_sources(self.app)

    def rescan(self) -> None:
        sources = self.sources
        extra = list(self.extra)

        def discover() -> None:
            try:
                datasets = sources.datasets(extra)
                models = [m for m in sources.models() if m.ready]
            except UserError as error:
                self.app.call_from_thread(self.notify, error.message, severity="error")
                datasets, models = [], []
            self.app.call_from_thread(self._discovered, datasets, models)
        self.run_worker(discover, thread=True, group="discover", exclusive=True,
                        exit_on_error=False, name="discover datasets")

    def _discovered(self, datasets: list[DatasetInfo], models: list[ModelInfo]) -> None:
        if not self.is_attached:
            return
        self.datasets = datasets
        self.models = models
        table = self.query_one(DataTable)
        table.clear()
        for info in datasets:
            table.add_row(*dataset_cells(info), key=str(info.path))
        self.query_one(TitleBar).context = f"Datasets · {len(datasets)} found"
        select = self.query_one("#token-model", Select)
        paths = [str(m.path) for m in models]
        with self.prevent(Select.Changed):
            select.set_options([(model_label(m), str(m.path)) for m in models])
            if self.model_path not in paths:
                with_template = [str(m.path) for m in models if m.chat_template]
                self.model_path = (with_template or paths or [None])[0]
            if self.model_path:
                select.value = self.model_path
        self._show_dataset()

    # -- the highlighted dataset ----------------------------------------------------------------

    def current(self) -> DatasetInfo | None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        if not self.datasets or row is None or row >= len(self.datasets):
            return None
        return self.datasets[row]

    @on(DataTable.RowSelected, "#datasets")
    def _selected(self) -> None:
        self.action_new_run()

    @on(DataTable.RowHighlighted, "#datasets")
    def _moved(self) -> None:
        self.preview_line = 1
        self._show_dataset()

    def _show_dataset(self) -> None:
        info = self.current()
        self.report = None
        self.stats = None
        self.stats_key = None
        self.workers.cancel_group(self, "tokens")
        validation = self.query_one("#validation", Static)
        problems = self.query_one("#problems", Static)
        problems.update("")
        problems.display = False
        self.query_one("#pair", Static).display = False
        self._show_tokens_hint()
        if info is None:
            validation.update("No datasets found: put folders with train.jsonl (and "
                              "valid.jsonl) in $ZYQUO_HOME/datasets, or press o to open one.")
            return
        path = str(info.path)
        cached = self.sources.cached_validation(path)
        if cached is not None:
            self._validated(path, cached, None)
            return
        validation.update(f"Checking every row of {info.name}…")

        def validate() -> None:
            try:
                report, error = self.sources.validation(path), None
            except (OSError, UserError) as problem:
                report, error = None, str(problem)
            self.app.call_from_thread(self._validated, path, report, error)
        self.run_worker(validate, thread=True, group="validate", exclusive=True,
                        exit_on_error=False, name=f"validate {path}")

    def _validated(self, path: str, report: DatasetReport | None, error: str | None) -> None:
        info = self.current()
        if not self.is_attached or info is None or str(info.path) != path:
            return
        self.report = report
        validation = self.query_one("#validation", Static)
        if report is None:
            validation.update(f"✗ cannot check {path}: {error}")
            return
        summary = Text(f"{path}\n", style="dim")
        summary.append_text(dataset_summary(report))
        validation.update(summary)
        problems = self.query_one("#problems", Static)
        problems.update(dataset_problems(report, limit=200) if report.problems else "")
        problems.display = bool(report.problems)
        self._show_pair()
        self._show_tokens_hint()

    def _show_pair(self) -> None:
        """A preference dataset's pair at the preview line, side by side."""
        pair = self.query_one("#pair", Static)
        info = self.current()
        if info is None or self.report is None or self.report.format != PREFERENCE:
            pair.display = False
            return
        where = f"train.jsonl line {self.preview_line}"
        try:
            with open(info.path / "train.jsonl", encoding="utf-8") as handle:
                line = next(islice(handle, self.preview_line - 1, None), "")
            row = json.loads(line)
        except (OSError, ValueError) as error:
            pair.update(Text(f"{where}: cannot read it ({error}).", style="dim"))
        else:
            pair.update(pair_preview(row, where) if isinstance(row, dict)
                        else Text(f"{where}: not a preference pair.", style="dim"))
        pair.display = True

    def _show_tokens_hint(self) -> None:
        tokens = self.query_one("#tokens", Static)
        self.query_one("#preview", Static).update("")
        if self.report is not None and not self.report.ok:
            tokens.update(Text("Token statistics wait until the errors above are fixed.",
                               style="dim"))
        elif self.model_path is None:
            tokens.update(Text("No model to tokenize with: build the sample or add a model "
                               "folder (Models screen).", style="dim"))
        else:
            tokens.update(Text(f"Press t to count tokens with this model (max_seq_length "
                               f"{DEFAULT_MAX_SEQ_LENGTH}).", style="dim"))

    @on(Select.Changed, "#token-model")
    def _model_changed(self, event: Select.Changed) -> None:
        self.model_path = None if event.value == Select.NULL else str(event.value)
        self.workers.cancel_group(self, "tokens")
        self.stats = None
        self.stats_key = None
        self._show_tokens_hint()

    # -- token statistics -----------------------------------------------------------------------

    def action_count_tokens(self) -> None:
        info = self.current()
        if info is None:
            return
        if self.model_path is None:
            self.notify("Pick a model to tokenize with.", title="Tokens", severity="error")
            return
        if self.report is not None and not self.report.ok:
            self.notify("The dataset has errors; fix them first (they are listed above).",
                        title="Tokens", severity="error")
            return
        key = (str(info.path), self.model_path, self.preview_line)
        self.stats_key = key
        data, model, line = key
        sources = self.sources
        counted = sources.cached_token_stats(data, model, DEFAULT_MAX_SEQ_LENGTH, line)
        if counted is not None:  # a row seen before: at once
            self.workers.cancel_group(self, "tokens")
            self._counted(key, counted, None)
            return
        counting = Text("Counting with the model's tokenizer (a subprocess, seconds)…",
                        style="italic")
        if self.stats is None:
            self.query_one("#tokens", Static).update(counting)
            self.query_one("#preview", Static).update("")
        else:  # another row of the same dataset and model: the statistics stay meanwhile
            self.query_one("#preview", Static).update(counting)

        def count() -> None:
            worker = get_current_worker()
            try:
                stats, error = sources.counted_token_stats(
                    data, model, DEFAULT_MAX_SEQ_LENGTH, line, lambda: worker.is_cancelled), None
            except UserError as problem:
                where = ""
                if getattr(problem, "file", None):
                    where = f"{problem.file}:{problem.line}: " if problem.line else \
                        f"{problem.file}: "
                stats, error = None, where + problem.message
            if not worker.is_cancelled:
                self.app.call_from_thread(self._counted, key, stats, error)
        self.run_worker(count, thread=True, group="tokens", exclusive=True,
                        exit_on_error=False, name="count tokens")

    def _counted(self, key: tuple, stats: TokenStats | None, error: str | None) -> None:
        if not self.is_attached or key != self.stats_key:
            return
        self.stats = stats
        tokens = self.query_one("#tokens", Static)
        if stats is None:
            tokens.update(Text(f"✗ {error}", style="red"))
            self.query_one("#preview", Static).update("")
            return
        table = stats_table(stats)
        if stats.note:
            from rich.console import Group
            tokens.update(Group(table, Text(stats.note, style="dim")))
        else:
            tokens.update(table)
        self.query_one("#preview", Static).update(preview_text(stats))

    def action_preview(self, step: int) -> None:
        report = self.report
        rows = report.rows.get("train", 0) if report is not None else 0
        line = self.preview_line + step
        if line < 1 or (rows and line > rows):
            return
        self.preview_line = line
        self._show_pair()
        if self.model_path is not None or self.report is None or \
                self.report.format != PREFERENCE:
            self.action_count_tokens()

    # -- other keys -----------------------------------------------------------------------------

    def action_new_run(self) -> None:
        info = self.current()
        if info is not None:
            self.app.push_screen(NewRunScreen(data=str(info.path), model=self.model_path))

    def action_open_folder(self) -> None:
        def chosen(path: str | None) -> None:
            if path and path.strip():
                self.run_worker(lambda: self._open(path.strip()), thread=True, group="open",
                                exclusive=True, exit_on_error=False, name="open a dataset")
        self.app.push_screen(TextPromptDialog(
            "Check this dataset", "A folder with train.jsonl (and valid.jsonl, test.jsonl), "
            "parquet files, or a Hugging Face dataset id in the local cache (converted into "
            "the store).", str(Path.cwd()) + "/"), chosen)

    def _open(self, path: str) -> None:
        """In a worker: what `path` names as a dataset folder (parquet files and a cached
        Hugging Face id are converted, as a run's --data is), added to the list."""
        try:
            folder = Path(resolve_data(path)).expanduser()
        except UserError as error:
            self.app.call_from_thread(self.notify, error.message, title="Open dataset",
                                      severity="error")
            return
        if not (folder / "train.jsonl").is_file():
            self.app.call_from_thread(
                self.notify, f"{folder} has no train.jsonl, so it is not a dataset folder.",
                title="Open dataset", severity="error")
            return
        self.app.call_from_thread(self._opened, str(folder.resolve()))

    def _opened(self, folder: str) -> None:
        self.extra.append(folder)
        self.rescan()
