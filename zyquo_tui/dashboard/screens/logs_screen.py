"""LogsScreen: a run's trainer.log, with follow mode."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer

from zyquo_tui.dashboard.messages import RunsRefreshed
from zyquo_tui.dashboard.screens.run_verbs import VERB_BINDINGS
from zyquo_tui.dashboard.screens.run_view_screen import RunViewScreen
from zyquo_tui.dashboard.widgets.title_bar import TitleBar
from zyquo_tui.dashboard.widgets.trainer_log import TrainerLog

TAIL_SECONDS = 0.5


class LogsScreen(RunViewScreen):
    """The trainer's stdout and stderr. Follow mode (on at first) keeps the view at the end as
    lines arrive; `f` pauses it to read back, `g` and `G` jump to the top and the end."""

    AREA = "Logs"
    BINDINGS = [
        Binding("f", "toggle_follow", "Follow", id="logs.follow",
                tooltip="Keep the view at the end as lines arrive, or stop to read back"),
        Binding("g", "top", "Top", id="logs.top", tooltip="Jump to the first line"),
        Binding("G", "end", "End", id="logs.end", tooltip="Jump to the last line"),
        VERB_BINDINGS["cancel"], VERB_BINDINGS["checkpoints"],
        Binding("escape", "back", "Back", id="app.back", tooltip="Back"),
    ]

    def compose(self) -> ComposeResult:
        yield TitleBar("logs", id="title")
        yield TrainerLog(self.service.store.log_path(self.run_id), id="log")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        log = self.query_one(TrainerLog)
        log.read_new()
        log.focus()
        self._update_title()
        self.set_interval(TAIL_SECONDS, self.tail, name="tail trainer.log")

    def tail(self) -> None:
        self.query_one(TrainerLog).read_new()

    def on_runs_refreshed(self, message: RunsRefreshed) -> None:
        self._update_title()
        self.refresh_verbs()

    def _update_title(self) -> None:
        run = self.current_run()
        log = self.query_one(TrainerLog)
        name = run.name if run else self.run_id
        mode = "following" if log.auto_scroll else "paused, f follows"
        state = f" · {run.state.value}" if run else ""
        self.query_one(TitleBar).context = f"Logs ({mode}) · {name}{state}"

    def action_toggle_follow(self) -> None:
        log = self.query_one(TrainerLog)
        log.auto_scroll = not log.auto_scroll
        if log.auto_scroll:
            log.scroll_end(animate=False)
        self._update_title()

    def action_top(self) -> None:
        log = self.query_one(TrainerLog)
        log.auto_scroll = False
        log.scroll_home(animate=False)
        self._update_title()

    def action_end(self) -> None:
        self.query_one(TrainerLog).scroll_end(animate=False)
