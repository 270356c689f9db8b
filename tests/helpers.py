"""Small builders used by several test modules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.processes.supervisor import Supervisor
from zyquo_tui.core.runs.mlx_config import run_to_mlx_config
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system.liveness import process_alive, signal_group

FAST = {
    "iters": 40, "batch_size": 4, "learning_rate": 1e-3, "num_layers": -1,
    "steps_per_report": 5, "steps_per_eval": 10, "save_every": 10, "val_batches": 2,
}


def make_run(model: Path, data: Path, method: str = "lora", store: RunStore | None = None,
             **settings) -> tuple[RunStore, Run]:
    store = (store or RunStore()).ensure()
    hp = Hyperparameters.from_dict({**FAST, **settings})
    run = Run.new(model=str(model), data=str(data), method=Method(method), hyperparameters=hp)
    store.create(run)
    return store, run


def losses_by_iteration(events: list[dict], kind: str, key: str) -> dict[int, float]:
    """The last value reported for each iteration (a resumed run re-reports later steps)."""
    return {e["iteration"]: e[key] for e in events if e["type"] == kind}


def copy_run(folder: Path, home: Path) -> str:
    """A trained run's folder copied into the store at `home` (a test's own); its id."""
    import shutil

    shutil.copytree(folder, home / "runs" / folder.name)
    return folder.name


def stop_runs(store: RunStore, *run_ids: str, timeout: float = 60) -> None:
    """End the runs a test started, whatever state it left them in (call it in a finally):
    a queued run leaves the queue, an active one is cancelled and waited for, and one still
    active after `timeout` seconds has its trainer's process group and its runner killed. A
    run that already ended is left alone (its runner may still be pruning or draining the
    queue)."""
    supervisor = Supervisor(store)
    for run_id in run_ids:
        run = supervisor.get(run_id)
        if run.state is RunState.QUEUED:
            supervisor.dequeue(run_id)
        elif run.state.is_active:
            supervisor.cancel(run_id)
    deadline = time.monotonic() + timeout
    for run_id in run_ids:
        # A plain poll, not Supervisor.wait: async tests call this inside their event loop.
        while supervisor.get(run_id).state.is_active and time.monotonic() < deadline:
            time.sleep(0.1)
        if not supervisor.get(run_id).state.is_active:
            continue
        process = supervisor.get(run_id).process or {}
        if process_alive(process):  # the trainer leads its own process group
            signal_group(process["pid"], signal.SIGKILL)
        if process_alive(process, "runner_"):
            os.kill(process["runner_pid"], signal.SIGKILL)


# mlx-lm's own path: what `mlx_lm lora` does in run(), with a callback that records the figures
# (run() itself would replace the callback with its own reporters). Under mlx.launch, rank 0
# writes them.
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


def mlx_lm_reports(run: Run, folder: Path, launcher: tuple[str, ...] = ()) -> dict:
    """The train and val reports of mlx-lm's own training of `run`'s config (through
    `launcher`, such as mlx.launch, when given)."""
    config = run_to_mlx_config(run, adapter_path=str(folder / "mlx-lm-adapters"))
    config["train"] = True
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "reference.py").write_text(MLX_LM_REFERENCE)
    subprocess.run([*launcher, sys.executable, str(folder / "reference.py"),
                    str(folder / "config.json"), str(folder / "reports.json")],
                   capture_output=True, text=True, timeout=600, check=True,
                   stdin=subprocess.DEVNULL)
    return json.loads((folder / "reports.json").read_text())


def assert_losses_equal_mlx_lm(store: RunStore, run: Run, theirs: dict,
                               tolerance: float = 1e-5) -> dict[int, float]:
    """Our run's train and val losses equal mlx-lm's reports at every step; our train losses."""
    ours = read_events(store.events_path(run.id))
    our_train = losses_by_iteration(ours, "train", "train_loss")
    their_train = {r["iteration"]: r["train_loss"] for r in theirs["train"]}
    assert sorted(our_train) == sorted(their_train)
    for step, loss in their_train.items():
        assert our_train[step] == pytest.approx(loss, abs=tolerance), step
    # mlx-lm reports a validation run during step k as iteration k - 1; we report k.
    our_val = losses_by_iteration(ours, "val", "val_loss")
    their_val = {r["iteration"] + 1: r["val_loss"] for r in theirs["val"]}
    assert sorted(our_val) == sorted(their_val)
    for step, loss in their_val.items():
        assert our_val[step] == pytest.approx(loss, abs=tolerance), step
    return our_train


def wait_until_ended(supervisor: Supervisor, run_id: str, timeout: float = 300) -> Run:
    """The run once it is neither queued nor active (nor about to resume one rung down the
    out-of-memory ladder: Supervisor.wait waits through that)."""
    import asyncio

    return asyncio.run(supervisor.wait(run_id, timeout=timeout))
