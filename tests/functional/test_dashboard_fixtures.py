"""Fixed run stores for the dashboard's tests and snapshots, written as the trainer would.

Every run.json, events.jsonl, trainer.log and checkpoint file is written directly, with fixed
times, so screens show the same thing on every machine (with the clock and time zone fixed by
the tests). The tests at the bottom check that the store reads them back as intended.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system.liveness import identity

T0 = 1_764_403_200.0  # 2025-11-29 08:00:00 UTC
NOW = T0 + 2 * 3600  # the tests' clock
MODEL = "/models/Qwen2.5-0.5B-Instruct-4bit"
DATA = "/data/support-chat"


def event(kind: str, time: float, **fields) -> dict:
    return {"v": 1, "type": kind, "time": round(time, 3), **fields}


def loss_at(step: int, seed: int = 0) -> float:
    """A falling, slightly noisy training loss."""
    return 2.9 * math.exp(-step / 140) + 0.85 + 0.06 * math.sin(step * 0.9 + seed)


def val_loss_at(step: int, seed: int = 0) -> float:
    """Validation loss: falls with training, then rises again after step 220 (overfitting)."""
    return (2.9 * math.exp(-step / 140) + 0.97 + 0.02 * math.sin(step + seed)
            + 0.000012 * max(0, step - 220) ** 2)


def training_events(iters: int, upto: int, *, start: float, report: int = 10, evaluate: int = 50,
                    save: int = 100, seed: int = 0, resumed_from: int | None = None,
                    step_seconds: float = 0.5) -> list[dict]:
    """started, then train / val / checkpoint events as the trainer writes them, up to `upto`."""
    first = (resumed_from or 0) + 1
    events = [event("started", start, pid=4242, host="mini", iters=iters,
                    resumed_from_step=resumed_from, dataset={"train": 1200, "valid": 120},
                    parameters={"total": 494_000_000, "trainable": 1_081_344})]
    for step in range(first, upto + 1):
        now = start + 8 + step * step_seconds
        if step == 1 or step % evaluate == 0 or step == iters:
            events.append(event("val", now, iteration=step,
                                val_loss=val_loss_at(step, seed), val_time=1.6))
        if step % report == 0 or step == iters:
            events.append(event(
                "train", now, iteration=step, train_loss=loss_at(step, seed),
                learning_rate=1e-5 * min(1.0, step / 50) * (1 - 0.5 * step / iters),
                iterations_per_second=2.0, tokens_per_second=1850.0 + 40 * math.sin(step / 7),
                trained_tokens=step * 900, peak_memory_bytes=int(3.1e9 + step * 2e5),
                peak_rss_bytes=int(3.4e9 + step * 3e5)))
        if step % save == 0 or step == iters:
            val = val_loss_at(step, seed) if (step % evaluate == 0 or step == iters) else None
            fields = {"iteration": step, "bytes": 4_456_448,
                      "adapter_file": f"adapters/{step:07d}_adapters.safetensors"}
            if val is not None:
                fields["val_loss"] = val
            events.append(event("checkpoint", now, **fields))
    return events


def write_events(store: RunStore, run_id: str, events: list[dict]) -> None:
    with open(store.events_path(run_id), "a", encoding="utf-8") as handle:
        for item in events:
            handle.write(json.dumps(item) + "\n")


def write_checkpoints(store: RunStore, run_id: str, steps: list[int], *, resumable: bool = True,
                      mtime_of=lambda step: T0 + 8 + step * 0.5) -> None:
    adapters = store.adapters_dir(run_id)
    adapters.mkdir(parents=True, exist_ok=True)
    (adapters / "adapter_config.json").write_text("{}\n")
    for step in steps:
        files = [(adapters / f"{step:07d}_adapters.safetensors", 4_456_448)]
        if resumable:
            files += [(adapters / f"{step:07d}_state.safetensors", 8_912_896),
                      (adapters / f"{step:07d}_state.json", 2_048)]
        for path, size in files:
            with open(path, "wb") as handle:
                handle.truncate(size)  # sparse: the size shows without the bytes
            os.utime(path, (mtime_of(step), mtime_of(step)))
    (adapters / "adapters.safetensors").write_bytes(b"")


def make(store: RunStore, run_id: str, name: str, state: RunState, *, iters: int = 400,
         method: str = "lora", model: str = MODEL, data: str = DATA, summary: dict | None = None,
         failure: dict | None = None, process: dict | None = None, created_offset: float = 0,
         **hyperparameters) -> Run:
    hp = Hyperparameters.from_dict({"iters": iters, "steps_per_report": 10,
                                    "steps_per_eval": 50, "save_every": 100, **hyperparameters})
    run = Run(id=run_id, name=name, method=Method(method), model=model, data=data,
              hyperparameters=hp, state=state, created="2025-11-29T08:00:00+00:00",
              summary=summary or {}, failure=failure, process=process)
    store.create(run)
    return run


def summary_of(events: list[dict]) -> dict:
    metrics = RunMetrics()
    metrics.ingest(events)
    s = metrics.summary()
    summary = {k: s[k] for k in ("step", "last_train_loss", "last_val_loss", "best_val_loss",
                                 "tokens_per_second", "peak_memory_bytes")}
    summary["iters"] = metrics.iters
    summary["started_at"] = metrics.first_started_time  # as the trainer keeps them
    if metrics.terminal is not None:
        summary["ended_at"] = metrics.terminal["time"]
    return summary


_STAND_IN: subprocess.Popen | None = None


def _stop_stand_in() -> None:
    if _STAND_IN is not None and _STAND_IN.poll() is None:
        _STAND_IN.stdin.close()  # it reads its stdin to the end, then exits
        try:
            _STAND_IN.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _STAND_IN.kill()
            _STAND_IN.wait()


def alive_process() -> dict:
    """A process record that liveness checks find alive: a stand-in child that idles until
    the test session ends (never the test process itself: a confirmed cancel signals the
    recorded process group, which is the stand-in's own)."""
    global _STAND_IN
    if _STAND_IN is None or _STAND_IN.poll() is not None:
        _STAND_IN = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                     stdin=subprocess.PIPE, start_new_session=True)
        atexit.register(_stop_stand_in)
    them = identity(_STAND_IN.pid)
    return {"pid": them["pid"], "start_time": them["start_time"], "requested_at": T0 + 3600}


