"""Checkpoints in mlx-lm's layout, plus the trainer state that exact resume needs.

adapters/
  adapter_config.json              every resolved argument, as mlx-lm writes it
  adapters.safetensors             the latest weights (what `--adapter-path` loads)
  0000040_adapters.safetensors     the weights at step 40 (mlx-lm's name)
  0000040_state.safetensors        optimizer state and gradient accumulation at step 40
  0000040_state.json               step, data position, NumPy and MLX RNG states, running sums

Each file is written to a temporary name and renamed, so a trainer killed mid-save leaves
every earlier checkpoint loadable. The state JSON is written last: it is what makes a step
resumable (core/store/checkpoints.py), so a save that fails midway (a full disk) never leaves a
step that resume would pick; the files of that step are removed, and the error says which step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from zyquo_tui.core.library.safetensors_header import read_header
from zyquo_tui.core.store.atomic import fsync_dir
from zyquo_tui.core.store.checkpoints import LATEST_ADAPTERS, adapter_file, state_files

STATE_FORMAT = 1
# The state file's tensors an objective saved (a grpo run's answers kept for reuse).
OBJECTIVE_PREFIX = "objective."


class CheckpointWriteError(Exception):
    """A checkpoint could not be written (most often: the disk is full)."""

    def __init__(self, step: int, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.step = step


def _temp_for(path: Path) -> Path:
    return path.with_name(f".tmp-{os.getpid()}-{path.name}")


def _save_tensors(path: Path, tensors: dict[str, mx.array]) -> None:
    temp = _temp_for(path)
    try:
        mx.save_safetensors(str(temp), tensors)  # RuntimeError "[write] Unable to write..."
        _fsync(temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)  # a half-written file would hold the disk's last bytes


def _save_json(path: Path, data: Any) -> None:
    temp = _temp_for(path)
    try:
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    adapters: Path, step: int, weights: dict[str, mx.array], optimizer_state: Any,
    grad_accum: Any, loss_sum: mx.array | float, meta: dict[str, Any],
    objective_tensors: dict[str, mx.array] | None = None,
) -> dict[str, Any]:
    """Write weights and resume state for `step`; return the paths and bytes written.

    Raises CheckpointWriteError, with no file of `step` left behind, when a write fails.
    """
    numbered = adapter_file(adapters, step)
    latest = adapters / LATEST_ADAPTERS
    state_tensors, state_json = state_files(adapters, step)
    tensors = {f"optimizer.{k}": v for k, v in tree_flatten(optimizer_state)}
    if grad_accum is not None:
        tensors.update({f"grad_accum.{k}": v for k, v in tree_flatten(grad_accum)})
    tensors["loss_sum"] = mx.array(loss_sum, dtype=mx.float32)
    tensors.update({OBJECTIVE_PREFIX + k: v for k, v in (objective_tensors or {}).items()})
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    try:
        # An older save of this step (a resume from an earlier step) stops being resumable
        # before any of its files is replaced.
        state_json.unlink(missing_ok=True)
        _save_tensors(numbered, weights)
        _save_tensors(state_tensors, tensors)
        _save_json(state_json, {
            "format": STATE_FORMAT,
            "step": step,
            "numpy_rng": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
            "mlx_rng": [int(x) for x in mx.random.state[0].tolist()],
            "has_grad_accum": grad_accum is not None,
            **meta,
        })
        fsync_dir(adapters)
    except (OSError, RuntimeError) as error:
        for path in (state_json, state_tensors, numbered):
            path.unlink(missing_ok=True)
        raise CheckpointWriteError(step, error) from error
    try:
        _save_tensors(latest, weights)  # after the checkpoint: it is complete without this
    except (OSError, RuntimeError) as error:
        raise CheckpointWriteError(step, error) from error
    paths = [numbered, state_tensors, state_json]
    return {
        "adapter_file": str(numbered),
        "latest": str(latest),
        "state_files": [str(state_tensors), str(state_json)],
        "bytes": sum(p.stat().st_size for p in paths),
    }


def saved_shapes(weights_file: Path) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of a weights file, from its header (nothing loaded)."""
    return {tensor.name: tuple(tensor.shape) for tensor in read_header(weights_file)}


def load_state(adapters: Path, step: int) -> tuple[dict[str, Any], dict[str, mx.array]]:
    """The saved meta and tensors of `step`; FileNotFoundError when that step has none."""
    state_tensors, state_json = state_files(adapters, step)
    meta = json.loads(state_json.read_text(encoding="utf-8"))
    if meta.get("format") != STATE_FORMAT:
        raise ValueError(f"{state_json}: trainer state format {meta.get('format')} is unknown")
    return meta, mx.load(str(state_tensors))


def objective_tensors(tensors: dict[str, mx.array]) -> dict[str, mx.array]:
    """What the run's objective saved with a step (save_checkpoint's objective_tensors)."""
    return {k[len(OBJECTIVE_PREFIX):]: v for k, v in tensors.items()
            if k.startswith(OBJECTIVE_PREFIX)}


def split_state(tensors: dict[str, mx.array]) -> tuple[Any, Any, mx.array]:
    """optimizer state tree, gradient accumulation tree (or None), loss sum."""
    def subtree(prefix: str):
        items = [(k[len(prefix):], v) for k, v in tensors.items() if k.startswith(prefix)]
        return tree_unflatten(items) if items else None

    return subtree("optimizer."), subtree("grad_accum."), tensors["loss_sum"]


def restore_rngs(meta: dict[str, Any]) -> None:
    """Put NumPy's global RNG (data order) and MLX's key (dropout) back as they were."""
    kind, keys, pos, has_gauss, cached = meta["numpy_rng"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    mx.random.seed(mlx_rng_seed(meta["mlx_rng"]))


def mlx_rng_seed(key: Any = None) -> int:
    """The seed that puts MLX's global random key back as `key` (mx.random.state[0], or the
    [high, low] pair a checkpoint saves; None: the key as it is now). MLX's state cannot be
    assigned; its key is the two 32-bit halves of the 64-bit seed that made it, so seeding with
    them packed recreates it exactly, draws to come included. The one packing: checkpoints, the
    client and the server's models all keep and restore keys through it."""
    if key is None:
        key = mx.random.state[0]
    high, low = (int(x) for x in (key.tolist() if hasattr(key, "tolist") else key))
    return (high << 32) | low

