"""A run's memory limit inside the trainer: MLX's limits set to it, and a step that passed it
ended as out of memory (core/runs/out_of_memory.py says where the limit comes from).

MLX's memory limit is a guideline: on Apple silicon its allocator waits for work in flight and
frees its cache to stay under it, and fails only when the memory is really gone; on the CPU it
is not applied at all. So after each step the trainer also compares MLX's own peak with the
limit, and a step that passed it ends the run as out of memory, where the ladder takes over.
The same rule holds on every machine, which is also how a test on Linux makes a run die of it.
"""

from __future__ import annotations

import mlx.core as mx

from zyquo_tui.core.formatting import fmt_bytes
from zyquo_tui.trainer.trainer_failure import fail


class MemoryLimit:
    """The limit of one training process (None: no limit but the machine's)."""

    def __init__(self, limit_bytes: int | None, source: str = "") -> None:
        self.limit_bytes = limit_bytes
        self.source = source

    def apply(self) -> None:
        """Set MLX's limit, and on Apple silicon the wired limit (which mlx-lm raises to the
        recommended working set as training starts) no higher than it. Call it after that."""
        if self.limit_bytes is None:
            return
        mx.set_memory_limit(self.limit_bytes)
        if mx.metal.is_available():
            recommended = mx.device_info().get("max_recommended_working_set_size")
            mx.set_wired_limit(min(self.limit_bytes, int(recommended or self.limit_bytes)))

    def check(self, step: int, world) -> None:
        """Fail the run as out of memory when MLX's peak so far passed the limit (on any rank
        of a distributed run: they stop together, each saying so)."""
        if self.limit_bytes is None:
            return
        peak = mx.get_peak_memory()
        if world.any(peak > self.limit_bytes):
            whose = (f"MLX's peak ({_size(peak)})" if peak > self.limit_bytes
                     else "another rank's MLX peak")
            raise fail("oom", f"At step {step} {whose} passed {self.source} "
                       f"({_size(self.limit_bytes)}).")


def _size(value: int) -> str:
    """A size with the KiB that tell a peak from a limit near it."""
    return f"{fmt_bytes(value)}, {value >> 10:,} KiB"
