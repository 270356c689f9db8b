"""RunStore: the JSON-file run store under $ZYQUO_HOME, the contract between processes.

Layout (docs/ARCHITECTURE.md):
    runs/<run-id>/run.json       the record (atomic writes, per-run lock for read-modify-write)
    runs/<run-id>/config.yaml    the exact mlx-lm config of the run
    runs/<run-id>/events.jsonl   append-only events written by the trainer
    runs/<run-id>/trainer.log    the trainer's stdout and stderr
    runs/<run-id>/adapters/      checkpoints and the trainer state for exact resume
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.store.atomic import (
    TEMP_MARK,
    file_lock,
    fsync_dir,
    temp_sibling,
    write_json_atomic,
)
from zyquo_tui.core.store.paths import ensure_dir, file_in_the_way, zyquo_home

if TYPE_CHECKING:
    from zyquo_tui.core.runs.run import Run

RUN_FILE = "run.json"
LOCK_FILE = ".lock"
EVENTS_FILE = "events.jsonl"
LOG_FILE = "trainer.log"
CONFIG_FILE = "config.yaml"
ADAPTERS_DIR = "adapters"
FORK_WEIGHTS = "fork_weights.safetensors"  # a fork's link to the checkpoint it starts from


@dataclass
class DamagedRun:
    """A run folder whose run.json cannot be read; listed with the reason, deleted only when
    the user asks (`runs delete`)."""

    id: str
    path: Path
    reason: str


class RunStore:
    """Runs kept as folders of files that any process can read and update safely."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = Path(home) if home is not None else zyquo_home()
        self.runs_root = self.home / "runs"

    # -- layout -------------------------------------------------------------------------------

    def ensure(self) -> "RunStore":
        """Create the store's folders (mode 0700); a clear UserError when impossible."""
        ensure_dir(self.home, "the zyquo-tui store")
        ensure_dir(self.runs_root, "runs")
        return self

    def run_dir(self, run_id: str) -> Path:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise UserError(f"{run_id!r} is not a run id; `zyquo-tui runs list` shows them.")
        return self.runs_root / run_id

    def events_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / EVENTS_FILE

    def log_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / LOG_FILE

    def adapters_dir(self, run_id: str) -> Path:
        return self.run_dir(run_id) / ADAPTERS_DIR

    # -- records ------------------------------------------------------------------------------

    def create(self, run: Run) -> Run:
        self.ensure()
        folder = self.run_dir(run.id)
        exists = UserError(f"A run with id {run.id} already exists in {self.runs_root}.")
        if folder.exists():
            raise exists
        # Made whole under a temp name, then renamed into place: a process listing the store
        # meanwhile (the dashboard's poll, a CLI) sees the run complete or not at all, never a
        # folder without its run.json (which it would have to call damaged).
        temp = temp_sibling(folder)
        temp.mkdir(mode=0o700)
        try:
            (temp / ADAPTERS_DIR).mkdir(mode=0o700)
            write_json_atomic(temp / RUN_FILE, run.to_dict())
            try:
                os.rename(temp, folder)  # refused when a non-empty folder holds the name
            except OSError:
                if folder.exists():
                    raise exists from None
                raise
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        fsync_dir(self.runs_root)
        return run

    def get(self, run_id: str) -> Run:
        """The run with this id; UserError when unknown or damaged."""
        result = self.record(run_id)
        if isinstance(result, DamagedRun):
            raise UserError(
                f"{self.run_dir(run_id) / RUN_FILE}: run {run_id} is damaged ({result.reason}); "
                f"its files are kept as they are: mend run.json, or `zyquo-tui runs delete "
                f"{run_id}` removes the run."
            )
        return result

    def record(self, run_id: str) -> Run | DamagedRun:
        """The run with this id as it reads, damaged or not; UserError when unknown."""
        folder = self.run_dir(run_id)
        if not (folder / RUN_FILE).exists():
            raise UserError(
                f"There is no run {run_id} in {self.runs_root}; `zyquo-tui runs list` shows them."
            )
        return self._read(folder)

    def update(self, run_id: str, change: Callable[[Run], object]) -> Run:
        """Read, change and write a run under its lock, so concurrent updates lose nothing.

        `change` mutates the run in place; an exception from it leaves the file untouched.
        """
        folder = self.run_dir(run_id)
        if not (folder / RUN_FILE).exists():
            raise UserError(
                f"There is no run {run_id} in {self.runs_root}; `zyquo-tui runs list` shows them."
            )
        with file_lock(folder / LOCK_FILE):
            run = self.get(run_id)
            change(run)
            write_json_atomic(folder / RUN_FILE, run.to_dict())
            return run

    def save(self, run: Run) -> Run:
        """Write a whole record (for a run this caller owns, such as a freshly configured one)."""
        folder = self.run_dir(run.id)
        with file_lock(folder / LOCK_FILE):
            write_json_atomic(folder / RUN_FILE, run.to_dict())
        return run

    def list(self) -> list[Run | DamagedRun]:
        """Every run, oldest first (ids sort by creation time); damaged ones included."""
        return list(self.iter_runs())

    def iter_runs(self) -> Iterator[Run | DamagedRun]:
        root = str(self.runs_root)
        for name in self.iter_run_names():
            yield self.read_named(name, os.path.join(root, name, RUN_FILE))

    def iter_run_names(self) -> list[str]:
        """The ids of every run folder, oldest first (ids sort by creation time)."""
        # os.scandir and plain strings: listing 10,000 runs happens on every refresh.
        try:
            with os.scandir(self.runs_root) as entries:
                names = sorted(
                    entry.name for entry in entries
                    if entry.is_dir() and not entry.name.startswith(".")
                    and TEMP_MARK not in entry.name
                )
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise file_in_the_way(self.runs_root, "runs") from None
        return names

    def delete(self, run_id: str) -> None:
        folder = self.run_dir(run_id)
        if not folder.exists():
            raise UserError(f"There is no run {run_id} in {self.runs_root}.")
        shutil.rmtree(folder)

    def _read(self, folder: Path) -> Run | DamagedRun:
        return self.read_named(folder.name, os.path.join(folder, RUN_FILE))

    def read_named(self, name: str, path: str) -> Run | DamagedRun:
        def damaged(reason: str) -> DamagedRun:
            return DamagedRun(name, self.runs_root / name, reason)

        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return damaged("run.json is missing")
        except OSError as error:
            return damaged(f"run.json cannot be read: {error.strerror}")
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return damaged("run.json is empty" if not raw.strip()
                           else f"run.json is not valid JSON ({error})")
        # Imported here: the run record brings the settings definition, which a listing served
        # from the index (core/store/index.py) never needs.
        from zyquo_tui.core.runs.run import Run

        try:
            run = Run.from_dict(data)
        except ValueError as error:
            return damaged(f"run.json has the wrong shape: {error}")
        if run.id != name:
            return damaged(f"run.json names another run ({run.id})")
        return run
