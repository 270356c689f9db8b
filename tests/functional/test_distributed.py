"""One run on several processes (mlx.launch): it trains as mlx-lm does under mlx.launch, a
cancel stops every rank with a checkpoint an exact resume continues, and a rank that dies ends
the run as interrupted with no rank left behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
from conftest import (
    SAMPLE_DATA,
    hold_trainers_at,
    our_processes,
    run_trainer,
    wait_for_event,
    wait_until_held,
    zyquo_cli,
)
from helpers import (
    assert_losses_equal_mlx_lm,
    losses_by_iteration,
    make_run,
    mlx_lm_reports,
    stop_runs,
)

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.processes.supervisor import Supervisor
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.checkpoints import list_checkpoints, state_files
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system.cluster import free_port, mlx_launch_path

SETTINGS = {"iters": 24, "steps_per_report": 4, "steps_per_eval": 8, "val_batches": 3,
            "save_every": 1000, "grad_accumulation_steps": 2}


def two_ranks(store: RunStore, model, **settings):
    return make_run(model, SAMPLE_DATA / "completions", store=store,
                    **{**SETTINGS, **settings, "zyquo_tui": {"ranks": 2}})


def finished(supervisor: Supervisor, run_id: str, timeout: float = 600):
    return asyncio.run(supervisor.wait(run_id, timeout=timeout))


def trained_to_the_end(store: RunStore, run_id: str):
    """The run started by a supervisor and waited for; it must complete. Its events."""
    supervisor = Supervisor(store)
    supervisor.start(run_id)
    try:
        done = finished(supervisor, run_id)
    finally:
        stop_runs(store, run_id)
    assert done.state is RunState.COMPLETED, store.log_path(run_id).read_text()[-3000:]
    return read_events(store.events_path(run_id))


def no_process_of(marker: str, timeout: float = 30.0) -> list:
    """The trainer, launcher and runner processes of a run still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    while our_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return our_processes(marker)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, sample_models):
    """A 2-rank run trained to the end through the supervisor: its store and run."""
    store = RunStore(tmp_path_factory.mktemp("two-ranks"))
    store, run = two_ranks(store, sample_models["zyquo-tiny"])
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    done = finished(supervisor, run.id)
    assert done.state is RunState.COMPLETED, (store.log_path(run.id).read_text())[-3000:]
    return store, done


def test_two_ranks_lose_what_mlx_lm_loses_under_mlx_launch(uninterrupted, tmp_path):
    store, run = uninterrupted
    ours = read_events(store.events_path(run.id))
    assert ours[0]["type"] == "started" and ours[0]["world_size"] == 2
    assert [r["rank"] for r in run.process["ranks"]] == [0, 1]
    # every rank's peak memory, by rank, rank 0's being the event's own
    for train in (e for e in ours if e["type"] == "train"):
        peaks = train["rank_peak_memory_bytes"]
        assert len(peaks) == 2 and all(peak > 0 for peak in peaks)
        assert peaks[0] == train["peak_memory_bytes"]

    theirs = mlx_lm_reports(run, tmp_path, (
        mlx_launch_path(), "-n", "2", "--backend", "ring", "--starting-port",
        str(free_port(2)), "--"))
    our_train = assert_losses_equal_mlx_lm(store, run, theirs)
    assert sorted(our_train) == [4, 8, 12, 16, 20, 24]


def test_runs_show_names_the_ranks_and_each_ranks_peak(uninterrupted, monkeypatch):
    """`runs show` of a run on two processes: where its ranks ran, and every rank's MLX peak
    beside rank 0's (the figures the progress line holds)."""
    import json

    store, run = uninterrupted
    monkeypatch.setenv("ZYQUO_HOME", str(store.home))
    shown = zyquo_cli("runs", "show", run.id, "--json")
    assert shown.returncode == 0, shown.stderr
    progress = json.loads(shown.stdout)["progress"]
    peaks = progress["rank_peak_memory_bytes"]
    assert len(peaks) == 2 and peaks[0] == progress["peak_memory_bytes"]
    text = zyquo_cli("runs", "show", run.id)
    host = run.process["ranks"][0]["host"]
    assert f"ranks      2 processes (mlx.launch): r0 on {host}, r1 on {host}" in text.stdout
    assert "(rank 0; each rank: " in text.stdout