def write_showcase_store(home: Path, *, with_running: bool = True) -> RunStore:
    """Eight runs, one of each state, plus a damaged folder: the store the snapshots show."""
    store = RunStore(home).ensure()

    # completed: 400 steps, checkpoints every 100, best at 300
    done_id = "20251129-080000-000-a1b2"
    events = training_events(400, 400, start=T0)
    events.append(event("completed", T0 + 8 + 400 * 0.5 + 1, iteration=400))
    make(store, done_id, "support-chat lora r16", RunState.COMPLETED, summary=summary_of(events),
         process={"requested_at": T0, "ended_at": T0 + 210})
    write_events(store, done_id, events)
    write_checkpoints(store, done_id, [100, 200, 300, 400])
    (store.log_path(done_id)).write_text(trainer_log(400, 400))

    if with_running:
        running_id = "20251129-091500-000-c3d4"
        events = training_events(600, 230, start=T0 + 3600, seed=2)
        events.append(event("warning", T0 + 3600 + 9, code="truncated",
                            message="3 of 1200 train rows are longer than max_seq_length (2048) "
                                    "and will be cut."))
        make(store, running_id, "support-chat dora", RunState.RUNNING, iters=600, method="dora",
             summary=summary_of(events), process=alive_process())
        write_events(store, running_id, sorted(events, key=lambda e: e["time"]))
        write_checkpoints(store, running_id, [100, 200],
                          mtime_of=lambda step: T0 + 3600 + 8 + step * 0.5)
        (store.log_path(running_id)).write_text(trainer_log(600, 230))

    failed_id = "20251129-083000-000-e5f6"
    events = training_events(1000, 140, start=T0 + 1800, seed=4)
    events.append(event("failed", T0 + 1800 + 80, iteration=143, cause="oom",
                        message="The trainer ran out of memory.",
                        suggestion="lower batch_size or max_seq_length, turn on grad_checkpoint, "
                                   "train fewer layers, or use a quantized base model",
                        traceback=["MemoryError"]))
    make(store, failed_id, "long-context full", RunState.FAILED, iters=1000, method="full",
         summary=summary_of(events), process={"requested_at": T0 + 1800, "ended_at": T0 + 1881},
         failure={"cause": "oom", "message": "The trainer ran out of memory.",
                  "suggestion": "lower batch_size or max_seq_length, turn on grad_checkpoint, "
                                "train fewer layers, or use a quantized base model"},
         batch_size=16, max_seq_length=8192)
    write_events(store, failed_id, events)
    write_checkpoints(store, failed_id, [100])

    cancelled_id = "20251129-081000-000-a7b8"
    events = training_events(500, 180, start=T0 + 600, seed=6)
    events.append(event("cancelled", T0 + 600 + 99, iteration=183, checkpoint=183))
    make(store, cancelled_id, "summaries qlora", RunState.CANCELLED, iters=500, method="qlora",
         summary=summary_of(events), process={"requested_at": T0 + 600, "ended_at": T0 + 700},
         data="/data/summaries")
    write_events(store, cancelled_id, events)
    write_checkpoints(store, cancelled_id, [100, 183])

    queued_id = "20251129-093000-000-c9d0"
    make(store, queued_id, "support-chat lora r32", RunState.QUEUED, iters=800)
    (home / "queue.json").write_text(json.dumps({"order": [queued_id]}))

    make(store, "20251129-094500-000-e1f2", "tiny sanity check", RunState.CONFIGURED, iters=60,
         model="/models/zyquo-tiny", data="/data/completions")

    interrupted_id = "20251129-082000-000-a3b4"
    events = training_events(300, 90, start=T0 + 1200, seed=8)
    make(store, interrupted_id, "docs text lora", RunState.INTERRUPTED, iters=300,
         summary=summary_of(events), data="/data/docs-text",
         process={"requested_at": T0 + 1200, "ended_at": T0 + 1260},
         failure={"cause": "killed", "message": "The trainer was killed (SIGKILL) at step 90.",
                  "suggestion": "something outside zyquo-tui stopped the trainer; resume the "
                                "run from its latest checkpoint"})
    write_events(store, interrupted_id, events)

    damaged = store.runs_root / "20251129-085000-000-dead"
    damaged.mkdir()
    (damaged / "run.json").write_text('{"schema_version": 1, "id": ')
    return store


