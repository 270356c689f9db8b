"""The memory budget of this machine: what MLX may use for training, and what is free now.

On macOS (Metal) the budget is the limit the GPU works within: `iogpu.wired_limit_mb` when the
user raised it with sysctl, else Metal's recommended working set (`max_recommended_working_set_
size`, which mlx-lm also sets the wired limit to when training starts). On Linux and other CPU
machines it is MLX's memory limit (`mx.get_memory_limit()`, a fraction of RAM), never more than
the RAM itself.

Both MLX figures need `import mlx` (seconds), so a probe subprocess finds them
(`core.machine.probe_mlx`) and the answer is cached per machine in $ZYQUO_HOME/machine_probe.json,
keyed by host, platform, Python and MLX version: a new MLX or another machine probes again.
What other processes use right now (and so what is available) is read live, every time.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import socket
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from zyquo_tui.core.store.atomic import write_json_atomic
from zyquo_tui.core.store.paths import zyquo_home
from zyquo_tui.core.system.machine import memory_facts, probe_mlx

PROBE_CACHE_FILE = "machine_probe.json"

GPU = "gpu"
CPU = "cpu"


@dataclass
class MemoryBudget:
    """What a training run may use on this machine, and what is free right now (bytes)."""

    device: str  # "gpu" (Metal) or "cpu"
    budget_bytes: int
    budget_source: str  # a phrase: where budget_bytes comes from
    total_bytes: int
    available_bytes: int
    used_by_others_bytes: int
    probed: bool = True  # False when the MLX probe failed and the budget is RAM alone

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def fixed(cls, budget_bytes: int, *, device: str = CPU,
              available_bytes: int | None = None, total_bytes: int | None = None,
              ) -> "MemoryBudget":
        """A budget given outright (tests, calibration, or a machine described by hand)."""
        total = total_bytes if total_bytes is not None else budget_bytes
        available = available_bytes if available_bytes is not None else total
        return cls(device=device, budget_bytes=budget_bytes, budget_source="given",
                   total_bytes=total, available_bytes=available,
                   used_by_others_bytes=max(total - available, 0))


def _cache_key() -> dict[str, str]:
    try:
        mlx_version = metadata.version("mlx")
    except metadata.PackageNotFoundError:
        mlx_version = "none"
    return {"host": socket.gethostname(), "platform": sys.platform,
            "machine": platform.machine(), "python": sys.executable, "mlx": mlx_version}


def cached_probe(home: Path | None = None, *, refresh: bool = False,
                 probe: Callable[[], dict | None] = probe_mlx) -> dict | None:
    """MLX's view of this machine, from the cache or from a new probe (then cached)."""
    path = (home or zyquo_home()) / PROBE_CACHE_FILE
    key = _cache_key()
    if not refresh:
        try:
            cached = json.loads(path.read_text(encoding="utf-8"))
            if cached.get("key") == key and isinstance(cached.get("probe"), dict):
                return cached["probe"]
        except (OSError, ValueError, AttributeError):
            pass
    found = probe()
    if found is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, {"key": key, "probed_at": round(time.time()),
                                     "probe": found})
        except OSError:
            pass  # an unwritable home costs a probe next time, nothing more
    return found


def budget_from(probe: dict | None, *, total_bytes: int, available_bytes: int,
                wired_limit: int | None) -> MemoryBudget:
    """The budget from a probe's answer and the live memory figures (pure: tested directly)."""
    used = max(total_bytes - available_bytes, 0)
    common = {"total_bytes": total_bytes, "available_bytes": available_bytes,
              "used_by_others_bytes": used}
    if probe is None:
        return MemoryBudget(device=CPU, budget_bytes=total_bytes,
                            budget_source="RAM (the MLX probe failed)", probed=False, **common)
    device = GPU if "gpu" in str(probe.get("device", "")).lower() else CPU
    if device == GPU:
        if wired_limit:
            return MemoryBudget(device=GPU, budget_bytes=wired_limit,
                                budget_source="iogpu.wired_limit_mb", **common)
        recommended = probe.get("recommended_working_set_bytes")
        if recommended:
            return MemoryBudget(device=GPU, budget_bytes=int(recommended),
                                budget_source="Metal's recommended working set", **common)
    limit = probe.get("memory_limit_bytes")
    if limit:
        return MemoryBudget(device=device, budget_bytes=min(int(limit), total_bytes),
                            budget_source="MLX's memory limit", **common)
    return MemoryBudget(device=device, budget_bytes=total_bytes, budget_source="RAM", **common)


def machine_budget(home: Path | None = None, *, refresh: bool = False,
                   probe: Callable[[], dict | None] = probe_mlx) -> MemoryBudget:
    """This machine's budget: the cached probe plus what is free right now."""
    facts = memory_facts()
    return budget_from(cached_probe(home, refresh=refresh, probe=probe),
                       total_bytes=facts.total_bytes, available_bytes=facts.available_bytes,
                       wired_limit=facts.wired_limit_bytes)


def capped(budget: MemoryBudget, limit_bytes: int | None, source: str) -> MemoryBudget:
    """`budget` no higher than a memory limit (a run's memory_limit or config.toml's [memory]
    limit, named by `source`); as it is when there is no limit or the limit is above it."""
    if limit_bytes is None or limit_bytes >= budget.budget_bytes:
        return budget
    return dataclasses.replace(budget, budget_bytes=limit_bytes, budget_source=source)
