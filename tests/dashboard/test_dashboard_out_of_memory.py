"""The dashboard watching a run that runs out of memory and steps down the ladder (real
training of the sample model, started by the CLI as from another SSH session): each step down
is a notification, a line among the latest events and a mark beside the run's progress, and
only the run's real end is announced as its end."""

from __future__ import annotations

from conftest import SAMPLE_DATA, zyquo_cli
from helpers import make_run, stop_runs
from test_dashboard_flow import QUIET, shown_text, wait_until

from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.runs.settings import SETTINGS
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen
from zyquo_tui.dashboard.widgets.recent_events import describe
from zyquo_tui.dashboard.widgets.run_status import RunStatus


async def test_a_run_stepping_down_is_announced_at_each_step_and_ended_once(tiny_model):
    store, run = make_run(tiny_model, SAMPLE_DATA / "chat", iters=6, steps_per_report=1,
                          save_every=1, val_batches=1)
    # Below the model's weights: every rung dies too, and the run ends failed after three.
    store.update(run.id, lambda r: SETTINGS["memory_limit"].set(r.hyperparameters, 1 << 20))
    app = ZyquoApp(store, notifications=QUIET, poll_interval=0.3)
    sent: list[tuple[str, str]] = []  # every notification, kept past its toast's timeout
    send = app.notifier.send

    def kept(title: str, body: str, **how) -> None:
        sent.append((title, body))
        send(title, body, **how)
    app.notifier.send = kept
    try:
        async with app.run_test(size=(110, 50)) as pilot:
            service = app.service
            await wait_until(pilot, lambda: run.id in service.runs, "the run to be listed")
            started = zyquo_cli("runs", "start", run.id, "--override-memory")
            assert started.returncode == 0, started.stderr
            await pilot.press("enter")
            assert isinstance(app.screen, LiveMetricsScreen)
            await wait_until(pilot, lambda: service.run(run.id).state is RunState.FAILED
                             and len(service.run(run.id).memory_steps) == 3
                             and "ended_at" in (service.run(run.id).process or {}),
                             "the ladder's three steps and the run's end", timeout=240)
            await pilot.pause(1.0)
            status = shown_text(app.screen.query_one(RunStatus))
            assert "↓3 the loss computed 256 tokens at a time" in status
            # The latest events' lines (the box shows as many as fit beside the failure).
            lines = [describe(event) for event in service.feed(run.id).recent]
            assert any(line.startswith("out of memory: stepped down 3, the loss computed 256 "
                                       "tokens at a time, resumed from") for line in lines), lines
            await wait_until(pilot, lambda: "zyquo-tui: run failed" in dict(sent),
                             "the end's notification")
            titles = [title for title, _ in sent]
            assert titles.count("zyquo-tui: run out of memory") == 3, sent
            assert titles.count("zyquo-tui: run failed") == 1, sent  # the end, not each death
            assert any("resumed with gradient checkpointing on" in body for _, body in sent)
    finally:
        stop_runs(store, run.id)
