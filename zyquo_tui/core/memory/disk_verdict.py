"""The disk verdict: will a run's checkpoints fit on the store's disk?

One checkpoint holds the trained weights (the adapters, float32; for full fine-tuning the
trained blocks), the optimizer state, the gradient accumulation when there is one, and the
resume state (a small JSON). Every checkpoint a run saves stays on disk while it trains:
retention (core/store/retention.py) prunes only when the run completes, and a cancelled or
failed run keeps them all for a resume. adapters.safetensors (the latest weights) adds one more
copy of the weights.

That need is set against the free space of the store's disk above the floor
(config.toml `[disk] floor_bytes`), which the trainer never eats into: it stops, with a last
checkpoint, while the disk still holds the floor and that checkpoint (cause `disk`).
Above the room is "won't fit", above DISK_TIGHT_FRACTION of it "tight".
Nothing here imports mlx; the figures come from the model's safetensors headers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError
from zyquo_tui.core.formatting import fmt_bytes
from zyquo_tui.core.memory.advisor import Verdict
from zyquo_tui.core.memory.estimate import TrainingConfig, features
from zyquo_tui.core.memory.facts import LORA_BYTES, ModelFacts
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import Hyperparameters, Method

# The checkpoint bytes are exact, but the disk is shared: logs, exports and other runs'
# checkpoints take free space while the run trains, so above 85% of the room is tight.
DISK_TIGHT_FRACTION = 0.85
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.core.system.disk_space import free_bytes

# The settings beyond the memory ones that decide the disk's need.
DISK_SETTINGS = frozenset({"iters", "save_every"})

# The resume state's JSON (RNG states, the data position, running sums) and the safetensors
# headers: tens of KiB at most; counted generously.
STATE_OVERHEAD_BYTES = 256 * 1024


def checkpoint_bytes(model: ModelFacts, config: TrainingConfig) -> tuple[int, int]:
    """(bytes of one checkpoint, bytes of the weights alone)."""
    quantities = features(model, config)
    elements = int(quantities["_elements"])
    weights = elements * (LORA_BYTES if config.method is not Method.FULL
                          else model.compute_bytes)
    accumulation = weights if config.grad_accumulation_steps > 1 else 0
    state = int(quantities["optimizer_state"]) + accumulation + STATE_OVERHEAD_BYTES
    return weights + state, weights


def checkpoints_saved(iters: int, save_every: int) -> int:
    """The checkpoints a run saves: every save_every steps, and at its last step."""
    save_every = max(save_every, 1)
    return iters // save_every + (1 if iters % save_every else 0)


@dataclass
class DiskAssessment:
    """A run's checkpoints against the free space of the store's disk."""

    verdict: Verdict | None  # None when the free space cannot be read
    reason: str
    checkpoint_bytes: int
    checkpoints: int
    disk_bytes: int
    free_bytes: int | None
    floor_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"disk_bytes": self.disk_bytes, "disk_free_bytes": self.free_bytes,
                "disk_verdict": self.verdict.value if self.verdict else None,
                "disk_reason": self.reason, "disk_floor_bytes": self.floor_bytes,
                "checkpoint_bytes": self.checkpoint_bytes, "checkpoints": self.checkpoints}


def judge_disk(need: int, one: int, count: int, free: int | None, floor: int) -> DiskAssessment:
    what = f"{count} checkpoint{'s' if count != 1 else ''} of {fmt_bytes(one)}"
    if free is None:
        return DiskAssessment(None, f"needs about {fmt_bytes(need)} ({what}); the free space "
                              "of the store's disk could not be read.", one, count, need, free,
                              floor)
    room = free - floor
    above = f"{fmt_bytes(free)} free on the store's disk, less its {fmt_bytes(floor)} floor"
    verdict = Verdict.of(need, room, DISK_TIGHT_FRACTION)
    if verdict is Verdict.WONT_FIT:
        reason = f"needs about {fmt_bytes(need)} ({what}), more than the {above}."
    elif verdict is Verdict.TIGHT:
        reason = (f"needs about {fmt_bytes(need)} ({what}), {need / max(room, 1):.0%} of the "
                  f"{above}.")
    else:
        reason = f"needs about {fmt_bytes(need)} ({what}) of the {above}."
    return DiskAssessment(verdict, reason, one, count, need, free, floor)


def assess_disk(model: ModelFacts, config: TrainingConfig, hp: Hyperparameters, *,
                home: Path, settings: Settings | None = None,
                free: int | None = None) -> DiskAssessment:
    """The disk verdict of a config whose checkpoints go to the store at `home`."""
    settings = settings or Settings.load(home)
    one, weights = checkpoint_bytes(model, config)
    count = checkpoints_saved(hp.iters, hp.save_every)
    free = free_bytes(home) if free is None else free
    return judge_disk(count * one + weights, one, count, free, settings.disk_floor_bytes)


def disk_gate(run: Run, store: RunStore, *, override: bool = False,
              model: ModelFacts | None = None) -> DiskAssessment:
    """Judge a run's checkpoints before it starts and record it in run.disk; refuse "won't
    fit" (exit status 1) unless `override`, which is recorded. The caller saves the run."""
    model = model or ModelFacts.from_folder(run.model)
    config = TrainingConfig.from_run(run)
    assessment = assess_disk(model, config, run.hyperparameters, home=store.home)
    run.disk = {**assessment.to_json(),
                "override": bool(override and assessment.verdict is Verdict.WONT_FIT),
                "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if assessment.verdict is Verdict.WONT_FIT and not override:
        raise UserError(f"This run won't fit on disk: it {assessment.reason[:-1]}; free some "
                        "space, save fewer checkpoints (a larger save_every), or start it "
                        "with an explicit override (--override-disk).", EXIT_PROBLEMS)
    return assessment
