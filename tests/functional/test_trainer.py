"""The trainer subprocess, with real mlx-lm training on the sample model."""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import (
    SAMPLE_DATA,
    cancel_mid_run_then_resume,
    kill_quietly,
    run_trainer,
    start_trainer,
    wait_for_event,
)
from helpers import losses_by_iteration, make_run

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.library.safetensors_header import read_header
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.checkpoints import list_checkpoints

COMPLETIONS = SAMPLE_DATA / "completions"


def test_a_completed_run_writes_the_whole_event_sequence(tiny_model):
    store, run = make_run(tiny_model, COMPLETIONS)
    run_dir = store.run_dir(run.id)

    done = run_trainer(run_dir)

    assert done.returncode == 0, done.stderr
    events = read_events(run_dir / "events.jsonl")
    types = [e["type"] for e in events]
    assert types[0] == "started" and types[-1] == "completed"
    assert all(e["v"] == 1 and isinstance(e["time"], float) for e in events)
    started = events[0]
    # Every row of the sample's train.jsonl and valid.jsonl, counted here from the files.
    rows = {split: len((COMPLETIONS / f"{split}.jsonl").read_text().splitlines())
            for split in ("train", "valid")}
    assert started["dataset"] == rows
    assert started["parameters"]["trainable"] < started["parameters"]["total"]
    assert set(started["versions"]) == {"python", "mlx", "mlx_lm", "zyquo_tui"}
    train = [e for e in events if e["type"] == "train"]
    assert [e["iteration"] for e in train] == [5, 10, 15, 20, 25, 30, 35, 40]
    for e in train:
        assert {"train_loss", "learning_rate", "iterations_per_second", "tokens_per_second",
                "trained_tokens", "peak_memory_bytes", "peak_rss_bytes"} <= set(e)
        assert e["peak_memory_bytes"] > 0
        # the whole process (Python, libraries, the tiny model) is resident, far above MLX's
        assert e["peak_rss_bytes"] > e["peak_memory_bytes"]
    assert train[-1]["train_loss"] < train[0]["train_loss"], "the loss should fall"
    assert [e["iteration"] for e in events if e["type"] == "val"] == [1, 10, 20, 30, 40]
    checkpoints = [e for e in events if e["type"] == "checkpoint"]
    assert [e["iteration"] for e in checkpoints] == [10, 20, 30, 40]
    assert all(e["bytes"] > 0 and "val_loss" in e for e in checkpoints)
    assert [c.step for c in list_checkpoints(store.adapters_dir(run.id))] == [10, 20, 30, 40]
    record = store.get(run.id)
    assert record.state is RunState.COMPLETED
    assert record.summary["step"] == 40 and record.summary["latest_checkpoint_step"] == 40
    summary = record.summary
    assert summary["peak_rss_bytes"] == max(e["peak_rss_bytes"] for e in train)
    assert 0 < summary["start_rss_bytes"] < summary["peak_rss_bytes"]
    assert (run_dir / "config.yaml").is_file()
    assert json.loads((store.adapters_dir(run.id) / "adapter_config.json").read_text())[
        "fine_tune_type"] == "lora"



def test_qlora_trains_the_4bit_sample_through_our_trainer(tiny_model_4bit):
    """QLoRA as users run it: `python -m zyquo_tui.trainer` on a quantized base, whose frozen
    weights stay 4-bit while the float32 adapters learn."""
    store, run = make_run(tiny_model_4bit, COMPLETIONS, method="qlora", iters=20, save_every=20,
                          steps_per_eval=20)
    run_dir = store.run_dir(run.id)

    done = run_trainer(run_dir)

    assert done.returncode == 0, done.stderr
    events = read_events(run_dir / "events.jsonl")
    assert events[-1]["type"] == "completed"
    train = [e for e in events if e["type"] == "train"]
    assert train[-1]["train_loss"] < train[0]["train_loss"], "the loss should fall"
    assert events[0]["parameters"]["trainable"] < events[0]["parameters"]["total"]
    assert store.get(run.id).state is RunState.COMPLETED
    assert [c.step for c in list_checkpoints(store.adapters_dir(run.id))] == [20]
    adapter_config = json.loads((store.adapters_dir(run.id) / "adapter_config.json").read_text())
    assert adapter_config["fine_tune_type"] == "lora"  # mlx-lm's name: the base makes it QLoRA
    # Only the adapters were trained and saved, in float32; the 4-bit base is untouched.
    saved = read_header(store.adapters_dir(run.id) / "adapters.safetensors")
    assert {tensor.name.rsplit(".", 1)[1] for tensor in saved} == {"lora_a", "lora_b"}
    assert {tensor.dtype for tensor in saved} == {"F32"}

