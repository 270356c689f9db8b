"""Whether a trainer killed without a word (SIGKILL) was killed for memory.

The kernel's out-of-memory killer and macOS' jetsam send SIGKILL and say nothing to the process.
Two witnesses tell such a death from a kill by a user (which never steps a run down the
out-of-memory ladder):
- on Linux, the kernel's count of out-of-memory kills in our memory cgroup (cgroup v2's
  memory.events, v1's memory.oom_control), read before the trainer starts and after it died;
- anywhere, the memory the runner last saw while the trainer lived (sampled each second): the
  machine nearly out of available memory, or the trainer near the run's memory limit.
Each source fails soft: a file or figure that cannot be read is no witness, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from zyquo_tui.core.formatting import fmt_bytes

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Memory counts as short under this share of the machine available, or with the trainer
# within this share of its limit: the killers act near the edge, and a sample is up to a
# second old.
AVAILABLE_SHARE = 0.05
LIMIT_SHARE = 0.9


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def oom_kills_in(text: str | None) -> int | None:
    """The `oom_kill N` line of memory.events or memory.oom_control; None without one."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def oom_kill_count(read: Callable[[Path], str | None] = _read,
                   root: Path = CGROUP_ROOT) -> int | None:
    """The kernel's count of out-of-memory kills in this process's memory cgroup (Linux);
    None where there is no such count (macOS, no cgroup mounted)."""
    groups = read(Path("/proc/self/cgroup")) or ""
    candidates = []
    for line in groups.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # cgroup v2
            candidates.append(root / path.lstrip("/") / "memory.events")
        elif "memory" in controllers.split(","):  # cgroup v1
            candidates.append(root / "memory" / path.lstrip("/") / "memory.oom_control")
    # Inside a container the group's own files are at the mount's top.
    candidates += [root / "memory.events", root / "memory" / "memory.oom_control"]
    for candidate in candidates:
        count = oom_kills_in(read(candidate))
        if count is not None:
            return count
    return None


@dataclass(frozen=True)
class MemorySample:
    """The trainer's resident bytes (with its children) and the machine's available and total
    memory, as the runner last saw them."""

    trainer_bytes: int
    available_bytes: int
    total_bytes: int


def sample_memory(pid: int) -> MemorySample | None:
    try:
        process = psutil.Process(pid)
        resident = process.memory_info().rss + sum(
            child.memory_info().rss for child in process.children(recursive=True))
        machine = psutil.virtual_memory()
    except psutil.Error:
        return None
    return MemorySample(int(resident), int(machine.available), int(machine.total))


def killed_for_memory(sample: MemorySample | None, limit_bytes: int | None,
                      kills_before: int | None, kills_after: int | None) -> str | None:
    """Why a SIGKILL looks like the system's answer to memory running out, in words; None when
    nothing says so."""
    if kills_before is not None and kills_after is not None and kills_after > kills_before:
        return "the kernel counted an out-of-memory kill in the trainer's memory group"
    if sample is None:
        return None
    if sample.available_bytes < AVAILABLE_SHARE * sample.total_bytes:
        return (f"the machine had {fmt_bytes(sample.available_bytes)} of "
                f"{fmt_bytes(sample.total_bytes)} available a moment before")
    if limit_bytes and sample.trainer_bytes >= LIMIT_SHARE * limit_bytes:
        return (f"the trainer held {fmt_bytes(sample.trainer_bytes)} a moment before, near "
                f"its memory limit of {fmt_bytes(limit_bytes)}")
    return None
