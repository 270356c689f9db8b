"""What `hosts check` last learned of each host: its free memory and when, kept in
$ZYQUO_HOME/known_hosts.json so the memory verdict of a distributed run can judge the other
hosts without reaching them again (core/memory/host_verdicts.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zyquo_tui.core.store.atomic import write_json_atomic
from zyquo_tui.core.store.paths import ensure_dir

KNOWN_HOSTS_FILE = "known_hosts.json"


def load_known_hosts(home: Path) -> dict[str, dict[str, Any]]:
    """Host name -> {"free_memory_bytes", "checked_at"} (a unix time); empty when no check
    has been recorded or the file cannot be read (the verdict is then unknown, not wrong)."""
    try:
        data = json.loads((home / KNOWN_HOSTS_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    hosts = data.get("hosts") if isinstance(data, dict) else None
    return {name: entry for name, entry in (hosts or {}).items() if isinstance(entry, dict)}


def record_known_hosts(home: Path, reports: Iterable[dict[str, Any]]) -> None:
    """Keep each reached host's free memory (reports as `hosts check --json` prints them);
    a host that was not reached keeps what an earlier check learned."""
    known = load_known_hosts(home)
    now = time.time()
    for report in reports:
        free = report.get("free_memory_bytes")
        if isinstance(free, int) and not report.get("local"):
            known[report["host"]] = {"free_memory_bytes": free, "checked_at": now}
    if known:
        ensure_dir(home, "the run store")
        write_json_atomic(home / KNOWN_HOSTS_FILE, {"hosts": known})
