"""The headless run commands as a user types them: new, start --wait, watch, logs, fork, show."""

from __future__ import annotations

import json
import os
import re
import time

from conftest import SAMPLE_DATA, zyquo_cli

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.store.store import RunStore


def new_run(model, *extra: str) -> str:
    done = zyquo_cli("runs", "new", "--model", str(model), "--data",
                     str(SAMPLE_DATA / "completions"), "--iters", "30", "--learning-rate", "5e-4",
                     "--num-layers", "-1", "--steps-per-report", "5", "--steps-per-eval", "10",
                     "--save-every", "10", "--val-batches", "2", *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_start_wait_watch_logs_and_show(tiny_model):
    run_id = new_run(tiny_model, "--name", "cli run")
    started = zyquo_cli("runs", "start", run_id, "--wait")
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines()[-1] == f"{run_id} completed"

    watched = zyquo_cli("runs", "watch", run_id)  # a finished run: prints its figures and ends
    assert watched.returncode == 0
    assert "step 30/30" in watched.stdout and watched.stdout.strip().endswith("completed")

    logs = zyquo_cli("runs", "logs", run_id)
    assert "completed 30 steps" in logs.stdout

    shown = json.loads(zyquo_cli("runs", "show", run_id, "--json").stdout)
    assert shown["state"] == "completed" and shown["progress"]["step"] == 30
    assert shown["progress"]["rank_peak_memory_bytes"] is None  # one process: no ranks
    text = zyquo_cli("runs", "show", run_id).stdout
    assert "peak mem" in text and "\nranks " not in text and "each rank" not in text
    # Nobody planned it: its runner measures the config whole for the record, then settles.
    deadline = time.monotonic() + 120
    while "returncode" not in (RunStore().get(run_id).process or {}):
        assert time.monotonic() < deadline, "the runner never recorded the end"
        time.sleep(0.1)
    text = zyquo_cli("runs", "show", run_id).stdout
    assert re.search(r"\nestimated  [\d.]+ MiB measured whole for its longest row: fits\n",
                     text), text
    assert [c["step"] for c in shown["checkpoints"]] == [10, 20, 30]
    assert sum(c["best"] for c in shown["checkpoints"]) == 1
    best = min((c for c in shown["checkpoints"] if c["val_loss"] is not None),
               key=lambda c: c["val_loss"])
    assert best["best"]


def test_fork_warm_starts_a_new_run_from_a_checkpoint(tiny_model):
    parent = new_run(tiny_model)
    assert zyquo_cli("runs", "start", parent, "--wait").returncode == 0
    forked = zyquo_cli("runs", "fork", parent, "--from-step", "30", "--json")
    assert forked.returncode == 0, forked.stderr
    child = json.loads(forked.stdout)
    assert child["lineage"]["parent"] == parent and child["lineage"]["step"] == 30
    # The fork keeps its own link to the weights: deleting the parent takes nothing from it.
    store = RunStore()
    assert child["lineage"]["adapter_file"].startswith(str(store.run_dir(child["id"])))
    orphan = json.loads(zyquo_cli("runs", "fork", parent, "--from-step", "20", "--json").stdout)
    assert zyquo_cli("runs", "delete", parent).returncode == 0
    # Weights that are gone (a file a config named, removed by hand): one sentence, exit 2.
    os.unlink(orphan["lineage"]["adapter_file"])
    gone = zyquo_cli("runs", "start", orphan["id"])
    assert gone.returncode == 2 and "the weights it starts from" in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1
    fresh = new_run(tiny_model)
    for run_id in (child["id"], fresh):
        assert zyquo_cli("runs", "start", run_id, "--wait").returncode == 0
    store = RunStore()

    def first_val(run_id):
        return next(e["val_loss"] for e in read_events(store.events_path(run_id))
                    if e["type"] == "val")
    assert first_val(child["id"]) < first_val(fresh) - 0.5, "the fork starts from trained weights"
    bad = zyquo_cli("runs", "fork", child["id"], "--from-step", "7")
    assert bad.returncode == 2 and "no checkpoint at step 7; it has 10, 20, 30" in bad.stderr


def test_checkpoints_are_listed_deleted_and_pruned_from_the_command_line(tiny_model):
    """What the checkpoints screen's d and t do, headless: delete one step's checkpoint, and a
    retention choice that a completed run applies at once."""
    run_id = new_run(tiny_model)
    assert zyquo_cli("runs", "start", run_id, "--wait").returncode == 0

    def steps() -> list[int]:
        done = zyquo_cli("runs", "checkpoints", run_id, "--json")
        assert done.returncode == 0, done.stderr
        return [c["step"] for c in json.loads(done.stdout)["checkpoints"]]
    assert steps() == [10, 20, 30]

    deleted = zyquo_cli("runs", "checkpoints", run_id, "--delete", "10")
    assert deleted.returncode == 0 and "Deleted the checkpoint of step 10." in deleted.stdout
    assert steps() == [20, 30]
    missing = zyquo_cli("runs", "checkpoints", run_id, "--delete", "7")
    assert missing.returncode == 2
    assert missing.stderr.strip() == (f"zyquo-tui: Run {run_id} has no checkpoint at step 7; "
                                      "it has 20, 30.")

    kept = zyquo_cli("runs", "checkpoints", run_id, "--keep-last", "1")
    assert kept.returncode == 0 and "keep the best and the last, applied now" in kept.stdout
    best = json.loads(zyquo_cli("runs", "show", run_id, "--json").stdout)["progress"][
        "best_checkpoint_step"]
    assert steps() == sorted({best, 30})
    shown = json.loads(zyquo_cli("runs", "checkpoints", run_id, "--json").stdout)
    assert shown["retention"] == {"keep_last": 1, "keep_best": True}
    assert zyquo_cli("runs", "checkpoints", run_id, "--keep-all").returncode == 0
    assert json.loads(zyquo_cli("runs", "checkpoints", run_id, "--json").stdout)[
        "retention"] is None
