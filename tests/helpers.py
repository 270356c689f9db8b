"""Small builders used by several test modules."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from zyquo_tui.core.processes.supervisor import Supervisor
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
