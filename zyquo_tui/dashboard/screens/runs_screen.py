"""RunsScreen: the home screen, every run in the store in one table."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Input

from zyquo_tui.dashboard.messages import MetricsReceived, RunsRefreshed, SampleChanged
from zyquo_tui.dashboard.screens.compare_screen import CompareScreen
from zyquo_tui.dashboard.screens.run_verbs import VERB_BINDINGS, VERBS, RunVerbsScreen
from zyquo_tui.dashboard.widgets.empty_store_panel import EmptyStorePanel
from zyquo_tui.dashboard.widgets.filter_bar import FilterBar
from zyquo_tui.dashboard.widgets.runs_table import GROUP_PREFIX, SORTABLE, RunsTable
from zyquo_tui.dashboard.widgets.title_bar import TitleBar

# Live metrics of active runs change the table at most this often.
TABLE_REFRESH_SECONDS = 0.5


class RunsScreen(RunVerbsScreen):
    """Every run with its state, progress, losses, speed and timing; `/` filters, `o` sorts,
    enter opens a run's live metrics, `g` folds a grid into one line and `G` compares its
    runs. On an empty store it offers to build and train the sample instead."""

    AREA = "Runs"
    BINDINGS = [
        Binding("slash", "filter", "Filter", id="runs.filter",
                tooltip="Show only runs whose name, state, model, dataset or id match"),
        Binding("o", "sort", "Sort", id="runs.sort",
                tooltip="Sort by the next column (its header shows an arrow)"),
        Binding("O", "reverse_sort", "Reverse", show=False, id="runs.reverse",
                tooltip="Reverse the sort order"),
        VERB_BINDINGS["start"], VERB_BINDINGS["cancel"], VERB_BINDINGS["resume"],
        VERB_BINDINGS["logs"], VERB_BINDINGS["checkpoints"],
        Binding("b", "build_sample", "Build sample", id="sample.build",
                tooltip="Build the tiny sample model (offline, under a minute)"),
        Binding("t", "train_sample", "Train sample", id="sample.train",
                tooltip="Train the sample model on the sample dataset (60 steps)"),
        # `t` before the sample exists: unlisted (the footer offers b then), but it answers.
        Binding("t", "sample_not_ready", show=False),
        Binding("escape", "clear_filter", "Clear filter", id="runs.clear_filter"),
        # Comparing runs: space marks (out of the footer: ? help and the palette list it),
        # C opens the comparison of the marked runs (in the footer once one is marked).
        Binding("space", "toggle_mark", "Mark for compare", show=False, id="runs.mark",
                tooltip="Mark the run for comparison, or unmark it"),
        Binding("C", "compare", "Compare", id="runs.compare",
                tooltip="Compare the marked runs: loss curves, differing settings, figures"),
        # A grid (`runs grid`): in the footer while the cursor is on one of its runs.
        Binding("g", "toggle_group", "Fold grid", id="runs.fold_grid",
                tooltip="Collapse the grid of the selected run into one line, or expand it"),
        Binding("G", "compare_group", "Compare grid", id="runs.compare_grid",
                tooltip="Compare every run of the selected grid"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._refresh_timer = None

    def compose(self) -> ComposeResult:
        yield TitleBar("runs", "Runs", id="title")
        yield RunsTable(id="runs")
        yield EmptyStorePanel(id="empty")
        yield FilterBar(id="filter")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.refresh_rows()
        self.query_one(RunsTable).focus()

    # -- data -------------------------------------------------------------------------------------

    @property
    def table(self) -> RunsTable:
        return self.query_one(RunsTable)

    def refresh_rows(self) -> None:
        self._refresh_timer = None
        service = self.service
        table = self.table
        table.show(service.rows())
        empty = service.loaded and not service.runs
        table.display = not empty
        panel = self.query_one(EmptyStorePanel)
        panel.display = empty
        panel.sample_ready = service.sample_ready
        panel.building = service.sample_building
        self._update_title()
        self.refresh_verbs(empty, service.sample_ready, service.sample_building,
                           bool(table.filter_text), table.selected_group())

    def _update_title(self) -> None:
        service = self.service
        table = self.table
        total = len(service.runs)
        active = len(service.active_runs())
        noun = "run" if total == 1 else "runs"
        parts = [f"{table.shown_count}/{total} {noun}" if table.filter_text else f"{total} {noun}"]
        if active:
            parts.append(f"{active} active")
        if service.queue:
            parts.append(f"{len(service.queue)} queued")
        if table.filter_text:
            parts.append(f"filter “{table.filter_text}”")
        if table.marked:
            parts.append(f"{len(table.marked)} marked")
        self.query_one(TitleBar).context = " · ".join(parts)

    # The App tells only the screen on top; a screen shown again catches up on resume.
    def on_runs_refreshed(self, message: RunsRefreshed) -> None:
        self.refresh_rows()

    def on_sample_changed(self, message: SampleChanged) -> None:
        self.refresh_rows()

    def on_metrics_received(self, message: MetricsReceived) -> None:
        if self._refresh_timer is None:
            self._refresh_timer = self.set_timer(TABLE_REFRESH_SECONDS, self.refresh_rows)

    def on_screen_resume(self) -> None:
        self.refresh_rows()

    def current_run_id(self) -> str | None:
        return self.table.selected_run_id()

    # -- table events -----------------------------------------------------------------------------

    @on(DataTable.RowSelected, "#runs")
    def open_selected(self, event: DataTable.RowSelected) -> None:
        if str(event.row_key.value).startswith(GROUP_PREFIX):
            self.action_toggle_group()  # enter on a collapsed grid opens it out
            return
        self.open_run(event.row_key.value)

    @on(DataTable.RowHighlighted, "#runs")
    def selection_moved(self) -> None:
        self.refresh_verbs(self.table.selected_group())  # g and G show on a grid's runs

    @on(DataTable.HeaderSelected, "#runs")
    def sort_by_header(self, event: DataTable.HeaderSelected) -> None:
        self.table.set_sort(event.column_key.value)
        self._update_title()

    def open_run(self, run_id: str | None) -> None:
        if run_id is None:
            return
        record = self.service.runs.get(run_id)
        if record is not None and self.service.run(run_id) is None:
            self.notify(f"Run {run_id} is damaged: {record.reason}. Its files are kept as they "
                        f"are in {record.path}.", severity="error", title="Damaged run")
            return
        self.app.show_view("run", run_id)

    def action_open_run(self) -> None:
        self.open_run(self.current_run_id())

    # -- filter and sort --------------------------------------------------------------------------

    def action_filter(self) -> None:
        bar = self.query_one(FilterBar)
        bar.add_class("-shown")
        bar.focus()

    @on(Input.Changed, "#filter")
    def filter_changed(self, event: Input.Changed) -> None:
        self.table.set_filter(event.value)
        self._update_title()

    @on(Input.Submitted, "#filter")
    def filter_kept(self) -> None:
        bar = self.query_one(FilterBar)
        if not bar.value:
            bar.remove_class("-shown")
        self.table.focus()

    def action_clear_filter(self) -> None:
        bar = self.query_one(FilterBar)
        bar.value = ""
        bar.remove_class("-shown")
        self.table.set_filter("")
        self.table.focus()
        self._update_title()

    def action_sort(self) -> None:
        table = self.table
        following = SORTABLE[(SORTABLE.index(table.sort_column) + 1) % len(SORTABLE)]
        table.set_sort(following, reverse=following == "id")
        self._update_title()

    def action_reverse_sort(self) -> None:
        table = self.table
        table.set_sort(table.sort_column, reverse=not table.sort_reverse)
        self._update_title()

    # -- comparing runs ---------------------------------------------------------------------------

    def action_toggle_mark(self) -> None:
        run_id = self.current_run_id()
        if run_id is None or self.service.run(run_id) is None:
            return  # nothing selected, or a damaged run: nothing to compare
        self.table.toggle_mark(run_id)
        self._update_title()
        self.refresh_bindings()

    def action_compare(self) -> None:
        marked = list(self.table.marked)
        if len(marked) < 2:
            self.notify("Mark two runs or more with space, then press C.", title="Compare")
            return
        self.app.push_screen(CompareScreen(marked))

    # -- grids ------------------------------------------------------------------------------------

    def action_toggle_group(self) -> None:
        group = self.table.selected_group()
        if group is None:
            return
        self.table.toggle_group(group)
        self.refresh_bindings()

    def action_compare_group(self) -> None:
        group = self.table.selected_group()
        if group is None:
            return
        run_ids = [run_id for run_id in self.table.group_run_ids(group)
                   if self.service.run(run_id) is not None]
        if len(run_ids) < 2:
            self.notify("This grid has fewer than two runs that can be read.", title="Compare")
            return
        self.app.push_screen(CompareScreen(run_ids))

    # -- the sample -------------------------------------------------------------------------------

    def action_build_sample(self) -> None:
        self.service.build_sample()

    def action_train_sample(self) -> None:
        self.service.train_sample(done=lambda run: self.app.show_view("run", run.id))

    def action_sample_not_ready(self) -> None:
        if self.service.sample_building:
            self.notify("The sample model is being built; press t when it is ready.",
                        title="Sample")
        else:
            self.notify("The sample model is not built yet: press b to build it (under a minute), "
                        "then t to train it.", title="Sample")

    # -- which keys apply -------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in VERBS:
            return self.verb_check(action)
        service = self.service
        if action == "build_sample":
            return not service.runs and not service.sample_ready and not service.sample_building
        if action == "train_sample":
            return service.sample_ready and not service.runs
        if action == "sample_not_ready":
            return not service.sample_ready and not service.runs
        if action in ("filter", "sort", "reverse_sort"):
            return bool(service.runs)
        if action == "toggle_mark":
            return self.service.run(self.current_run_id()) is not None
        if action == "compare":  # shown (dimmed) from the first mark, usable from the second
            marked = len(self.table.marked)
            return True if marked >= 2 else None if marked else False
        if action in ("toggle_group", "compare_group"):
            return self.table.selected_group() is not None
        if action == "clear_filter":
            return bool(self.table.filter_text) or self.query_one(FilterBar).has_class("-shown")
        return True
