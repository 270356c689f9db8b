"""The FIFO queue of runs waiting for the machine, kept in $ZYQUO_HOME/queue.json.

Every change happens under queue.lock, and so does the runner's decision to stop: a run added
while the runner is finishing is either seen by it or finds the machine free and starts one.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

from zyquo_tui.core.store.atomic import file_lock, write_json_atomic

QUEUE_FILE = "queue.json"
QUEUE_LOCK = "queue.lock"


class RunQueue:
    """Run ids in the order they will start."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.path = self.home / QUEUE_FILE

    @contextlib.contextmanager
    def locked(self) -> Iterator[list[str]]:
        """The queue as a list to read and change; written back when the block ends."""
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with file_lock(self.home / QUEUE_LOCK):
            order = self._read()
            before = list(order)
            yield order
            if order != before:
                write_json_atomic(self.path, {"order": order})

    def ids(self) -> list[str]:
        return self._read()

    def _read(self) -> list[str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return []
        order = data.get("order", []) if isinstance(data, dict) else []
        return [i for i in order if isinstance(i, str)]

    def position(self, run_id: str) -> int | None:
        """1 for the next run to start; None when not queued."""
        order = self.ids()
        return order.index(run_id) + 1 if run_id in order else None
