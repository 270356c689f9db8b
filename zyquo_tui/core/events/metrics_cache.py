"""metrics.cache: a run's folded metrics kept beside its events.jsonl, so a long run opens fast.

Reading 100,000 events costs a fraction of a second of CPU every time a run is opened; what
that reading makes (the series as typed arrays and a few small figures) reads back from a
binary file in milliseconds. The file says which part of events.jsonl it was made from (the
length of the whole lines read, the file's inode and modification time, and checksums of that
part's first and last 64 KiB) and which code made it (a checksum of the modules that parse and
fold events, so a change to the rules never reads an old cache). A reader takes it only when
all of that still holds, then folds the lines appended since; anything else (the file was cut,
replaced or rewritten, the cache is cut short, damaged or made by other code) and the cache is
ignored and events.jsonl read from the start. events.jsonl stays the record: deleting the
cache costs one slow open.

Layout: b"ZQMC", the header's length (4 bytes, little-endian), the header (JSON), then each
series' steps and values as the machine's native 8-byte integers and doubles, in the header's
order. The header holds everything else of the RunMetrics (its figures, checkpoints, warnings,
samples), the newest notable events, and a checksum of the arrays.
"""

from __future__ import annotations

import json
import os
import secrets
import struct
import sys
import zlib
from array import array
from collections import deque
from pathlib import Path
from typing import Any

from zyquo_tui.core.events.metrics import RunMetrics, Series

CACHE_FILE = "metrics.cache"
MAGIC = b"ZQMC"
FORMAT = 1
# How much of events.jsonl's start and of the end of the part read is checksummed: enough to
# tell a file rewritten from one appended to, cheap to read.
WINDOW_BYTES = 64 * 1024
# RunMetrics' attributes keyed by step (JSON keys are strings; these are ints again on reading).
# The newest notable events a cache keeps: a reader may ask for as many (the dashboard's list
# of latest events shows 40).
NOTABLE_KEPT = 64
_STEP_KEYED = frozenset({"checkpoints", "samples"})
_LENGTH = struct.Struct("<I")


class FoldState:
    """Where a fold of events.jsonl stands after its first `offset` bytes: the metrics, the
    notable events kept so far (a deque of at most `recent`) and the last train event."""

    __slots__ = ("metrics", "notable", "last_train", "offset")

    def __init__(self, metrics: RunMetrics, notable: deque, last_train: dict[str, Any] | None,
                 offset: int) -> None:
        self.metrics = metrics
        self.notable = notable
        self.last_train = last_train
        self.offset = offset


def cache_path(events_path: Path) -> Path:
    return events_path.with_name(CACHE_FILE)


def read_cache(events_path: Path, recent: int) -> FoldState | None:
    """The fold kept beside `events_path`, when it still describes the start of that file and
    was made by this code, keeping at least `recent` notable events; otherwise None."""
    try:
        with open(cache_path(events_path), "rb") as handle:
            return _read(handle, events_path, recent)
    except (OSError, EOFError, ValueError, KeyError, TypeError, IndexError, struct.error,
            UnicodeDecodeError, OverflowError, MemoryError):
        return None


def write_cache(events_path: Path, state: FoldState) -> None:
    """Keep `state` (a fold of events.jsonl's first `state.offset` bytes) beside the file.
    Best effort: a store that cannot be written is read the slow way next time."""
    try:
        source = _source_signature(events_path, state.offset)
        if source is None:
            return
        head, arrays = encode(state, source)
        target = cache_path(events_path)
        temp = target.with_name(f"{target.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}")
        try:
            with open(temp, "xb") as handle:
                handle.write(head)
                # Straight from each array: no copy of the series is made to write them (a
                # long-lived dashboard would keep the heap such copies grew).
                for items in arrays:
                    handle.write(memoryview(items))
            # A crash may leave a cut or empty cache: its checksum or length refuses it.
            os.replace(temp, target)
        finally:
            if temp.exists():
                temp.unlink()
    except OSError:
        pass


