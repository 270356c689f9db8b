"""A cache of the runs listing, so listing 10,000 runs does not parse 10,000 records.

runs/.index.json keeps each run's listing row with the signature (mtime, size, inode) of the
run.json it came from. A listing stats every run.json and re-reads only those whose signature
changed, so the cache can never serve a stale row; it is rewritten (atomically, best effort)
when something changed. Deleting the file only costs one slow listing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.store.atomic import write_json_atomic
from zyquo_tui.core.store.store import RUN_FILE, DamagedRun, RunStore

INDEX_FILE = ".index.json"
INDEX_VERSION = 2  # 2: rows carry reward_mean


def listing_row(item: Run | DamagedRun) -> dict[str, Any]:
    """One run as listings show it (`runs list --json`, the dashboard's runs table)."""
    if isinstance(item, DamagedRun):
        return {"id": item.id, "name": None, "state": "damaged", "damaged": item.reason,
                "path": str(item.path)}
    s = item.summary
    return {
        "id": item.id, "name": item.name, "state": item.state.value,
        "method": item.method.value, "model": item.model, "data": item.data,
        "created": item.created, "step": s.get("step", 0),
        "iters": item.hyperparameters.iters,
        "last_train_loss": s.get("last_train_loss"), "last_val_loss": s.get("last_val_loss"),
        "best_val_loss": s.get("best_val_loss"), "tokens_per_second": s.get("tokens_per_second"),
        "reward_mean": s.get("reward_mean"),  # a grpo run's, at its last report
        "started_at": s.get("started_at"), "ended_at": s.get("ended_at"),
        "damaged": None,
    }


def _signature(stat: os.stat_result) -> list[int]:
    return [stat.st_mtime_ns, stat.st_size, stat.st_ino]


def listing_rows(store: RunStore) -> list[dict[str, Any]]:
    """Every run's listing row, oldest first; damaged runs included."""
    root = str(store.runs_root)
    index_path = os.path.join(root, INDEX_FILE)
    try:
        with open(index_path, "rb") as handle:
            cached = json.loads(handle.read())
        if cached.get("version") != INDEX_VERSION:
            cached = {}
    except (OSError, ValueError, AttributeError):
        cached = {}
    cached_rows: dict[str, Any] = cached.get("rows", {}) if isinstance(cached, dict) else {}

    rows: list[dict[str, Any]] = []
    fresh: dict[str, Any] = {}
    changed = False
    for item in store.iter_run_names():
        path = os.path.join(root, item, RUN_FILE)
        try:
            signature = _signature(os.stat(path))
        except OSError:
            signature = None
        entry = cached_rows.get(item)
        if signature is not None and entry and entry.get("sig") == signature:
            row = entry["row"]
        else:
            row = listing_row(store.read_named(item, path))
            changed = True
        rows.append(row)
        if signature is not None:
            fresh[item] = {"sig": signature, "row": row}
    if changed or len(fresh) != len(cached_rows):
        try:
            write_json_atomic(store.runs_root / INDEX_FILE,
                              {"version": INDEX_VERSION, "rows": fresh}, compact=True)
        except OSError:
            pass  # a read-only store still lists, just without the cache
    return rows