def test_runs_compare_gives_a_distributed_runs_largest_process_peak(uninterrupted, tiny_model,
                                                                     monkeypatch):
    """Compared, a run on two processes shows the peak of its largest rank, and says so."""
    import json

    store, run = uninterrupted
    monkeypatch.setenv("ZYQUO_HOME", str(store.home))
    _, other = make_run(tiny_model, SAMPLE_DATA / "completions", store=store)
    shown = zyquo_cli("runs", "compare", run.id, other.id, "--json")
    assert shown.returncode == 0, shown.stderr
    figures = json.loads(shown.stdout)["runs"][0]
    largest = max(max(e["rank_peak_memory_bytes"]) for e in read_events(
        store.events_path(run.id)) if e["type"] == "train")
    assert figures["peak_memory_bytes"] == largest
    text = zyquo_cli("runs", "compare", run.id, other.id).stdout
    assert "PEAK MEM of a run on several processes is its largest process's." in text


def test_two_ranks_of_a_dpo_run_report_what_one_process_reports(tiny_model):
    """Each rank holds half of every batch: the reward metrics of a report are the mean over
    both halves (not rank 0's alone), so they equal one process's over the whole batch."""
    from zyquo_tui.core.events.protocol import PREFERENCE_METRICS
    from zyquo_tui.core.runs.settings import SETTINGS as RUN_SETTINGS

    settings = dict(iters=8, steps_per_report=4, steps_per_eval=8, val_batches=2,
                    save_every=1000, batch_size=4, learning_rate=1e-3)
    events = {}
    for ranks in (1, 2):
        store, run = make_run(tiny_model, SAMPLE_DATA / "preference", store=RunStore(),
                              **settings, zyquo_tui={"ranks": ranks} if ranks > 1 else {})
        store.update(run.id, lambda r: RUN_SETTINGS["objective"].set(r.hyperparameters, "dpo"))
        events[ranks] = [e for e in trained_to_the_end(store, run.id) if e["type"] == "train"]
    assert [e["iteration"] for e in events[2]] == [e["iteration"] for e in events[1]] == [4, 8]
    for one, two in zip(events[1], events[2]):
        for name in ("train_loss", *PREFERENCE_METRICS):
            assert two[name] == pytest.approx(one[name], abs=1e-4), (two["iteration"], name)


def test_two_ranks_packed_train_what_two_ranks_unpacked_train(tiny_model):
    """Each rank packs its half of every batch (docs/CLI.md, Packing): without dropout the
    losses, the trained tokens and the validation loss equal those of the same run unpacked,
    within 1e-4, step by step."""
    settings = dict(iters=8, steps_per_report=2, steps_per_eval=8, val_batches=2,
                    save_every=1000, batch_size=4, max_seq_length=256,
                    lora_parameters={"rank": 8, "dropout": 0.0, "scale": 20.0})
    events = {}
    for pack in (True, False):
        store, run = make_run(tiny_model, SAMPLE_DATA / "chat", store=RunStore(), **settings,
                              zyquo_tui={"ranks": 2, "pack": pack})
        events[pack] = trained_to_the_end(store, run.id)
        # the last checkpoint's data position says how it trained
        [*_, last] = list_checkpoints(store.adapters_dir(run.id))
        meta = json.loads(state_files(store.adapters_dir(run.id), last.step)[1].read_text())
        assert bool(meta["data"].get("packed")) is pack
    for kind, key in (("train", "train_loss"), ("val", "val_loss")):
        have, want = (losses_by_iteration(events[pack], kind, key) for pack in (True, False))
        assert sorted(have) == sorted(want) and want, kind
        for step in want:
            assert have[step] == pytest.approx(want[step], abs=1e-4), (kind, step)
    assert [e["trained_tokens"] for e in events[True] if e["type"] == "train"] == \
        [e["trained_tokens"] for e in events[False] if e["type"] == "train"]


