"""The dashboard: ZyquoApp, a window onto the run store, and `run_dashboard()` to open it.

Training never runs inside this process: trainers live in detached runner processes, so the
dashboard can quit, crash or lose its SSH session while they go on, and the next dashboard
finds everything in the store. Nothing here imports mlx (tests/unit/test_dashboard_units.py checks).
"""

from __future__ import annotations

import gc
import logging
import time
from functools import partial
from pathlib import Path
from typing import Callable, Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import DamagedRun, RunStore
from zyquo_tui.dashboard.dialogs.help import HelpDialog
from zyquo_tui.dashboard.dialogs.machine import MachineDialog
from zyquo_tui.dashboard.messages import (
    MetricsReceived,
    RunEnded,
    RunSteppedDown,
    RunsRefreshed,
    RunWarned,
    SampleChanged,
)
from zyquo_tui.core.store.user_settings import NotificationSettings
from zyquo_tui.dashboard.notify import Notifier
from zyquo_tui.dashboard.run_service import RunService
from zyquo_tui.dashboard.screens.checkpoints_screen import CheckpointsScreen
from zyquo_tui.dashboard.screens.datasets_screen import DatasetsScreen
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen
from zyquo_tui.dashboard.screens.logs_screen import LogsScreen
from zyquo_tui.dashboard.screens.models_screen import ModelsScreen
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen
from zyquo_tui.dashboard.screens.runs_screen import RunsScreen
from zyquo_tui.resources import styles_dir

log = logging.getLogger(__name__)

RUN_VIEWS = {"run": LiveMetricsScreen, "checkpoints": CheckpointsScreen, "logs": LogsScreen}
SETUP_SCREENS = {"new_run": NewRunScreen, "machine": MachineDialog, "models": ModelsScreen,
                 "datasets": DatasetsScreen}


