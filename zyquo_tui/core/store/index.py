"""A cache of the runs listing, so listing 10,000 runs does not parse 10,000 records.

runs/.index keeps each run's listing row, as the JSON text `runs list --json` prints, with the
signature (mtime, size, inode) of the run.json it came from. A listing stats every run.json and
re-reads only those whose signature changed, so the cache can never serve a stale row; it is
rewritten (atomically, best effort) when something changed. Deleting the file only costs one
slow listing.

The file is lines, not one JSON document: a header line with INDEX_VERSION, then one line per
run, `id TAB mtime:size:inode TAB state TAB row-json`. Splitting lines costs a sixth of
decoding the rows, and `runs list --json` writes the row texts as they are, so a listing decodes
and encodes nothing but the runs changed since (bench/bench_runs_list.py). json.dumps escapes
tabs and newlines inside strings, so a row's text never holds one.

Nothing here imports the run record (and the settings behind it) until a run.json is read:
a listing from a fresh index does not need it.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, NamedTuple

from zyquo_tui.core.store.atomic import write_atomic
from zyquo_tui.core.store.store import RUN_FILE, DamagedRun, RunStore

if TYPE_CHECKING:
    from zyquo_tui.core.runs.run import Run

INDEX_FILE = ".index"
# 3: one line per run holding its row as JSON text; 2 (.index.json): rows carry reward_mean
INDEX_VERSION = 4
_HEADER = f"zyquo-tui runs index {INDEX_VERSION}\n"
_OLD_INDEX_FILES = (".index.json",)  # written by earlier versions; removed with the first write
# The values of RunState.STARTING and RUNNING (a unit test holds them equal): a listing
# asks the supervisor about these runs, whose trainer may have died since the row was written.
LIVE_STATES = frozenset({"starting", "running"})


class ListingEntry(NamedTuple):
    id: str
    state: str
    text: str  # the row as json.dumps(listing_row(...)) writes it


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
        "iters": item.planned_steps,  # None for a served run: its program decides
        "last_train_loss": s.get("last_train_loss"), "last_val_loss": s.get("last_val_loss"),
        "best_val_loss": s.get("best_val_loss"), "tokens_per_second": s.get("tokens_per_second"),
        # a grpo run's mean reward (its last train report's), shown where a loss would be
        "reward_mean": s.get("reward_mean"),
        "started_at": s.get("started_at"), "ended_at": s.get("ended_at"),
        "damaged": None,
    }


def row_text(row: dict[str, Any]) -> str:
    """A row's JSON text, as the index keeps it and `runs list --json` prints it."""
    return json.dumps(row, default=str)


def _read_index(path: str) -> dict[str, list[str]]:
    """id -> [signature, state, row text] of every cached row; {} when the file is
    missing, unreadable or of another version."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return {}
    if not text.startswith(_HEADER):
        return {}
    cached = {}
    for line in text[len(_HEADER):].split("\n"):
        fields = line.split("\t", 3)
        if len(fields) == 4:
            cached[fields[0]] = fields[1:]
    return cached


def listing_entries(store: RunStore) -> list[ListingEntry]:
    """Every run's listing row as JSON text, oldest first; damaged runs included."""
    root = str(store.runs_root)
    cached = _read_index(os.path.join(root, INDEX_FILE))

    entries: list[ListingEntry] = []
    lines: list[str] = []
    changed = False
    for item in store.iter_run_names():
        path = f"{root}{os.sep}{item}{os.sep}{RUN_FILE}"  # join() costs more, 10,000 times
        try:
            stat = os.stat(path)
            signature = f"{stat.st_mtime_ns}:{stat.st_size}:{stat.st_ino}"
        except OSError:
            signature = None
        entry = cached.get(item)
        if signature is not None and entry is not None and entry[0] == signature:
            state, text = entry[1], entry[2]
        else:
            row = listing_row(store.read_named(item, path))
            state, text = row["state"], row_text(row)
            changed = True
        entries.append(ListingEntry(item, state, text))
        if signature is not None and "\t" not in item and "\n" not in item:
            lines.append(f"{item}\t{signature}\t{state}\t{text}\n")
    if changed or len(lines) != len(cached):
        try:
            write_atomic(store.runs_root / INDEX_FILE, _HEADER + "".join(lines))
            for old in _OLD_INDEX_FILES:
                (store.runs_root / old).unlink(missing_ok=True)
        except OSError:
            pass  # a read-only store still lists, just without the cache
    return entries


def listing_rows(store: RunStore) -> list[dict[str, Any]]:
    """Every run's listing row, oldest first; damaged runs included."""
    # One document decodes faster than 10,000 small ones.
    return json.loads("[" + ",".join(entry.text for entry in listing_entries(store)) + "]")
