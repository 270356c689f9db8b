"""A run that `zyquo-tui serve` trains for a Tinker program, in the dashboard as it trains: a
real server subprocess on the sample model, driven by the official SDK, and the dashboard
reading the server's run folder."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess

import pytest
from test_dashboard_snapshots import dashboard, runs_listed, until
from test_tinker_server import ADAM, TEXTS, new_training_client, sft_datum, start_server

from zyquo_tui.core.formatting import fmt_loss
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen
from zyquo_tui.dashboard.widgets.metric_sparkline import MetricSparkline

tinker = pytest.importorskip("tinker")


@pytest.fixture
def served(tmp_path, sample_models, monkeypatch):
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    shutil.copytree(sample_models["zyquo-tiny"], home / "models" / "zyquo-tiny")
    server = start_server(home)
    monkeypatch.setenv("TINKER_BASE_URL", server.url)
    monkeypatch.setenv("TINKER_API_KEY", server.key)
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    yield server
    os.killpg(server.process.pid, signal.SIGTERM)
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=10)


def train_steps(training, data, count: int) -> list[float]:
    losses = []
    for _ in range(count):
        forward_backward = training.forward_backward(data, "cross_entropy")
        training.optim_step(ADAM).result()
        losses.append(forward_backward.result().metrics["loss:sum"])
    return losses


async def test_a_served_run_is_listed_and_its_losses_drawn_while_the_program_trains(served):
    """Two SDK steps, then the dashboard: the runs list has the served run, running, named
    after its base model, with its latest loss; its live metrics hold the two summed losses the SDK returned. Two
    more steps while the screen is open: the train-loss sparkline grows to all four, in
    order."""
    service_client = tinker.ServiceClient()
    training = new_training_client(service_client, seed=11)
    data = [sft_datum(training.get_tokenizer(), text) for text in TEXTS]
    losses = train_steps(training, data, 2)

    store = RunStore(served.home)
    (run,) = store.list()
    app = dashboard(store)
    app.smoothing = False
    async with app.run_test(size=(120, 40)) as pilot:
        await runs_listed(pilot)
        table = app.screen.table
        assert [r.id for r in app.service.active_runs()] == [run.id]
        row = " ".join(str(cell) for cell in table.get_row(run.id))
        assert "tinker zyquo-tiny" in row and fmt_loss(losses[-1]) in row, row

        table.select_run(run.id)
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, LiveMetricsScreen)
        feed = app.service.feed(run.id)
        sparkline = screen.query_one("#spark-train_loss", MetricSparkline)
        await until(pilot, lambda: feed.loaded and sparkline.values == pytest.approx(losses))

        # The program trains on with the screen open (off the event loop, as a separate
        # program would).
        losses += await asyncio.to_thread(train_steps, training, data, 2)
        await until(pilot, lambda: sparkline.values == pytest.approx(losses), timeout=60)
        assert feed.metrics.step == 4 and not feed.ended
    service_client.close("success").result(timeout=60)
