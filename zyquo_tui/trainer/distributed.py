"""One run trained by several processes (ranks), as mlx-lm's trainer does it under mlx.launch.

mlx-lm splits each batch across the ranks, averages the gradients (the step engine's update
does it) and sums the reported losses with `all_sum`; only rank 0 saves. What it does not do,
and a run needs, is here:
- `World`: the group from `mx.distributed.init()`, with the collectives the loop needs; a
  world of one does nothing, so the one-process path is exactly what it was;
- the ranks agree on stopping: a cancel reaches each local rank at its own moment (and a
  remote rank not at all), so every step they `all_sum` their stop flags and stop together;
- rank 0 records every rank's process (host, pid, start time) in run.json;
- ranks other than 0 write nothing to the store (trainer/follower_session.py).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import mlx.core as mx

HOST_BYTES = 64  # a host name's bytes in the gathered process table

# Environment variables that hold the process's rank under each launcher (ring and jaccl set
# MLX_RANK; mpirun sets its own).
_RANK_VARIABLES = ("MLX_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def rank_from_environment() -> int:
    """This process's rank as its launcher set it (0 when started on its own), known before
    mlx is imported."""
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


class World:
    """The processes that train one run together (a world of one when not distributed)."""

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.rank = group.rank() if group is not None else 0
        self.size = group.size() if group is not None else 1

    @classmethod
    def join(cls) -> World:
        """The launcher's group; blocks until every rank has joined."""
        group = mx.distributed.init()
        return cls(group if group.size() > 1 else None)

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def primary(self) -> bool:
        return self.rank == 0

    def sum(self, value: Any) -> mx.array:
        """`value` summed over the ranks (as mlx-lm sums its reported losses)."""
        return mx.distributed.all_sum(value, group=self.group, stream=mx.cpu)

    def each(self, value: int) -> list[int]:
        """Every rank's `value` (a whole number), by rank."""
        if not self.distributed:
            return [value]
        mine = mx.array([value], dtype=mx.int64)
        return mx.distributed.all_gather(mine, group=self.group, stream=mx.cpu).tolist()

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on any."""
        if not self.distributed:
            return flag
        return bool(self.sum(mx.array(1 if flag else 0, dtype=mx.int32)).item() > 0)

    def processes(self) -> list[dict[str, Any]]:
        """Every rank's host, pid and process start time, gathered from the ranks."""
        import psutil

        started_ms = int(psutil.Process(os.getpid()).create_time() * 1000)
        name = socket.gethostname().encode()[:HOST_BYTES].ljust(HOST_BYTES, b"\0")
        mine = mx.array([os.getpid(), started_ms, *name], dtype=mx.int64)
        if not self.distributed:
            table = [mine.tolist()]
        else:
            gathered = mx.distributed.all_gather(mine[None], group=self.group, stream=mx.cpu)
            table = gathered.tolist()
        return [{"rank": rank, "pid": row[0], "start_time": row[1] / 1000,
                 "host": bytes(row[2:]).rstrip(b"\0").decode(errors="replace")}
                for rank, row in enumerate(table)]


def record_ranks(store, run_id: str, world: World) -> None:
    """Put every rank's process in run.json (process.ranks), so the runner and any reader know
    them. Collective: every rank calls it; rank 0 writes."""
    table = world.processes()
    if not world.primary:
        return

    def ranks(run) -> None:
        run.process = {**(run.process or {}), "ranks": table, "world_size": world.size}
    store.update(run_id, ranks)
