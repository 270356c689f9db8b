"""RunViewScreen: the base of the views of one run: its metrics, checkpoints and logs."""

from __future__ import annotations

from zyquo_tui.core.runs.run import Run
from zyquo_tui.dashboard.screens.run_verbs import RunVerbsScreen
from zyquo_tui.dashboard.widgets.title_bar import TitleBar


class RunViewScreen(RunVerbsScreen):
    """A view of the run `run_id`, which stays its subject whatever is selected on the runs
    list: the verbs act on it and the title bar names it."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def current_run_id(self) -> str | None:
        return self.run_id

    def show_title(self, view: str) -> Run | None:
        """Put the view and the run's name in the title bar; returns the run, or None when
        the store no longer holds it (the title says so)."""
        run = self.current_run()
        name = run.name if run is not None else f"{self.run_id} (not found)"
        self.query_one(TitleBar).context = f"{view} · {name}"
        return run