def dpo_figures(step: int) -> dict:
    """A DPO run's figures at a step: the loss falls from ln 2 as the reward margin grows and
    the chosen answers score above the rejected ones more and more often."""
    margin = 2.4 * (1 - math.exp(-step / 90)) + 0.12 * math.sin(step * 0.7)
    chosen = 0.45 * margin - 0.2 * (1 - math.exp(-step / 90))
    return {"loss": math.log(2) * math.exp(-step / 160) + 0.18 * (1 - math.exp(-step / 160))
            + 0.02 * math.sin(step * 0.9),
            "reward_margin": margin, "reward_accuracy": min(0.97, 0.5 + 0.45 * (1 - math.exp(
                -step / 70)) + 0.04 * math.sin(step * 1.3)),
            "chosen_reward": chosen, "rejected_reward": chosen - margin}


def dpo_events(iters: int, upto: int, *, start: float, report: int = 10,
               evaluate: int = 50) -> list[dict]:
    """A DPO run's events as the trainer writes them: train and val events carry the reward
    figures beside the loss (docs/EVENTS.md)."""
    events = [event("started", start, pid=4242, host="mini", iters=iters,
                    resumed_from_step=None, dataset={"train": 225, "valid": 40},
                    parameters={"total": 494_000_000, "trainable": 1_081_344})]
    for step in range(1, upto + 1):
        now = start + 8 + step * 0.5
        if step == 1 or step % evaluate == 0:
            figures = dpo_figures(step - 1)  # validation before the step's update
            events.append(event("val", now, iteration=step, val_loss=figures["loss"] + 0.03,
                                val_time=1.1, reward_margin=figures["reward_margin"] * 0.85,
                                reward_accuracy=figures["reward_accuracy"] - 0.04,
                                chosen_reward=figures["chosen_reward"],
                                rejected_reward=figures["rejected_reward"]))
        if step % report == 0:
            figures = dpo_figures(step)
            events.append(event(
                "train", now, iteration=step, train_loss=figures["loss"],
                learning_rate=5e-6, iterations_per_second=2.0, tokens_per_second=1420.0,
                trained_tokens=step * 700, peak_memory_bytes=int(4.2e9 + step * 1e5),
                reward_margin=figures["reward_margin"],
                reward_accuracy=figures["reward_accuracy"],
                chosen_reward=figures["chosen_reward"],
                rejected_reward=figures["rejected_reward"]))
        if step % 100 == 0:
            events.append(event("checkpoint", now, iteration=step, bytes=4_456_448,
                                adapter_file=f"adapters/{step:07d}_adapters.safetensors"))
    return events


