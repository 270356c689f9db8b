"""The dashboard driven from the keyboard, against real training of the sample model.

The run is started by a separate process (the CLI), as it would be from another SSH session;
the dashboard only watches it, cancels it, resumes it and shows its checkpoints.
"""

from __future__ import annotations

import time

from conftest import SAMPLE_DATA, hold_trainers_at, zyquo_cli
from helpers import make_run, stop_runs

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.dialogs.confirm import ConfirmDialog
from zyquo_tui.dashboard.notify import NotificationSettings
from zyquo_tui.dashboard.screens.checkpoints_screen import CheckpointsScreen
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen
from zyquo_tui.dashboard.screens.runs_screen import RunsScreen
from zyquo_tui.dashboard.widgets.checkpoint_table import CheckpointTable
from zyquo_tui.dashboard.widgets.loss_chart import LossChart
from zyquo_tui.dashboard.widgets.recent_events import RecentEvents
from zyquo_tui.dashboard.widgets.run_status import RunStatus
from zyquo_tui.trainer.step_hold import HELD_FILE

COMPLETIONS = SAMPLE_DATA / "completions"
QUIET = NotificationSettings(desktop="off", bell=False)


async def wait_until(pilot, predicate, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await pilot.pause(0.1)


def shown_text(widget) -> str:
    return str(widget.render())


async def test_watch_cancel_resume_and_find_the_best_checkpoint(tiny_model, monkeypatch):
    store, run = make_run(tiny_model, COMPLETIONS, iters=120, steps_per_report=2,
                          steps_per_eval=20, save_every=20, val_batches=2)
    hold_trainers_at(monkeypatch, 40)  # the cancel lands at step 40 on any machine
    try:
        started = zyquo_cli("runs", "start", run.id)
        assert started.returncode == 0, started.stderr

        app = ZyquoApp(store, notifications=QUIET, poll_interval=0.3)
        async with app.run_test(size=(100, 32)) as pilot:
            service = app.service
            await wait_until(pilot, lambda: run.id in service.runs, "the run to be listed")
            assert isinstance(app.screen, RunsScreen)
            await pilot.press("enter")
            assert isinstance(app.screen, LiveMetricsScreen) and app.screen.run_id == run.id

            # Train and validation points arrive while the screen is open.
            def points(name: str) -> int:
                feed = service.feed(run.id)
                return len(feed.metrics.series[name]) if feed and feed.loaded else 0
            await wait_until(pilot, lambda: points("train_loss") >= 3 and points("val_loss") >= 2,
                             "train and validation points")
            chart = app.screen.query_one(LossChart)
            await wait_until(pilot, lambda: chart.train is not None and len(chart.train) >= 3
                             and chart.val is not None and len(chart.val) >= 2,
                             "the loss chart to draw them")
            assert chart.train is not None and len(chart.train) >= 3
            assert chart.val is not None and len(chart.val) >= 2
            assert "val loss" in shown_text(app.screen.query_one(RecentEvents))
            await wait_until(pilot, lambda: (store.run_dir(run.id) / HELD_FILE).exists(),
                             "the trainer to hold after step 40")

            # Cancel from the keyboard: c asks first, y confirms.
            # The held step's train event is written before the hold: the screen reaches it.
            await wait_until(pilot, lambda: service.feed(run.id).metrics.step == 40,
                             "the screen to show step 40")
            await pilot.press("c")
            assert isinstance(app.screen, ConfirmDialog)
            assert "(about 40)" in app.screen.detail  # the step the screen shows
            await pilot.press("y")
            await wait_until(pilot, lambda: service.run(run.id).state is RunState.CANCELLED,
                             "the run to be cancelled")
            assert service.run(run.id).summary.get("step") == 40
            await wait_until(pilot, lambda: "cancelled" in shown_text(
                app.screen.query_one(RunStatus)), "the status to say cancelled")

            # r resumes it; it runs to the end while we watch.
            await pilot.press("r")
            await wait_until(pilot, lambda: service.run(run.id).state is RunState.COMPLETED,
                             "the resumed run to complete", timeout=120)
            await wait_until(pilot, lambda: (run.id, "completed") in app.ended_runs,
                             "the completion notification")
            assert (run.id, "cancelled") in app.ended_runs
            await wait_until(pilot, lambda: service.feed(run.id).metrics.step == 120,
                             "the last events")

            # k opens the checkpoints, with the best one marked.
            await pilot.press("k")
            assert isinstance(app.screen, CheckpointsScreen)
            await wait_until(pilot, lambda: app.screen.query_one(CheckpointTable).checkpoints
                             and app.screen.query_one(CheckpointTable).checkpoints[-1].step
                             == 120, "the checkpoints to be listed")
            metrics = RunMetrics()
            metrics.ingest(read_events(store.events_path(run.id)))
            best = metrics.best_checkpoint_step()
            table = app.screen.query_one(CheckpointTable)
            assert best is not None and table.best_step == best
            assert [c.step for c in table.checkpoints][-1] == 120
            row = table.get_row(str(best))
            assert "★ best" in str(row[2])
            marked = [c.step for c in table.checkpoints if "best" in str(table.get_row(str(c.step))[2])]
            assert marked == [best]
    finally:
        stop_runs(store, run.id)


async def test_first_launch_builds_and_trains_the_sample():
    """An empty store: b builds the sample model (a real subprocess), t trains on it and opens
    the run's metrics, which complete."""
    try:
        app = ZyquoApp(notifications=QUIET, poll_interval=0.3)
        async with app.run_test(size=(100, 32)) as pilot:
            service = app.service
            await wait_until(pilot, lambda: service.loaded, "the first read of the store")
            assert not service.runs and not service.sample_ready
            await pilot.press("t")  # too early: it says what to press first
            await wait_until(pilot, lambda: any("press b to build it" in n.message
                                                for n in app._notifications), "what to press first")
            assert not service.runs
            await pilot.press("b")
            await wait_until(pilot, lambda: service.sample_ready, "the sample model", timeout=180)
            await pilot.press("t")
            await wait_until(pilot, lambda: isinstance(app.screen, LiveMetricsScreen),
                             "the sample run's metrics")
            run_id = app.screen.run_id
            # The screen opens on the run it made; the service lists it at its next read.
            await wait_until(pilot, lambda: getattr(service.run(run_id), "state", None)
                             is RunState.COMPLETED, "the sample run to complete", timeout=180)
            await wait_until(pilot, lambda: (run_id, "completed") in app.ended_runs,
                             "the completion notification")
            run = service.run(run_id)
            assert run.name == "sample completions" and run.hyperparameters.iters == 60
            # The notification counts the trainer's steps, even if the feed is still behind.
            said = [n.message for n in app._notifications if "completed" in n.message]
            assert said and said[-1].startswith("sample completions completed 60 steps; best "
                                                "validation loss"), said
    finally:
        store = RunStore()
        stop_runs(store, *[r.id for r in store.iter_runs() if isinstance(r, Run)])
