"""The checkpoints of a run, read from its adapters/ folder without loading a tensor.

Names follow mlx-lm (`0000040_adapters.safetensors`); the trainer adds the resume state of each
step beside it (`0000040_state.safetensors`, `0000040_state.json`). See trainer/checkpoints.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

LATEST_ADAPTERS = "adapters.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
_NUMBERED = re.compile(r"^(\d{7})_adapters\.safetensors$")


def adapter_file(adapters: Path, step: int) -> Path:
    return adapters / f"{step:07d}_adapters.safetensors"


def state_files(adapters: Path, step: int) -> tuple[Path, Path]:
    return adapters / f"{step:07d}_state.safetensors", adapters / f"{step:07d}_state.json"


@dataclass
class Checkpoint:
    """One saved step: its weights, whether it can be resumed exactly, its size and time."""

    step: int
    adapter_path: Path
    resumable: bool
    bytes: int
    mtime: float

    def files(self) -> list[Path]:
        return [self.adapter_path, *state_files(self.adapter_path.parent, self.step)]


def list_checkpoints(adapters: Path) -> list[Checkpoint]:
    """Every numbered checkpoint, oldest step first."""
    found = []
    try:
        entries = list(adapters.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        match = _NUMBERED.match(entry.name)
        if not match:
            continue
        step = int(match.group(1))
        tensors, meta = state_files(adapters, step)
        resumable = tensors.exists() and meta.exists()
        try:
            stat = entry.stat()
            size = stat.st_size + (tensors.stat().st_size + meta.stat().st_size if resumable else 0)
        except FileNotFoundError:
            continue  # deleted while we looked
        found.append(Checkpoint(step, entry, resumable, size, stat.st_mtime))
    return sorted(found, key=lambda c: c.step)


def latest_resumable(adapters: Path) -> Checkpoint | None:
    resumable = [c for c in list_checkpoints(adapters) if c.resumable]
    return resumable[-1] if resumable else None


def checkpoint_at(adapters: Path, step: int | None, run_id: str) -> Checkpoint:
    """The checkpoint of `step` (None: the latest), for a command that uses a run's weights;
    UserError naming the steps there are, when there is none."""
    from zyquo_tui.core.errors import UserError

    checkpoints = list_checkpoints(adapters)
    if not checkpoints:
        raise UserError(f"Run {run_id} has no checkpoint yet; train it until it saves one "
                        "(every save_every steps).")
    if step is None:
        return checkpoints[-1]
    for checkpoint in checkpoints:
        if checkpoint.step == step:
            return checkpoint
    raise UserError(f"Run {run_id} has no checkpoint at step {step}; it has "
                    f"{', '.join(str(c.step) for c in checkpoints)}.")