PREFERENCE_RUNNING = "20251129-091500-000-d0e1"
PREFERENCE_DONE = "20251129-090000-000-f2a3"


def write_preference_store(home: Path) -> RunStore:
    """A running DPO run, a completed ORPO run and an SFT run beside them: what the runs list
    and the live metrics show of preference runs."""
    store = RunStore(home).ensure()
    events = dpo_events(400, 260, start=T0 + 3600)
    make(store, PREFERENCE_RUNNING, "helpful pairs", RunState.RUNNING, data="/data/helpful-pairs",
         summary=summary_of(events), process=alive_process(), zyquo_tui={"objective": "dpo"})
    write_events(store, PREFERENCE_RUNNING, events)
    write_checkpoints(store, PREFERENCE_RUNNING, [100, 200],
                      mtime_of=lambda step: T0 + 3600 + 8 + step * 0.5)

    events = dpo_events(200, 200, start=T0 + 1800)
    events.append(event("completed", T0 + 1800 + 8 + 200 * 0.5 + 1, iteration=200))
    make(store, PREFERENCE_DONE, "helpful pairs beta 0.2", RunState.COMPLETED, iters=200,
         data="/data/helpful-pairs", summary=summary_of(events),
         process={"requested_at": T0 + 1800, "ended_at": T0 + 1910},
         zyquo_tui={"objective": "orpo", "beta": 0.2})
    write_events(store, PREFERENCE_DONE, events)

    events = training_events(400, 400, start=T0)
    events.append(event("completed", T0 + 8 + 400 * 0.5 + 1, iteration=400))
    make(store, "20251129-080000-000-a1b2", "support-chat lora r16", RunState.COMPLETED,
         summary=summary_of(events), process={"requested_at": T0, "ended_at": T0 + 210})
    write_events(store, "20251129-080000-000-a1b2", events)
    return store


def trainer_log(iters: int, upto: int) -> str:
    lines = ["Loading pretrained model /models/Qwen2.5-0.5B-Instruct-4bit",
             "Loading datasets: 1200 train, 120 valid"]
    for step in range(10, upto + 1, 10):
        lines.append(f"step {step}: train loss {loss_at(step):.4f}, lr 1e-05, 1850 tok/s")
        if step % 50 == 0:
            lines.append(f"step {step}: val loss {val_loss_at(step):.4f}")
    if upto == iters:
        lines.append(f"completed {iters} steps")
    return "\n".join(lines) + "\n"


def write_empty_store(home: Path) -> RunStore:
    return RunStore(home).ensure()


# -- the fixtures read back as intended ---------------------------------------------------------


def test_showcase_store_has_every_state_and_a_damaged_run(tmp_path):
    store = write_showcase_store(tmp_path / "home")
    records = store.list()
    states = sorted(r.state.value for r in records if isinstance(r, Run))
    assert states == sorted(s.value for s in RunState if s is not RunState.STARTING)
    assert [r.id for r in records if not isinstance(r, Run)] == ["20251129-085000-000-dead"]


def test_showcase_completed_run_has_its_best_checkpoint_at_300(tmp_path):
    store = write_showcase_store(tmp_path / "home", with_running=False)
    metrics = RunMetrics()
    metrics.ingest(read_events(store.events_path("20251129-080000-000-a1b2")))
    assert metrics.best_checkpoint_step() == 300
    assert metrics.terminal["type"] == "completed"


def test_preference_store_runs_are_dpo_orpo_and_sft_with_reward_series(tmp_path):
    store = write_preference_store(tmp_path / "home")
    objectives = {run.id: run.objective for run in store.list()}
    assert sorted(objectives.values()) == ["dpo", "orpo", "sft"]
    metrics = RunMetrics()
    metrics.ingest(read_events(store.events_path(PREFERENCE_RUNNING)))
    margins = metrics.series["reward_margin"]
    assert len(margins) == 26 and margins.last > 1.5
    assert len(metrics.series["val_reward_margin"]) == 6
    assert abs(metrics.series["val_loss"].values[0] - (math.log(2) + 0.03)) < 1e-9
