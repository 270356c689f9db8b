"""Is a recorded process still the one we started? pid plus its start time, against pid reuse."""

from __future__ import annotations

import os
import socket
from typing import Any

import psutil

# psutil's create_time is derived from boot time and clock ticks; allow for rounding.
_START_TIME_TOLERANCE = 0.05


def identity(pid: int) -> dict[str, Any]:
    """What to record about a process so it can be recognised later."""
    return {"pid": pid, "start_time": psutil.Process(pid).create_time(),
            "host": socket.gethostname(), "boot_time": psutil.boot_time()}


def is_alive(pid: int | None, start_time: float | None, host: str | None = None,
             boot_time: float | None = None) -> bool:
    """True when `pid` runs and started at `start_time` (so it is the same process).

    A process on another host cannot be checked from here and counts as alive; a zombie
    (finished, not yet reaped) counts as gone.

    On Linux a start time reads as the boot time plus the ticks since boot, and the boot time
    moves whole seconds when the clock is adjusted (NTP), so the same process can read a
    second or more off what was recorded. With the boot time recorded beside it, a start at
    the same moment after boot is the same process too.
    """
    if not pid:
        return False
    if host and host != socket.gethostname():
        return True
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        created = process.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return False
    if start_time is None:
        return True
    if abs(created - start_time) <= _START_TIME_TOLERANCE:
        return True
    if boot_time is None:
        return False
    since_boot = created - psutil.boot_time()
    return abs(since_boot - (start_time - boot_time)) <= _START_TIME_TOLERANCE


def process_alive(record: dict[str, Any] | None, prefix: str = "") -> bool:
    """Liveness of the trainer (prefix "") or runner (prefix "runner_") in run.process: both
    run on the host whose boot time the runner recorded."""
    if not record:
        return False
    return is_alive(record.get(f"{prefix}pid"), record.get(f"{prefix}start_time"),
                    record.get("host"), record.get("boot_time"))


def signal_group(pid: int, signum: int) -> bool:
    """Send a signal to the process group led by `pid` (the trainer's own session)."""
    try:
        os.killpg(pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False