def test_cancel_stops_every_rank_and_an_exact_resume_continues(uninterrupted, tiny_model,
                                                                monkeypatch):
    reference_store, reference = uninterrupted
    store, run = two_ranks(RunStore(), tiny_model)
    run_dir = store.run_dir(run.id)
    # Rank 0 holds after step 5, half-way through an accumulation of 2 (rank 1 waits for it):
    # the cancel lands there, and the checkpoint keeps both ranks' pending gradients.
    hold_trainers_at(monkeypatch, 5)
    supervisor = Supervisor(store)
    try:
        supervisor.start(run.id)
        wait_until_held(run_dir, timeout=300)
        supervisor.cancel(run.id)
        cancelled = finished(supervisor, run.id)
        assert cancelled.state is RunState.CANCELLED
        assert not no_process_of(str(run_dir))
        event = [e for e in read_events(run_dir / "events.jsonl") if e["type"] == "cancelled"][-1]
        stopped_at = event["checkpoint"]
        assert stopped_at == 5

        supervisor.resume(run.id)
        resumed = finished(supervisor, run.id)
        assert resumed.state is RunState.COMPLETED
    finally:
        for process in our_processes(str(run_dir)):
            process.kill()
    ours = read_events(run_dir / "events.jsonl")
    theirs = read_events(reference_store.events_path(reference.id))
    for kind, key in (("train", "train_loss"), ("val", "val_loss")):
        after = {step: loss for step, loss in losses_by_iteration(ours, kind, key).items()
                 if step > stopped_at}
        expected = {step: loss for step, loss in losses_by_iteration(theirs, kind, key).items()
                    if step > stopped_at}
        assert sorted(after) == sorted(expected)
        for step, loss in expected.items():
            assert after[step] == pytest.approx(loss, abs=1e-5), (kind, step)


def test_a_rank_killed_makes_the_run_interrupted_and_stops_the_others(tiny_model):
    store, run = two_ranks(RunStore(), tiny_model, iters=5000, steps_per_eval=5000)
    run_dir = store.run_dir(run.id)
    supervisor = Supervisor(store)
    try:
        supervisor.start(run.id)
        wait_for_event(run_dir, lambda e: e["type"] == "train", timeout=300)
        rank_one = store.get(run.id).process["ranks"][1]
        os.kill(rank_one["pid"], signal.SIGKILL)
        ended = finished(supervisor, run.id, timeout=120)
        assert ended.state is RunState.INTERRUPTED
        assert ended.failure["cause"] == "rank_lost"
        assert "Rank 1" in ended.failure["message"], ended.failure
        assert not no_process_of(str(run_dir))
    finally:
        for process in our_processes(str(run_dir)):
            process.kill()


def test_a_batch_that_does_not_split_across_the_ranks_is_refused(tiny_model):
    done = zyquo_cli("runs", "new", "--model", str(tiny_model), "--data",
                     str(SAMPLE_DATA / "completions"), "--ranks", "3", "--batch-size", "4")
    assert done.returncode == 2, done.stderr
    assert "batch_size (4) must divide by the 3 processes" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_checkpoint_of_another_world_size_is_not_resumed(uninterrupted, tmp_path):
    """Resume is exact with the same number of processes and refused with another."""
    from helpers import copy_run

    store, run = uninterrupted
    run_id = copy_run(store.run_dir(run.id), RunStore().ensure().home)
    mine = RunStore()

    def one_process(r):
        r.hyperparameters.zyquo_tui = {}
        r.state = RunState.CANCELLED
    mine.update(run_id, one_process)
    supervisor = Supervisor(mine)
    with pytest.raises(UserError, match="saved by 2 processes and the run has 1 now"):
        supervisor.resume(run_id)
    assert mine.get(run_id).state is RunState.CANCELLED  # nothing changed
    # The trainer refuses it too (a resume asked for by hand, past the supervisor).
    mine.update(run_id, lambda r: setattr(r, "resume_from_step", SETTINGS["iters"]))
    done = run_trainer(mine.run_dir(run_id))
    assert done.returncode == 1
    assert "saved by 2 processes and this run has 1" in mine.get(run_id).failure["message"]