def test_sigterm_finishes_the_step_saves_a_checkpoint_and_exits_cleanly(tiny_model):
    store, run = make_run(tiny_model, COMPLETIONS, iters=100000, steps_per_report=1,
                          save_every=100000, steps_per_eval=100000)
    run_dir = store.run_dir(run.id)
    trainer = start_trainer(run_dir)
    try:
        wait_for_event(run_dir, lambda e: e["type"] == "train" and e["iteration"] >= 3)
        trainer.send_signal(signal.SIGTERM)
        # How soon it stops is timed by bench/bench_stop.py, not asserted here.
        assert trainer.wait(timeout=60) == 0
    finally:
        kill_quietly(trainer)
    events = read_events(run_dir / "events.jsonl")
    cancelled = events[-1]
    assert cancelled["type"] == "cancelled"
    assert cancelled["checkpoint"] == cancelled["iteration"] >= 3
    assert list_checkpoints(store.adapters_dir(run.id))[-1].step == cancelled["iteration"]
    assert store.get(run.id).state is RunState.CANCELLED


def test_sigkill_leaves_every_earlier_checkpoint_loadable(tiny_model):
    store, run = make_run(tiny_model, COMPLETIONS, iters=100000, save_every=2,
                          steps_per_report=2, steps_per_eval=100000)
    run_dir = store.run_dir(run.id)
    trainer = start_trainer(run_dir)
    try:
        wait_for_event(run_dir, lambda e: e["type"] == "checkpoint" and e["iteration"] >= 6)
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=10)
    finally:
        kill_quietly(trainer)
    checkpoints = list_checkpoints(store.adapters_dir(run.id))
    assert len(checkpoints) >= 3
    files = [str(c.adapter_path) for c in checkpoints if c.resumable]
    files.append(str(store.adapters_dir(run.id) / "adapters.safetensors"))
    code = "import sys, mlx.core as mx\nfor f in sys.argv[1:]: assert len(mx.load(f)) > 0\n"
    subprocess.run([sys.executable, "-c", code, *files], check=True, capture_output=True)


def test_cancel_and_resume_reproduces_an_uninterrupted_run_exactly(tiny_model):
    # Dropout and a warmup schedule make sure the RNG and the LR schedule are restored too.
    settings = dict(iters=40, steps_per_report=1, save_every=100, steps_per_eval=10,
                    lora_parameters={"rank": 8, "dropout": 0.1, "scale": 20.0},
                    lr_schedule={"name": "cosine_decay", "arguments": [1e-3, 40],
                                 "warmup": 5})
    store, straight = make_run(tiny_model, COMPLETIONS, **settings)
    assert run_trainer(store.run_dir(straight.id)).returncode == 0

    _, interrupted = make_run(tiny_model, COMPLETIONS, **settings)
    run_dir = store.run_dir(interrupted.id)
    cancel_mid_run_then_resume(store, interrupted.id, 12)

    expected = read_events(store.run_dir(straight.id) / "events.jsonl")
    got = read_events(run_dir / "events.jsonl")
    for kind, key in (("train", "train_loss"), ("train", "learning_rate"), ("val", "val_loss")):
        want = losses_by_iteration(expected, kind, key)
        have = losses_by_iteration(got, kind, key)
        assert sorted(have) == sorted(want)
        for step in want:
            assert have[step] == pytest.approx(want[step], abs=1e-5), (kind, key, step)
    resumed = [e for e in got if e["type"] == "started"][-1]
    assert resumed["resumed_from_step"] == 12
    assert store.get(interrupted.id).state is RunState.COMPLETED


