"""The machine's one active-run place ($ZYQUO_HOME/active.lock) held by a process that is not a
runner: `zyquo-tui serve`, while it has models loaded.

Runs and served models share one unified memory, so they take turns at one lock: a runner holds
active.lock while it has work, and the server holds it while any model is loaded. Whoever holds
it, the others wait (queued runs) or are refused (a `runs start` without --queue-if-busy, the
server's create_model). A runner says what holds the machine through its run's record; the
server has no run of its own while it only samples, so it names itself in active_holder.json
beside the lock (written after the lock is taken, removed before it is let go; a holder file
whose process is gone is stale and ignored), which `runs list` and the dashboard read to say
what queued runs wait for.

A runner whose run has completed may go on holding the machine for seconds to measure the
run's config for its memory record (core/memory/run_gate.py measure_for_record). That uses only
idle time: a start or a server that finds the machine held by no active run marks it wanted
(WANTED_FILE), and the runner stops measuring at once and lets it go.

Taking and letting go are the supervisor's (Supervisor.hold_machine, let_machine_go), by the
runner's rule: under queue.lock, so a run queued at that moment is either seen or finds the
machine free; when runs wait, the lock is handed to a new runner instead of being let go.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from zyquo_tui.core.store.atomic import write_json_atomic
from zyquo_tui.core.system.liveness import identity, process_alive

HOLDER_FILE = "active_holder.json"
WANTED_FILE = "machine_wanted"


def holder(home: Path) -> dict[str, Any] | None:
    """Who other than a runner holds the machine now ({"holder": words, "pid": ...}), or None.
    One small read: `runs list` asks it only when runs are queued."""
    try:
        found = json.loads((Path(home) / HOLDER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or not process_alive(found):
        return None  # left by a process that died holding it (the kernel let the lock go)
    return found


def holder_words(home: Path) -> str | None:
    """What queued runs wait for, in words ("zyquo-tui serve (pid 123)"), or None."""
    found = holder(home)
    if found is None:
        return None
    return f"{found.get('holder', 'another process')} (pid {found.get('pid')})"


def write_holder(home: Path, words: str) -> None:
    """Name this process as the machine's holder (after it took active.lock)."""
    me = identity(os.getpid())
    write_json_atomic(Path(home) / HOLDER_FILE, {
        "holder": words, "pid": me["pid"], "start_time": me["start_time"], "host": me["host"],
        "boot_time": me["boot_time"], "since": time.time()})


def clear_holder(home: Path) -> None:
    """Before this process lets active.lock go."""
    try:
        (Path(home) / HOLDER_FILE).unlink()
    except FileNotFoundError:
        pass


def want_machine(home: Path) -> None:
    """Say that a start or the server waits for the machine now (WANTED_FILE's time); a waiter
    says it again at every poll while it waits."""
    try:
        (Path(home) / WANTED_FILE).touch()
    except OSError:
        pass  # then the runner measures on, and the waiter waits its time out, as before


def wanted_since(home: Path, since: float) -> bool:
    """Whether someone has asked for the machine at `since` (time.time()) or after. A file's
    time comes from a coarser clock than time.time(), a few ms behind: a second of slack."""
    try:
        return (Path(home) / WANTED_FILE).stat().st_mtime >= since - 1.0
    except OSError:
        return False
