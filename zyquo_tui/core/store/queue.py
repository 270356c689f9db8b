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
from zyquo_tui.core.store.paths import file_in_the_way
from zyquo_tui.core.store.store import RUN_FILE

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
            order, rebuilt = self._read()
            before = list(order)
            yield order
            if order != before or rebuilt:
                write_json_atomic(self.path, {"order": order})

    def ids(self) -> list[str]:
        return self._read()[0]

    def _read(self) -> tuple[list[str], bool]:
        """The order, and whether it was rebuilt because queue.json was damaged."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return [], False
        except NotADirectoryError:
            raise file_in_the_way(self.path, "the zyquo-tui store") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._rebuilt(), True
        if not isinstance(data, dict) or not isinstance(data.get("order"), list):
            return self._rebuilt(), True
        return [i for i in data["order"] if isinstance(i, str)], False

    def _rebuilt(self) -> list[str]:
        """The queue from the runs themselves (each queued run.json says when it was queued),
        so a damaged queue.json strands no run."""
        queued = []
        for record in sorted((self.home / "runs").glob(f"*/{RUN_FILE}")):
            try:
                run = json.loads(record.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a damaged run is listed as damaged, and never queued
            if isinstance(run, dict) and run.get("state") == "queued":
                queued.append((str(run.get("queued_at") or ""), record.parent.name))
        return [run_id for _, run_id in sorted(queued)]

    def position(self, run_id: str) -> int | None:
        """1 for the next run to start; None when not queued."""
        order = self.ids()
        return order.index(run_id) + 1 if run_id in order else None