class ZyquoApp(App[None]):
    """The dashboard. Owns the RunService (store polling, live feeds, actions) and the
    Notifier; screens come and go above the RunsScreen, which is always at the bottom.

    `clock` gives the time for elapsed figures (tests fix it); `notifications` overrides the
    [notifications] settings of config.toml; `poll_interval` is how often the store is read.
    """

    TITLE = "zyquo-tui"
    # setup.tcss is read here too, with the rest: read when the first setup screen opens, it
    # would restyle every screen of the app then.
    CSS_PATH = [str(styles_dir() / "dashboard.tcss"), str(styles_dir() / "setup.tcss")]
    BINDINGS = [
        Binding("question_mark", "help", "Help", id="app.help",
                tooltip="Every key that works here"),
        Binding("q", "quit_dashboard", "Quit", id="app.quit", show=False,
                tooltip="Quit the dashboard; training goes on in the background"),
        Binding("1", "show_view('runs')", "Go to runs", show=False, id="app.view.runs"),
        Binding("2", "show_view('run')", "Go to metrics", show=False, id="app.view.run"),
        Binding("3", "show_view('checkpoints')", "Go to checkpoints", show=False,
                id="app.view.checkpoints"),
        Binding("4", "show_view('logs')", "Go to logs", show=False, id="app.view.logs"),
        # The setup screens (docs/setup.md); out of the footer, in ? help and the palette.
        Binding("n", "new_run", "New run", show=False, id="app.new_run",
                tooltip="Set up a new run, with its memory verdict as you type"),
        Binding("N", "new_run_like", "New run like this one", show=False,
                id="app.new_run_like", tooltip="A new run with the selected run's settings"),
        Binding("m", "machine", "Machine", show=False, id="app.machine",
                tooltip="Memory, MLX budget, swap, load and GPU; what training uses now"),
        Binding("M", "models", "Models", show=False, id="app.models",
                tooltip="The models found, their facts, and the folders searched"),
        Binding("D", "datasets", "Datasets", show=False, id="app.datasets",
                tooltip="The datasets found, their problems and token statistics"),
    ]

    def __init__(self, store: RunStore | None = None, *, clock: Callable[[], float] = time.time,
                 notifications: NotificationSettings | None = None,
                 poll_interval: float = 1.0) -> None:
        super().__init__()
        self.store = store or RunStore()
        self.clock = clock
        self.smoothing = True
        self.service = RunService(self, self.store, clock=clock, poll_interval=poll_interval)
        self.notifier = Notifier(self, notifications or self.service.settings.notifications)
        self.ended_runs: list[tuple[str, str]] = []

    # -- start ------------------------------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        return RunsScreen()

    def on_mount(self) -> None:
        self._load_keymap()
        self.service.begin_polling()
        if self.service.settings_problem:
            self.notify(self.service.settings_problem, severity="error", title="config.toml",
                        timeout=15)

    def _load_keymap(self) -> None:
        """[keys] in config.toml maps binding ids to keys, e.g. `"run.cancel" = "x"`."""
        if self.service.settings.keys:
            self.set_keymap(dict(self.service.settings.keys))

    # -- messages from the service ----------------------------------------------------------------

    def _forward(self, make: Callable[[], object]) -> None:
        # Only the screen on top hears it: waking a covered screen costs a full repaint, and
        # every screen catches up when it is shown again (on_screen_resume).
        if self.screen_stack:  # none while the app closes
            self.screen.post_message(make())

    def on_runs_refreshed(self, message: RunsRefreshed) -> None:
        self._forward(RunsRefreshed)
        _freeze_startup_objects()

    def on_metrics_received(self, message: MetricsReceived) -> None:
        self._forward(lambda: MetricsReceived(message.run_id))

    def on_sample_changed(self, message: SampleChanged) -> None:
        self._forward(SampleChanged)

    def on_run_warned(self, message: RunWarned) -> None:
        run = self.service.run(message.run_id)
        name = run.name if run is not None else message.run_id
        self.notifier.send("zyquo-tui: run diverging", f"{name}: {message.message}",
                           failed=False, warning=True)

    def on_run_stepped_down(self, message: RunSteppedDown) -> None:
        run = self.service.run(message.run_id)
        name = run.name if run is not None else message.run_id
        self.notifier.send("zyquo-tui: run out of memory",
                           f"{name} ran out of memory and resumed with {message.change}.",
                           failed=False, warning=True)

    def on_run_ended(self, message: RunEnded) -> None:
        run = self.service.run(message.run_id)
        if run is None:
            return
        self.ended_runs.append((run.id, run.state.value))
        failed = run.state in (RunState.FAILED, RunState.INTERRUPTED)
        feed = self.service.feed(run.id)
        summary = run.summary or {}
        # The summary is the trainer's own last word; the feed may not have caught up yet.
        loaded = feed is not None and feed.loaded
        step = summary.get("step")
        if step is None and loaded:
            step = feed.metrics.step
        at = f" at step {step}" if step is not None else ""
        if run.state is RunState.COMPLETED:
            best = summary.get("best_val_loss")
            if best is None and loaded and feed.metrics.best_val() is not None:
                best = feed.metrics.best_val()[1]
            reward = summary.get("reward_mean")
            if reward is None and loaded:
                reward = feed.metrics.series["reward_mean"].last
            # A grpo run's validation loss is its objective, near 0 whatever it learnt: its
            # mean reward is what says how it did.
            if run.objective == "grpo" and reward is not None:
                figure = f"; mean reward {reward:.4f}."
            else:
                figure = f"; best validation loss {best:.4f}." if best is not None else "."
            body = f"{run.name} completed" + (f" {step} steps" if step is not None else "") \
                + figure
            if summary.get("stop_message"):
                body += " " + summary["stop_message"]
            self.service.apply_retention(run.id)
        elif failed:
            failure = run.failure or {}
            body = f"{run.name} {run.state.value}{at}: {failure.get('message', '')}"
        else:
            body = f"{run.name} was {run.state.value}{at}."
        self.notifier.send(f"zyquo-tui: run {run.state.value}", body, failed=failed)

    # -- moving between views ---------------------------------------------------------------------

    def screen_run_id(self) -> str | None:
        current = getattr(self.screen, "current_run_id", None)
        return current() if current is not None else None

    def show_view(self, view: str, run_id: str | None = None) -> None:
        """Go to a view: the runs, or the metrics, checkpoints or logs of a run.

        The stack stays shallow: runs at the bottom, then at most the run's metrics, then its
        checkpoints or logs, so escape always leads back the way a user expects."""
        if view == "runs":
            while len(self.screen_stack) > 1:
                self.pop_screen()
            return
        run_id = run_id or self.screen_run_id()
        if run_id is None:
            self.notify("Select a run first.", timeout=3)
            return
        record = self.service.runs.get(run_id)
        if isinstance(record, DamagedRun):
            self.notify(f"Run {run_id} is damaged: {record.reason}.", severity="error")
            return
        target = RUN_VIEWS[view]
        while len(self.screen_stack) > 1:
            top = self.screen
            if isinstance(top, target) and getattr(top, "run_id", None) == run_id:
                return
            if (view != "run" and isinstance(top, LiveMetricsScreen)
                    and top.run_id == run_id):
                break
            self.pop_screen()
        self.push_screen(target(run_id))

    def action_show_view(self, view: str) -> None:
        self.show_view(view)

    def action_help(self) -> None:
        self.push_screen(HelpDialog(self.screen))

    def action_new_run(self) -> None:
        self.push_screen(NewRunScreen())

    def action_new_run_like(self) -> None:
        run = self.service.run(self.screen_run_id())
        if run is not None:
            self.push_screen(NewRunScreen(like=run))

    def action_machine(self) -> None:
        self.push_screen(MachineDialog(self.service.active_runs))

    def action_models(self) -> None:
        self.push_screen(ModelsScreen())

    def action_datasets(self) -> None:
        self.push_screen(DatasetsScreen())

    def action_quit_dashboard(self) -> None:
        active = self.service.active_runs()
        if active:
            names = ", ".join(run.name for run in active[:3])
            message = (f"zyquo-tui closed. Still training in the background: {names}. "
                       "Run `zyquo-tui` to watch again.")
        else:
            message = "zyquo-tui closed."
        self.exit(message=message)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "show_view" and parameters and parameters[0] != "runs":
            return self.screen_run_id() is not None
        if action == "new_run_like":
            return self.service.run(self.screen_run_id()) is not None
        if action in SETUP_SCREENS:  # not one on top of itself
            return not isinstance(self.screen, SETUP_SCREENS[action])
        return True

    # -- the command palette ----------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every action valid on `screen`, named "Area: Action", from the same bindings the
        footer shows (each command is defined once, as a binding with an id)."""
        area = getattr(screen, "AREA", "Dashboard")
        seen = set()
        for active in screen.active_bindings.values():
            binding = active.binding
            if (not active.enabled or binding.system or not binding.description
                    or binding.action in ("quit", "command_palette")):
                continue  # Textual's own ctrl+q and ctrl+p: `q` and the palette itself
            node_area = "Dashboard" if active.node is self else getattr(active.node, "AREA",
                                                                          area)
            title = f"{node_area}: {binding.description}"
            if title in seen:
                continue
            seen.add(title)
            key = self.get_key_display(binding)
            # Palette help is markup: no square brackets around the key.
            help_text = f"{binding.tooltip} · key {key}" if binding.tooltip else f"key {key}"
            yield SystemCommand(title, help_text,
                                partial(self.run_action, binding.action, active.node))
        service = self.service
        if service.sample_ready and "Runs: Train sample" not in seen:
            yield SystemCommand("Sample: Train the sample",
                                "A 60-step run of the sample model on the sample dataset",
                                partial(service.train_sample,
                                        lambda run: self.show_view("run", run.id)))
        if not service.sample_ready and not service.sample_building:
            yield SystemCommand("Sample: Build the sample model",
                                "The tiny offline model the sample runs train",
                                service.build_sample)
        yield SystemCommand("Dashboard: Change theme", "Pick a colour theme",
                            self.action_change_theme)


_frozen = False


def _freeze_startup_objects() -> None:
    """Once per process, after the first screen is filled: move every object made so far
    (modules, Textual's widgets and caches, the run records) out of the garbage collector's
    sight. A full collection walks every tracked object, which took 60-70 ms on a two-core
    box and showed up as the slowest key presses; the objects made at start-up live as long
    as the process anyway."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


def run_dashboard() -> int:
    """Open the dashboard in this terminal (called by `zyquo-tui` with no command)."""
    store = RunStore()
    _log_to_file(store.home)
    app = ZyquoApp(store)
    app.run()
    return app.return_code or 0


def _log_to_file(home: Path) -> None:
    """Warnings (a webhook that failed, a store read error) go to $ZYQUO_HOME/dashboard.log:
    the terminal belongs to the dashboard."""
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        handler = logging.FileHandler(home / "dashboard.log", encoding="utf-8")
    except OSError:
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package = logging.getLogger("zyquo_tui")
    package.addHandler(handler)
    package.setLevel(logging.INFO)
