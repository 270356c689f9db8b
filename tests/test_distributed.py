"""One run on several processes (mlx.launch): it trains as mlx-lm does under mlx.launch, a
cancel stops every rank with a checkpoint an exact resume continues, and a rank that dies ends
the run as interrupted with no rank left behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import SAMPLE_DATA, our_processes, run_trainer, wait_for_event, zyquo_cli
from helpers import losses_by_iteration, make_run

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.processes.supervisor import Supervisor
from zyquo_tui.core.runs.mlx_config import run_to_mlx_config
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system.cluster import free_port, mlx_launch_path

# mlx-lm's own training under mlx.launch: rank 0 writes what its callback was told.
MLX_LM_REFERENCE = textwrap.dedent("""
    import json, sys, types
    import mlx.core as mx
    import numpy as np
    from mlx_lm import load
    from mlx_lm.lora import CONFIG_DEFAULTS, train_model
    from mlx_lm.tuner.callbacks import TrainingCallback
    from mlx_lm.tuner.datasets import load_dataset

    config = {**CONFIG_DEFAULTS, **json.loads(open(sys.argv[1]).read())}
    args = types.SimpleNamespace(**config)
    reports = {"train": [], "val": []}

    class Record(TrainingCallback):
        def on_train_loss_report(self, info):
            reports["train"].append(info)
        def on_val_loss_report(self, info):
            reports["val"].append(info)

    np.random.seed(args.seed)
    model, tokenizer = load(args.model)
    train_set, valid_set, _ = load_dataset(args, tokenizer)
    train_model(args, model, train_set, valid_set, Record())
    if mx.distributed.init().rank() == 0:
        open(sys.argv[2], "w").write(json.dumps(reports))
""")

SETTINGS = {"iters": 24, "steps_per_report": 4, "steps_per_eval": 8, "val_batches": 3,
            "save_every": 1000, "grad_accumulation_steps": 2}


def two_ranks(store: RunStore, model, **settings):
    return make_run(model, SAMPLE_DATA / "completions", store=store,
                    **{**SETTINGS, **settings, "zyquo_tui": {"ranks": 2}})


def finished(supervisor: Supervisor, run_id: str, timeout: float = 600):
    return asyncio.run(supervisor.wait(run_id, timeout=timeout))


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

    config = run_to_mlx_config(run, adapter_path=str(tmp_path / "mlx-lm-adapters"))
    config["train"] = True
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "reference.py").write_text(MLX_LM_REFERENCE)
    subprocess.run([mlx_launch_path(), "-n", "2", "--backend", "ring", "--starting-port",
                    str(free_port(2)), "--", sys.executable, str(tmp_path / "reference.py"),
                    str(tmp_path / "config.json"), str(tmp_path / "reports.json")],
                   capture_output=True, text=True, timeout=600, check=True,
                   stdin=subprocess.DEVNULL)
    theirs = json.loads((tmp_path / "reports.json").read_text())

    our_train = losses_by_iteration(ours, "train", "train_loss")
    their_train = {r["iteration"]: r["train_loss"] for r in theirs["train"]}
    assert sorted(our_train) == sorted(their_train) == [4, 8, 12, 16, 20, 24]
    for step, loss in their_train.items():
        assert our_train[step] == pytest.approx(loss, abs=1e-5), step
    our_val = losses_by_iteration(ours, "val", "val_loss")
    their_val = {r["iteration"] + 1: r["val_loss"] for r in theirs["val"]}
    assert sorted(our_val) == sorted(their_val)
    for step, loss in their_val.items():
        assert our_val[step] == pytest.approx(loss, abs=1e-5), step


def test_cancel_stops_every_rank_and_an_exact_resume_continues(uninterrupted, tiny_model):
    reference_store, reference = uninterrupted
    store, run = two_ranks(RunStore(), tiny_model)
    run_dir = store.run_dir(run.id)
    supervisor = Supervisor(store)
    try:
        supervisor.start(run.id)
        wait_for_event(run_dir, lambda e: e["type"] == "train", timeout=300)
        supervisor.cancel(run.id)
        cancelled = finished(supervisor, run.id)
        assert cancelled.state is RunState.CANCELLED
        assert not no_process_of(str(run_dir))
        event = [e for e in read_events(run_dir / "events.jsonl") if e["type"] == "cancelled"][-1]
        stopped_at = event["checkpoint"]
        assert stopped_at is not None and 4 <= stopped_at < SETTINGS["iters"]

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