def encode(state: FoldState, source: dict[str, int]) -> tuple[bytes, list[array]]:
    """The cache's magic, length and header, and the arrays written after them in order."""
    metrics = state.metrics
    arrays = []
    for series in metrics.series.values():
        arrays += (_as_array(series.steps, "q"), _as_array(series.values, "d"))
    checksum = 0
    for items in arrays:
        checksum = zlib.crc32(memoryview(items), checksum)
    figures = {}
    for name, value in vars(metrics).items():
        if name == "series":
            continue
        figures[name] = list(value.items()) if name in _STEP_KEYED else value
    header = {
        "format": FORMAT, "rules": rules_checksum(), "byteorder": sys.byteorder,
        "source": source, "recent": state.notable.maxlen,
        "series": [[name, len(series)] for name, series in metrics.series.items()],
        "body": checksum,
        "figures": figures, "notable": list(state.notable), "last_train": state.last_train,
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + _LENGTH.pack(len(text)) + text, arrays


def _read(handle, events_path: Path, recent: int) -> FoldState | None:
    start = handle.read(8)
    if start[:4] != MAGIC:
        return None
    (length,) = _LENGTH.unpack_from(start, 4)
    header = json.loads(handle.read(length))
    if (header["format"] != FORMAT or header["rules"] != rules_checksum()
            or header["byteorder"] != sys.byteorder or header["recent"] < recent):
        return None
    source = header["source"]
    if not _still_describes(events_path, source):
        return None
    metrics = RunMetrics()
    if [name for name, _ in header["series"]] != list(metrics.series):
        return None
    # The arrays must fill the rest of the file exactly (a damaged count is not allocated).
    if 8 + length + 16 * sum(count for _, count in header["series"]) != \
            os.fstat(handle.fileno()).st_size:
        return None
    checksum = 0
    for name, count in header["series"]:
        # Each array read straight from the file (fromfile raises EOFError when it is short).
        steps, values = array("q"), array("d")
        steps.fromfile(handle, count)
        values.fromfile(handle, count)
        for items in (steps, values):
            checksum = zlib.crc32(memoryview(items), checksum)
        metrics.series[name] = Series(steps, values)
    if handle.read(1) or checksum != header["body"]:
        return None
    figures = header["figures"]
    if set(figures) != set(vars(metrics)) - {"series"}:
        return None
    for name, value in figures.items():
        setattr(metrics, name, {step: item for step, item in value} if name in _STEP_KEYED
                else value)
    notable = deque(header["notable"], maxlen=header["recent"])
    return FoldState(metrics, notable, header["last_train"], source["offset"])


def _source_signature(events_path: Path, offset: int) -> dict[str, int] | None:
    """What the cache records of events.jsonl's first `offset` bytes (None: the file is gone
    or shorter)."""
    with open(events_path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        if stat.st_size < offset:
            return None
        head, tail = _windows(handle, offset)
    return {"offset": offset, "inode": stat.st_ino, "mtime_ns": stat.st_mtime_ns,
            "size": stat.st_size, "head": head, "tail": tail}


def _still_describes(events_path: Path, source: dict[str, int]) -> bool:
    """True when events.jsonl still starts with the part the cache was made from: the same
    file (inode), at least as long, and the same bytes at that part's start and end. Nothing
    is read when the file is exactly as it was."""
    offset = source["offset"]
    with open(events_path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        if stat.st_ino != source["inode"] or stat.st_size < offset:
            return False
        if stat.st_size == source["size"] and stat.st_mtime_ns == source["mtime_ns"]:
            return True
        return _windows(handle, offset) == (source["head"], source["tail"])


def _windows(handle, offset: int) -> tuple[int, int]:
    handle.seek(0)
    head = zlib.crc32(handle.read(min(offset, WINDOW_BYTES)))
    start = max(0, offset - WINDOW_BYTES)
    handle.seek(start)
    tail = zlib.crc32(handle.read(offset - start))
    return head, tail


def _as_array(items, code: str) -> array:
    return items if isinstance(items, array) and items.typecode == code else array(code, items)


# The modules of this folder whose code decides what a fold of events makes.
_RULE_MODULES = ("protocol.py", "fast_reader.py", "metrics.py", "history.py",
                 "metrics_cache.py")
_RULES: int | None = None


def rules_checksum() -> int:
    """A checksum of the code that parses and folds events: a cache made by other rules (an
    older or newer zyquo-tui) is never read as if this code had made it."""
    global _RULES
    if _RULES is None:
        here = Path(__file__).resolve().parent
        checksum = 0
        for module in _RULE_MODULES:
            checksum = zlib.crc32((here / module).read_bytes(), checksum)
        _RULES = checksum
    return _RULES
