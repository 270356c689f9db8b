"""CompareScreen: the runs marked on the runs list, side by side."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.formatting import DASH, fmt_bytes, fmt_duration, fmt_loss, fmt_rate
from zyquo_tui.core.store.comparison import (
    Comparison,
    compare_runs,
    letters,
    setting_text,
    stop_text,
)
from zyquo_tui.dashboard.screens.zyquo_screen import ZyquoScreen
from zyquo_tui.dashboard.widgets.compare_chart import (
    BY_STEP,
    BY_TOKENS,
    CompareChart,
    curve,
    run_colour,
)
from zyquo_tui.dashboard.widgets.title_bar import TitleBar

# The name last: on a narrow screen it is what gets cut (the letters name the runs).
FIGURE_COLUMNS = ("Run", "Best val", "At", "Final train", "Tok/s", "Peak mem", "Time",
                  "Stopped", "Name")


class CompareScreen(ZyquoScreen):
    """The loss curves of the marked runs overlaid (by step, or by tokens trained: `x`), each
    run's figures (best validation loss and its step, final train loss, tokens/s, peak memory,
    training time, why it stopped early) and the settings that differ between them. Runs are
    lettered A, B, C... in the order they were marked, in the chart's colours."""

    AREA = "Compare"
    BINDINGS = [
        Binding("x", "toggle_axis", "Steps/tokens", id="compare.axis",
                tooltip="Draw the losses against the step or against the tokens trained"),
        Binding("escape", "back", "Back", id="app.back", tooltip="Back to the runs"),
    ]

    def __init__(self, run_ids: list[str]) -> None:
        super().__init__()
        self.run_ids = list(run_ids)
        self.comparison: Comparison | None = None
        self.axis = BY_STEP

    def compose(self) -> ComposeResult:
        yield TitleBar("runs", f"compare · {len(self.run_ids)} runs", id="title")
        yield CompareChart(id="compare-chart")
        yield DataTable(id="compare-figures", cursor_type="none", zebra_stripes=False)
        yield DataTable(id="compare-settings", cursor_type="none", zebra_stripes=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        figures = self.query_one("#compare-figures", DataTable)
        figures.border_title = "Figures"
        settings = self.query_one("#compare-settings", DataTable)
        settings.border_title = "Settings that differ"
        store = self.service.store
        # Reading every run's events is file work: a thread, then the tables at once.
        self.run_worker(lambda: self._read(store), thread=True, exit_on_error=False,
                        name="compare runs")

    def _read(self, store) -> None:
        try:
            comparison = compare_runs(store, self.run_ids)
        except UserError as error:
            self.app.call_from_thread(self._failed, error.message)
            return
        self.app.call_from_thread(self.show, comparison)

    def _failed(self, message: str) -> None:
        self.notify(message, title="Compare", severity="error")
        self.app.pop_screen()

    def show(self, comparison: Comparison) -> None:
        self.comparison = comparison
        names = letters(len(comparison.figures))
        self._draw_chart()
        figures = self.query_one("#compare-figures", DataTable)
        figures.clear(columns=True)
        figures.add_columns(*FIGURE_COLUMNS)
        for i, (letter, f) in enumerate(zip(names, comparison.figures)):
            figures.add_row(
                Text(f"━━ {letter}", style=f"bold {run_colour(i)}"),
                fmt_loss(f.best_val_loss), DASH if f.best_val_step is None else str(f.best_val_step),
                fmt_loss(f.final_train_loss), fmt_rate(f.tokens_per_second),
                fmt_bytes(f.peak_memory_bytes), fmt_duration(f.duration_seconds),
                stop_text(f.stop_reason), f.name)
        settings = self.query_one("#compare-settings", DataTable)
        settings.clear(columns=True)
        settings.add_columns("Setting", *names)
        if not comparison.differences:
            settings.add_row(Text("the runs have the same settings", style="dim"),
                             *("" for _ in names))
        for key, values in comparison.differences.items():
            settings.add_row(key, *(setting_text(key, value) for value in values))

    def _draw_chart(self) -> None:
        if self.comparison is None:
            return
        curves = [curve(f.metrics, self.axis) for f in self.comparison.figures]
        self.query_one(CompareChart).show(curves, letters(len(curves)), self.axis)

    def action_toggle_axis(self) -> None:
        self.axis = BY_TOKENS if self.axis == BY_STEP else BY_STEP
        self._draw_chart()
