"""Checkpoint retention: keep the best and the last N checkpoints of a run when it completes.

The choice lives in the run's folder as retention.json, `{"keep_last": N, "keep_best": true}`
(no file: keep everything). The runner applies it when the run completes, with or without a
dashboard; a dashboard that sees the end applies it too. Applying it twice is harmless.

Only completed runs are pruned: a cancelled, failed or interrupted run keeps every checkpoint,
since the user may want to resume it from any of them. The final adapters.safetensors and
adapter_config.json are never touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.store.atomic import write_json_atomic
from zyquo_tui.core.store.checkpoints import Checkpoint, list_checkpoints
from zyquo_tui.core.store.store import RunStore

RETENTION_FILE = "retention.json"
KEEP_LAST_CHOICES = (1, 2, 3, 5, 10)


@dataclass(frozen=True)
class RetentionPolicy:
    """Which checkpoints survive the end of a run: the best one (lowest validation loss) and
    the `keep_last` most recent ones."""

    keep_last: int
    keep_best: bool = True

    def describe(self) -> str:
        last = "the last" if self.keep_last == 1 else f"the last {self.keep_last}"
        return f"keep the best and {last}" if self.keep_best else f"keep {last}"

    def to_dict(self) -> dict:
        return {"keep_last": self.keep_last, "keep_best": self.keep_best}


def load_policy(run_dir: Path) -> RetentionPolicy | None:
    """The run's choice, or None (keep everything) when there is none or it cannot be read."""
    try:
        data = json.loads((run_dir / RETENTION_FILE).read_text(encoding="utf-8"))
        keep_last = int(data["keep_last"])
    except (FileNotFoundError, ValueError, KeyError, TypeError, OSError):
        return None
    if keep_last < 1:
        return None
    return RetentionPolicy(keep_last, bool(data.get("keep_best", True)))


def save_policy(run_dir: Path, policy: RetentionPolicy | None) -> None:
    path = run_dir / RETENTION_FILE
    if policy is None:
        path.unlink(missing_ok=True)
        return
    write_json_atomic(path, policy.to_dict())


def best_checkpoint_step(store: RunStore, run_id: str) -> int | None:
    metrics = RunMetrics()
    metrics.ingest(ev.read_events(store.events_path(run_id)))
    return metrics.best_checkpoint_step()


def doomed(checkpoints: list[Checkpoint], policy: RetentionPolicy,
           best_step: int | None) -> list[Checkpoint]:
    """The checkpoints the policy removes (oldest first)."""
    keep = {c.step for c in checkpoints[-policy.keep_last:]}
    if policy.keep_best and best_step is not None:
        keep.add(best_step)
    return [c for c in checkpoints if c.step not in keep]


def deletion_refusal(run: Run, checkpoint: Checkpoint, checkpoints: list[Checkpoint]
                     ) -> str | None:
    """Why this checkpoint may not be deleted now (None when it may): an active run's newest
    is the one its trainer may be writing, and the one it would resume from."""
    newest = max((c.step for c in checkpoints), default=None)
    if run.state.is_active and checkpoint.step == newest:
        return (f"Run {run.id} is {run.state.value} and step {checkpoint.step} is its newest "
                "checkpoint, the one it resumes from; delete it once the run has stopped.")
    return None


def delete_checkpoint(checkpoint: Checkpoint) -> None:
    for path in checkpoint.files():
        path.unlink(missing_ok=True)


def apply_retention(store: RunStore, run_id: str, best_step: int | None = None) -> list[int]:
    """Prune a completed run's checkpoints by its policy; returns the steps removed."""
    policy = load_policy(store.run_dir(run_id))
    if policy is None:
        return []
    run = store.get(run_id)
    if run.state.value != "completed":
        return []
    checkpoints = list_checkpoints(store.adapters_dir(run_id))
    if best_step is None and policy.keep_best:
        best_step = best_checkpoint_step(store, run_id)
    removed = doomed(checkpoints, policy, best_step)
    for checkpoint in removed:
        delete_checkpoint(checkpoint)
    return [c.step for c in removed]
