"""A run that `zyquo-tui serve` trains for a Tinker program, in the dashboard as it trains: a
real server subprocess on the sample model, driven by the official SDK, and the dashboard
reading the server's run folder."""

from __future__ import annotations

import asyncio

import pytest
from test_dashboard_fixtures import T0, alive_process, event, make, write_events
from test_dashboard_snapshots import dashboard, fixed_world, open_run, runs_listed, until
from test_tinker_server import ADAM, TEXTS, new_training_client, serving, sft_datum

from zyquo_tui.core.formatting import fmt_loss
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen
from zyquo_tui.dashboard.widgets.metric_sparkline import MetricSparkline

tinker = pytest.importorskip("tinker")

__all__ = ["fixed_world"]  # the fixture, used by name

SERVED = "20251129-093000-000-5e7d"


@pytest.fixture
def served(tmp_path, sample_models, monkeypatch):
    with serving(tmp_path / "home", sample_models, monkeypatch) as server:
        yield server


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


def write_served_store(home) -> RunStore:
    """A run folder as zyquo_tui/server/run_record.py writes it for a training client, twelve
    optimizer steps in and one save_state: no data, the settings' default iters (the program
    decides the steps; the started event has none), the server as its
    runner (here a stand-in process that stays alive), `served_by` in run.json's process."""
    store = RunStore(home).ensure()
    runner = alive_process()
    make(store, SERVED, "tinker zyquo-tiny (3f9c2a7e)", RunState.RUNNING,
         model=str(home / "models" / "zyquo-tiny"), data="",
         process={"runner_pid": runner["pid"], "runner_start_time": runner["start_time"],
                  "host": "mini", "served_by": "zyquo-tui serve"})
    events = [event("started", T0 + 3600, pid=runner["pid"], host="mini",
                    versions={"python": "3.11.9"}, device="mlx", parameters={},
                    dataset={"train": 0, "valid": 0}, iters=None, resumed_from_step=None,
                    config={}, world_size=1)]
    for step in range(1, 13):
        events.append(event("train", T0 + 3600 + 2 * step, iteration=step,
                            train_loss=round(48.0 * 0.86 ** step, 4), learning_rate=1e-2,
                            iterations_per_second=0.5, tokens_per_second=26.0,
                            trained_tokens=52 * step, peak_memory_bytes=int(2.1e7)))
    events.append(event("checkpoint", T0 + 3600 + 25, iteration=12,
                        adapter_file="0000012_adapters.safetensors",
                        latest="adapters.safetensors",
                        state_files=["0000012_optimizer.safetensors"], bytes=180_224))
    write_events(store, SERVED, events)
    return store


class TestServedRun:
    def test_the_runs_list_shows_a_served_run(self, snap_compare, fixed_world):
        """At 80x24, one run, "tinker zyquo-tiny (3f", running; Progress "12/?" (a served run
        has no planned step count, whatever run.json's iters say), Train the last summed loss
        7.8564, Val and ETA "—"."""
        store = write_served_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=(80, 24), run_before=runs_listed)

    def test_live_metrics_of_a_served_run(self, snap_compare, fixed_world):
        """At 120x40, the served run's live metrics: "lora · zyquo-tiny · 20251129-093000-000-
        5e7d" (no data folder), "step 12/?"; the train loss sparkline falling to 7.8564
        (Tinker's summed loss), learn rate 0.01; the loss chart over steps 0 to 12 falling
        from about 41 to 7; the latest events "started", "step 12  train loss 7.8564  26.0
        tok/s" and "step 12  checkpoint saved (176.0 KiB)"."""
        store = write_served_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=(120, 40),
                            run_before=lambda pilot: open_run(pilot, SERVED))


async def test_a_run_queued_while_the_server_has_a_model_loaded_says_it_waits_for_it(
        served, monkeypatch):
    """The server holds the machine while it has a model loaded (server/ledger.py): a run
    queued meanwhile (the real CLI) shows, on its screen, what it waits for."""
    from conftest import SAMPLE_DATA, zyquo_cli
    from test_dashboard_flow import shown_text

    from zyquo_tui.dashboard.widgets.run_status import RunStatus

    from zyquo_tui.core.processes.supervisor import Supervisor

    service_client = tinker.ServiceClient()
    queued = None
    try:
        training = new_training_client(service_client, seed=13)
        train_steps(training, [sft_datum(training.get_tokenizer(), TEXTS[0])], 1)
        monkeypatch.setenv("ZYQUO_HOME", str(served.home))  # the CLI on the server's store
        made = zyquo_cli("runs", "new", "--model", str(served.home / "models" / "zyquo-tiny"),
                         "--data", str(SAMPLE_DATA / "completions"), "--iters", "4")
        assert made.returncode == 0, made.stderr
        queued = made.stdout.strip()
        assert zyquo_cli("runs", "queue", queued).returncode == 0

        app = dashboard(RunStore(served.home))
        async with app.run_test(size=(140, 40)) as pilot:
            await runs_listed(pilot)
            app.screen.table.select_run(queued)
            await pilot.press("enter")
            status = app.screen.query_one(RunStatus)
            await until(pilot, lambda: "queued" in shown_text(status))
            assert (f"queued #1 · waiting for zyquo-tui serve (pid {served.process.pid})"
                    in shown_text(status))
    finally:
        if queued is not None:  # out of the queue first: the server's letting go starts none
            Supervisor(RunStore(served.home)).dequeue(queued)
        service_client.close("success").result(timeout=60)
