"""A real measurement in a subprocess (mlx lives there): the peak memory of a few training
steps. (A dataset's token lengths come from core.library.token_stats.row_token_lengths.)"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError
from zyquo_tui.core.memory.budget import CPU, GPU
from zyquo_tui.core.memory.estimate import TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.history import training_peak
from zyquo_tui.core.memory.replica import Replica
from zyquo_tui.core.memory.replica_cache import ReplicaCache, measurement_key
from zyquo_tui.core.runs.settings import Hyperparameters
from zyquo_tui.core.system.child_process import run_child
from zyquo_tui.core.system.entry_points import MEASURE, python_command


@dataclass
class Measurement:
    """The peak memory of a few real training steps of a config: MLX's figure, and the
    process's peak resident footprint with its footprint before the model loaded."""

    peak_bytes: int  # MLX's peak (mx.get_peak_memory())
    batch_width: int
    seconds: float
    device: str
    longest_row_tokens: int | None = None
    tokens_per_second: float | None = None  # the median step's, after the first (compiling)
    peak_rss_bytes: int | None = None
    start_rss_bytes: int | None = None
    # ...and once ready to train, less MLX's memory (trainer/loading.py ready_resident_bytes)
    ready_rss_bytes: int | None = None

    @property
    def training_peak_bytes(self) -> int:
        """The larger of the two figures (core.memory.history.training_peak)."""
        return training_peak(self.peak_bytes, self.peak_rss_bytes, self.start_rss_bytes,
                             self.ready_rss_bytes)


def _subprocess_json(command: list[str], spec: dict[str, Any], timeout: float,
                     cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    # The measurement writes its replica model and checkpoints under a folder of ours, which
    # we remove however it ends: killed (SIGKILL, a cancel, the system out of memory), it
    # cannot remove its own.
    with tempfile.TemporaryDirectory(prefix="zyquo-measure-") as scratch:
        returncode, stdout, stderr = run_child(
            command, input_text=json.dumps({**spec, "scratch": scratch}), timeout=timeout,
            cancelled=cancelled, timeout_hint="measure a smaller config")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"The measurement failed (exit status {returncode}): {last}",
                        EXIT_PROBLEMS)
    result = json.loads(lines[-1])
    if "error" in result:
        raise UserError(f"The measurement failed: {result['error']}", EXIT_PROBLEMS)
    return result


def measure_peak(model_path: str, config: TrainingConfig, *, data: str | None = None,
                 hyperparameters: Hyperparameters | None = None,
                 extra_config: dict[str, Any] | None = None, steps: int = 3,
                 timeout: float = 3600.0, python: str | None = None,
                 cancelled: Callable[[], bool] | None = None) -> Measurement:
    """Train `steps` real steps of the config in a subprocess (trainer/measure.py).

    With `data`, on the dataset's longest rows (its worst batch); without, on synthetic rows
    of `TrainingConfig.synthetic_row_tokens` random tokens (a grpo run's: its prompts).
    `hyperparameters` gives the settings the config does not hold (optimizer_config, LoRA
    scale...). Blocks until done: call it from a worker thread;
    `cancelled()` turning true kills the subprocess (a UserError).
    """
    spec: dict[str, Any] = {
        "model": model_path,
        "method": config.method.value,
        "hyperparameters": config.to_hyperparameters(hyperparameters).to_dict(),
        "steps": steps,
        "extra_config": extra_config or {},
    }
    if data:
        spec["data"] = data
    else:
        spec["synthetic_tokens"] = config.synthetic_row_tokens
    result = _subprocess_json(python_command(MEASURE, "-", python=python), spec, timeout,
                              cancelled)
    device = GPU if "gpu" in str(result.get("device", "")).lower() else CPU
    return Measurement(peak_bytes=int(result["peak_memory_bytes"]),
                       batch_width=int(result["batch_width"]),
                       seconds=float(result.get("seconds", 0.0)), device=device,
                       longest_row_tokens=result.get("longest_row_tokens"),
                       peak_rss_bytes=result.get("peak_rss_bytes"),
                       start_rss_bytes=result.get("start_rss_bytes"),
                       ready_rss_bytes=result.get("ready_rss_bytes"),
                       tokens_per_second=result.get("tokens_per_second"))



@dataclass
class ReplicaMeasurement:
    """A replica's measured peak (core/memory/replica.py) and the real config's it predicts."""

    replica: Replica
    replica_peak_bytes: int  # MLX's peak training the replica
    replica_weights_bytes: int  # the replica model's weights
    peak_bytes: int  # the real config's peak the replica predicts
    seconds: float
    device: str
    # When the measurement was kept from (core/memory/replica_cache.py); None: measured now
    measured_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self.replica.to_json(), "replica_peak_bytes": self.replica_peak_bytes,
                "replica_weights_bytes": self.replica_weights_bytes,
                "peak_bytes": self.peak_bytes, "seconds": self.seconds, "device": self.device,
                **({"measured_at": self.measured_at} if self.measured_at else {})}


def measure_replica(model_path: str, model: ModelFacts, config: TrainingConfig,
                    replica: Replica, *, hyperparameters: Hyperparameters | None = None,
                    extra_config: dict[str, Any] | None = None, steps: int = 3,
                    timeout: float = 600.0, python: str | None = None,
                    cancelled: Callable[[], bool] | None = None,
                    cache: ReplicaCache | None = None,
                    cached_only: bool = False) -> ReplicaMeasurement | None:
    """Train `steps` steps of `replica` (planned for `config` by core/memory/replica.py) in a
    subprocess; its prediction of the config's peak. `config` is what one process trains, with
    its loss slicing decided (the advisor's `training_config`). UserError when it fails.

    With a `cache`, a spec measured before on these model files is not measured again; with
    `cached_only`, nothing is measured (None when the cache has no answer)."""
    spec: dict[str, Any] = {
        "model": model_path,
        "method": replica.config.method.value,
        "hyperparameters": replica.config.to_hyperparameters(hyperparameters).to_dict(),
        "steps": steps,
        "extra_config": extra_config or {},
        "synthetic_tokens": replica.config.synthetic_row_tokens,
    }
    if not replica.whole_config:  # scale 1 trains the model itself
        spec["replica"] = {"config": replica.model_config, "dtype": model.compute_dtype}
    # Another interpreter may hold another MLX: only the local one's measurements are kept.
    key = measurement_key(spec, model_path) if cache is not None and python is None else None
    result = cache.get(key) if key is not None else None
    if result is None:
        if cached_only:
            return None
        result = _subprocess_json(python_command(MEASURE, "-", python=python), spec, timeout,
                                  cancelled)
        if key is not None:
            cache.put(key, result)
    peak = int(result["peak_memory_bytes"])
    weights = int(result["model_weights_bytes"])
    return ReplicaMeasurement(
        replica=replica, replica_peak_bytes=peak, replica_weights_bytes=weights,
        peak_bytes=replica.predicted_peak(model, config, peak, weights),
        seconds=float(result.get("seconds", 0.0)),
        device=GPU if "gpu" in str(result.get("device", "")).lower() else CPU,
        measured_at=result.get("measured_at"))
