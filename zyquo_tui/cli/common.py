"""What the `runs` commands share (runs.py and the command groups it registers): the
supervisor they act through, and a run's record as `runs show --json` prints it.

Like runs.py, this imports the supervisor and the metrics only when a command uses them:
`runs list` over 10,000 runs must start fast (bench/bench_runs_list.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.store.queue import RunQueue
from zyquo_tui.core.store.store import RunStore

if TYPE_CHECKING:
    from zyquo_tui.core.events.metrics import RunMetrics
    from zyquo_tui.core.processes.supervisor import Supervisor


def supervisor_for(store: RunStore | None = None) -> "Supervisor":
    from zyquo_tui.core.processes.supervisor import Supervisor

    return Supervisor(store)


def run_metrics(store: RunStore, run_id: str) -> "RunMetrics":
    from zyquo_tui.core.events import protocol as ev
    from zyquo_tui.core.events.metrics import RunMetrics

    metrics = RunMetrics()
    metrics.ingest(ev.read_events(store.events_path(run_id)))
    return metrics


def show_data(store: RunStore, run: Run) -> dict:
    """The run as `runs show --json` and `runs checkpoints --json` print it (docs/CLI.md)."""
    from zyquo_tui.core.store.checkpoints import list_checkpoints

    metrics = run_metrics(store, run.id)
    best_step = metrics.best_checkpoint_step()
    stop = metrics.stop_reason()
    checkpoints = [
        {"step": c.step, "path": str(c.adapter_path), "bytes": c.bytes, "resumable": c.resumable,
         "val_loss": metrics.val_at(c.step), "best": c.step == best_step, "time": c.mtime}
        for c in list_checkpoints(store.adapters_dir(run.id))
    ]
    return {
        "schema_version": 1,
        "id": run.id, "name": run.name, "state": run.state.value, "method": run.method.value,
        "model": run.model, "data": run.data, "created": run.created,
        "hyperparameters": run.hyperparameters.to_dict(),
        "progress": {**metrics.summary(), "iters": run.hyperparameters.iters,
                     "rank_peak_memory_bytes": metrics.rank_peaks,
                     # a grpo run's mean reward at its last report (None for other runs)
                     "reward_mean": run.summary.get("reward_mean"),
                     # the latest in-run evaluation's eval event (None without --eval-every)
                     "last_eval": metrics.last_eval},
        "checkpoints": checkpoints,
        "process": run.process,
        "failure": run.failure,
        # the memory verdict its start recorded, made exact when it ended (docs/memory.md)
        "memory": run.memory,
        # the out-of-memory ladder's steps taken (docs/unattended.md), in order
        "memory_steps": run.memory_steps,
        "stopped": {"reason": stop[0], "message": stop[1]} if stop else None,
        "lineage": run.lineage,
        "queue_position": RunQueue(store.home).position(run.id),
        "warnings": [w.get("message") for w in metrics.warnings],
        "run_dir": str(store.run_dir(run.id)),
    }
