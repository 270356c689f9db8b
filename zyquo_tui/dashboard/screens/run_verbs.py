"""RunVerbsScreen: the verbs every screen about runs shares, defined once.

Start, cancel (after a confirmation), resume, and moving to a run's metrics, checkpoints or
logs. A screen built on it says which run is meant (`current_run_id`) and lists the bindings it
wants from VERB_BINDINGS; its check_action (or `verb_check`, from a screen's own check_action)
lets the footer show only the verbs valid for that run in its current state.
"""

from __future__ import annotations

from textual.binding import Binding

from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.dashboard.dialogs.confirm import ConfirmDialog
from zyquo_tui.dashboard.screens.zyquo_screen import ZyquoScreen

VERB_BINDINGS = {
    "start": Binding("s", "start_run", "Start", id="run.start",
                     tooltip="Start the run now (it is queued if another run is active)"),
    "cancel": Binding("c", "cancel_run", "Cancel", id="run.cancel",
                      tooltip="Stop the run after it saves a checkpoint (asks first); "
                              "a queued run leaves the queue"),
    "resume": Binding("r", "resume_run", "Resume", id="run.resume",
                      tooltip="Continue the run exactly from its latest checkpoint"),
    "checkpoints": Binding("k", "open_checkpoints", "Checkpoints", id="run.checkpoints",
                           tooltip="The run's checkpoints: resume, fork, use, delete"),
    "logs": Binding("l", "open_logs", "Logs", id="run.logs",
                    tooltip="The trainer's log, followed as it grows"),
}
VERBS = frozenset({"start_run", "cancel_run", "resume_run", "open_run", "open_checkpoints",
                   "open_logs"})


class RunVerbsScreen(ZyquoScreen):
    """A screen that acts on one run at a time (see the module docstring)."""

    _verbs_key: object = None

    def current_run_id(self) -> str | None:
        raise NotImplementedError

    def refresh_verbs(self, *extra: object) -> None:
        """Refresh the footer only when what decides the valid keys changed (the run, its
        state, `extra`): a footer refresh rebuilds its widgets, too dear to do every second."""
        run = self.current_run()
        key = (self.current_run_id(), run.state if run else None, extra)
        if key != self._verbs_key:
            self._verbs_key = key
            self.refresh_bindings()

    def current_run(self) -> Run | None:
        return self.service.run(self.current_run_id())

    def verb_check(self, action: str) -> bool:
        run = self.current_run()
        if run is None:
            return False
        if action == "start_run":
            return run.state is RunState.CONFIGURED
        if action == "cancel_run":
            return run.state.is_active or run.state is RunState.QUEUED
        if action == "resume_run":
            return run.state.can_resume
        return True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in VERBS:
            return self.verb_check(action)
        return True

    def action_start_run(self) -> None:
        run = self.current_run()
        if run is not None:
            self.service.start(run.id)

    def action_cancel_run(self) -> None:
        run = self.current_run()
        if run is None:
            return
        if run.state is RunState.QUEUED:
            question = f"Take {run.name} out of the queue?"
            detail = "It goes back to configured; start or queue it again whenever you like."
        else:
            question = f"Cancel {run.name}?"
            # The step the screen shows (its feed follows the events); run.json's summary
            # lags it by up to a report.
            feed = self.service.feed(run.id)
            step = max(feed.metrics.step if feed is not None else 0,
                       (run.summary or {}).get("step") or 0)
            detail = ("The trainer saves a checkpoint at the step it is on"
                      + (f" (about {step})" if step else "")
                      + " and stops. Press r later to resume it exactly from there.")

        def answered(confirmed: bool | None) -> None:
            if confirmed:
                self.service.cancel(run.id)
        self.app.push_screen(ConfirmDialog(question, detail, confirm_label="Cancel run",
                                           keep_label="Keep running"), answered)

    def action_resume_run(self) -> None:
        run = self.current_run()
        if run is not None:
            self.service.resume(run.id)

    def action_open_run(self) -> None:
        self._open("run")

    def action_open_checkpoints(self) -> None:
        self._open("checkpoints")

    def action_open_logs(self) -> None:
        self._open("logs")

    def _open(self, view: str) -> None:
        run_id = self.current_run_id()
        if run_id is not None:
            self.app.show_view(view, run_id)