def test_a_diverging_loss_stops_the_run_as_nan_and_keeps_the_last_good_checkpoint(tiny_model):
    store, run = make_run(tiny_model, COMPLETIONS, iters=50, learning_rate=1e30,
                          optimizer="sgd", save_every=1, steps_per_report=1,
                          steps_per_eval=1000)
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 1
    events = read_events(store.run_dir(run.id) / "events.jsonl")
    failed = events[-1]
    assert failed["type"] == "failed" and failed["cause"] == "nan"
    assert "learning rate" in failed["suggestion"]
    saved = [c.step for c in list_checkpoints(store.adapters_dir(run.id))]
    assert saved and max(saved) < failed["iteration"]
    losses = [e["train_loss"] for e in events if e["type"] == "train"]
    assert all(math.isfinite(x) for x in losses)
    assert store.get(run.id).failure["cause"] == "nan"


STOP_REQUEST_PROBE = """
import sys, time
from zyquo_tui.trainer.__main__ import StopRequest
stop = StopRequest()
stop.install()
print("ready", flush=True)
while not stop.requested:
    time.sleep(0.01)
print("asked to stop", flush=True)
time.sleep(60)  # a long step that must not delay the second signal
print("never", flush=True)
"""


def test_a_second_signal_stops_the_trainer_at_once():
    probe = subprocess.Popen([sys.executable, "-c", STOP_REQUEST_PROBE], stdout=subprocess.PIPE,
                             text=True, stdin=subprocess.DEVNULL)
    try:
        assert probe.stdout.readline().strip() == "ready"
        probe.send_signal(signal.SIGTERM)
        assert probe.stdout.readline().strip() == "asked to stop"
        probe.send_signal(signal.SIGINT)
        # Stopped by the signal, not after the 60-s step (bench/bench_stop.py times it).
        assert probe.wait(timeout=30) == -signal.SIGINT
    finally:
        if probe.poll() is None:
            probe.kill()


def test_resume_from_the_middle_of_a_gradient_accumulation_is_exact(tiny_model):
    # Step 5 of accumulation 2 holds one batch's gradients, pending: they are saved with the
    # checkpoint and must be added to step 6's before the update.
    settings = dict(iters=12, steps_per_report=1, save_every=5, steps_per_eval=100,
                    grad_accumulation_steps=2)
    store, straight = make_run(tiny_model, COMPLETIONS, **settings)
    assert run_trainer(store.run_dir(straight.id)).returncode == 0
    _, resumed = make_run(tiny_model, COMPLETIONS, **settings)
    adapters = store.adapters_dir(resumed.id)
    adapters.mkdir(parents=True, exist_ok=True)
    for name in ("0000005_adapters.safetensors", "0000005_state.safetensors",
                 "0000005_state.json", "adapter_config.json"):
        shutil.copy(store.adapters_dir(straight.id) / name, adapters / name)
    assert json.loads((adapters / "0000005_state.json").read_text())["has_grad_accum"]
    store.update(resumed.id, lambda r: setattr(r, "resume_from_step", 5))
    assert run_trainer(store.run_dir(resumed.id)).returncode == 0
    want = losses_by_iteration(read_events(store.run_dir(straight.id) / "events.jsonl"),
                               "train", "train_loss")
    have = losses_by_iteration(read_events(store.run_dir(resumed.id) / "events.jsonl"),
                               "train", "train_loss")
    assert sorted(have) == list(range(6, 13))
    for step in have:
        assert have[step] == pytest.approx(want[step], abs=1e-5), step
