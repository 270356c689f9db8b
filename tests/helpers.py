"""Small builders used by several test modules."""

from __future__ import annotations

from pathlib import Path

from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.store import RunStore

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
