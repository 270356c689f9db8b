"""SetupLaunch: the new-run screen's run made and started, queued or saved, and its peak
measured, each asking first where it must (a verdict of won't fit, in memory or on disk).

The run itself is the screen's draft (`build_run`); starting it is the App's RunService's
work (a worker thread), so a refusal is a notification and the form keeps its settings."""

from __future__ import annotations

from typing import Any

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.memory.advisor import Plan, Verdict
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.dashboard.dialogs.confirm import ConfirmDialog
from zyquo_tui.dashboard.widgets.memory_panel import MeasureState


class SetupLaunch:
    """Start, queue, save or measure the run of the new-run screen `screen`."""

    def __init__(self, screen: Any) -> None:
        self.screen = screen

    def launch(self, how: str) -> None:
        screen = self.screen
        if screen.submitting:
            return
        blocked = screen.blocker()
        if blocked is not None:
            screen.notify(blocked[0], title="Cannot create the run yet", severity="error",
                          timeout=8)
            screen._focus_control(blocked[1])
            return
        run = screen.build_run()
        plan, disk = screen.plan, screen.verdicts.disk
        verb = "Start" if how == "start" else "Queue"
        disk_wont_fit = disk is not None and disk.verdict is Verdict.WONT_FIT
        if how != "draft" and plan is not None and plan.assessment.verdict is Verdict.WONT_FIT:
            fix = (f"Key 1 in the form makes it fit: {plan.suggestions[0].title}."
                   if plan.suggestions else
                   "No change of settings found that fits this machine.")
            screen.app.push_screen(ConfirmDialog(
                f"{run.name} won't fit in memory. {verb} it anyway?",
                f"It {plan.assessment.reason} Past the budget, macOS swaps, and training can "
                f"freeze the machine or crash the GPU driver. {fix}",
                confirm_label=f"{verb} anyway", keep_label="Back to the form"),
                lambda yes: yes and self.submit(run, how, override=True,
                                                override_disk=disk_wont_fit))
            return
        if how != "draft" and disk_wont_fit:
            screen.app.push_screen(ConfirmDialog(
                f"{run.name} won't fit on disk. {verb} it anyway?",
                f"It {disk.reason} The trainer will stop with a last checkpoint when the "
                "disk reaches its floor; free space, then resume it. A larger save_every "
                "saves fewer checkpoints.",
                confirm_label=f"{verb} anyway", keep_label="Back to the form"),
                lambda yes: yes and self.submit(run, how, override=False, override_disk=True))
            return
        self.submit(run, how, override=False)

    def submit(self, run: Run, how: str, *, override: bool,
               override_disk: bool = False) -> None:
        screen = self.screen
        service = screen.service
        store, supervisor = service.store, service.supervisor
        screen.submitting = True

        def operation() -> Run:
            try:
                store.ensure()
                store.create(run)
                if how == "draft":
                    return run
                try:
                    if how == "start":
                        return supervisor.start(run.id, queue_if_busy=True,
                                                override_memory=override,
                                                override_disk=override_disk)
                    return supervisor.enqueue(run.id, override_memory=override,
                                              override_disk=override_disk)
                except UserError:
                    # Refused before anything started: the form still holds the settings,
                    # so leave no half-made run behind.
                    if store.get(run.id).state is RunState.CONFIGURED:
                        store.delete(run.id)
                    raise
            finally:
                screen.app.call_from_thread(setattr, screen, "submitting", False)

        def done(made: Run) -> None:
            position = supervisor.queue.position(made.id)
            if how == "start":
                screen.app.notify(f"{made.name} is {made.state.value}"
                                  + (f" (queue position {position})" if position else "")
                                  + (" with the memory override" if override else "") + ".",
                                  title="Start")
                screen.app.show_view("run", made.id)
                return
            if how == "queue":
                screen.app.notify(f"{made.name} is {made.state.value}"
                                  + (f" at queue position {position}" if position else "")
                                  + ".", title="Queue")
            else:
                screen.app.notify(f"{made.name} is saved as configured: start it with s on "
                                  "the runs list.", title="Draft")
            if screen.app.screen is screen:
                screen.app.pop_screen()
        service.act({"start": "Start", "queue": "Queue", "draft": "Save draft"}[how],
                    operation, done)

    # -- measure --------------------------------------------------------------------------------

    def measure(self) -> None:
        screen = self.screen
        if screen.measure_state.running:
            screen.notify("A measurement is already running.", timeout=4)
            return
        blocked = screen.blocker(need_data=False)
        if blocked is not None:
            screen.notify(blocked[0], title="Cannot measure yet", severity="error", timeout=8)
            screen._focus_control(blocked[1])
            return
        plan = screen.plan
        if plan is None:
            screen.notify("The memory budget is still being read.", timeout=4)
            return
        if plan.assessment.verdict is Verdict.WONT_FIT:
            screen.app.push_screen(ConfirmDialog(
                "Measure a config that won't fit?",
                "Measuring trains a few real steps: past the budget the machine swaps and may "
                "freeze. Apply a suggestion first, or measure anyway.",
                confirm_label="Measure anyway", keep_label="Back to the form"),
                lambda yes: yes and self._measure(plan))
            return
        self._measure(plan)

    def _measure(self, plan: Plan) -> None:
        screen = self.screen
        estimate = plan.estimate
        screen.measure_state = MeasureState(running=True,
                                            estimate_bytes=estimate.total_bytes)
        screen._show_memory(True)
        screen.setup.measure_peak(
            screen.revision, screen.model_path, estimate.config,
            data=screen.data_path if screen.data_trainable else None, hp=screen.hp,
            extra=dict(screen.extra_config), advisor=screen.advisor, facts=screen.facts,
            estimate=estimate)
