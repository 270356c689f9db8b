"""Replica measurements kept on this machine ($ZYQUO_HOME/replica_measurements.jsonl).

A replica's peak is MLX's schedule of one graph on one machine: the same spec, on the same
model files, with the same MLX, measures the same within the run-to-run spread the verdict's
margins already hold (bench/memory_calibration/repeats.json; docs/memory.md). So a config
measured once (by `plan`, the new-run form) is not measured again: the next `plan`
answers at once, and the gate that starts the run, and the record made exact when it ends
(core/memory/run_gate.py), hold the figure its user was shown rather than the terms'.

A key is the measurement's spec (core/memory/measure.py: the replica's model config, method,
settings, steps, rows), the model folder's files (name, size, modification time) and the
versions of mlx and mlx-lm. Reading or writing the file never fails a verdict: a store that
cannot be read or written measures again, as before there was a file.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from zyquo_tui.core.store.atomic import write_atomic
from zyquo_tui.core.store.paths import zyquo_home

CACHE_FILE = "replica_measurements.jsonl"
# The file is rewritten with the newest entries once it holds this many more than it keeps.
KEEP_ENTRIES = 500
# The model folder's files a replica depends on (it trains synthetic rows: no tokenizer).
MODEL_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json")
# Settings that never reach a measured step (how long a run is, its schedule, what it logs and
# saves, its seed: the measurement trains its own few steps of synthetic rows), so `plan`'s
# default iterations and a run's own share a measurement.
NOT_IN_A_STEP = ("iters", "learning_rate", "lr_schedule", "project_name", "report_to",
                 "save_every", "seed", "steps_per_eval", "steps_per_report", "val_batches")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _model_files(model_path: str) -> list[list[Any]]:
    folder = Path(model_path)
    found = []
    for pattern in MODEL_FILES:
        for path in sorted(folder.glob(pattern)):
            try:
                stat = path.stat()
            except OSError:
                continue
            found.append([path.name, stat.st_size, stat.st_mtime_ns])
    return found


def measurement_key(spec: dict[str, Any], model_path: str) -> str:
    """What a measurement depends on, hashed: the spec the measuring process gets (its scratch
    folder and NOT_IN_A_STEP aside), the model's files as they are now, mlx and mlx-lm, and
    the processor."""
    spec = {name: value for name, value in spec.items() if name != "scratch"}
    spec["hyperparameters"] = {name: value for name, value
                               in (spec.get("hyperparameters") or {}).items()
                               if name not in NOT_IN_A_STEP}
    identity = {
        "spec": spec,
        "model_files": _model_files(model_path),
        "mlx": _version("mlx"), "mlx_lm": _version("mlx-lm"),
        "machine": platform.machine(),
    }
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ReplicaCache:
    """The replica measurements kept in one store's home."""

    def __init__(self, home: Path | None = None) -> None:
        self.path = (home or zyquo_home()) / CACHE_FILE

    def _entries(self) -> list[dict[str, Any]]:
        entries = []
        try:
            with open(self.path, encoding="utf-8") as handle:
                for line in handle:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue  # a partial last line, or a line damaged by hand
                    if isinstance(entry, dict) and isinstance(entry.get("result"), dict):
                        entries.append(entry)
        except OSError:
            pass
        return entries

    def get(self, key: str) -> dict[str, Any] | None:
        """The measuring process's result for this key (the newest), with `measured_at`."""
        for entry in reversed(self._entries()):
            if entry.get("key") == key:
                return {**entry["result"], "measured_at": entry.get("measured_at")}
        return None

    def put(self, key: str, result: dict[str, Any]) -> None:
        """Keep a result (one appended line); past KEEP_ENTRIES more, keep the newest."""
        entry = {"key": key, "measured_at": time.strftime("%Y-%m-%d %H:%M"), "result": result}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
            entries = self._entries()
            if len(entries) > 2 * KEEP_ENTRIES:  # two processes may do this at once
                write_atomic(self.path,
                             "".join(json.dumps(e) + "\n" for e in entries[-KEEP_ENTRIES:]))
        except OSError:
            pass  # not kept: the next verdict measures again
