"""Work on a big file with several cores: line-aligned byte ranges, one worker process each.

The parent splits the file at line starts (`line_aligned_ranges`), starts one worker per
range (`FileWorkers`), and reads their outputs back in range order, as they are written. A worker runs a function
given as "module:function", called with its task (a JSON object holding at least `path`,
`start` and `end`) and its binary stdout, to which it writes its result.

Workers are plain subprocesses (`python -m zyquo_tui.core.system.file_workers`): never
forked, since the dashboard has threads, and not multiprocessing, which re-runs the caller's
__main__. They read nothing from the terminal and write nothing to it.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from zyquo_tui.core.system.entry_points import (
    FILE_WORKER,
    python_command,
    same_package_environment,
)

POLL_SECONDS = 0.1


class WorkerFailed(Exception):
    """A worker exited with an error, took too long, or its parent was told to stop.

    `message` says which and, for an error, the last line the worker wrote to stderr.
    """

    def __init__(self, message: str, exit_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_status = exit_status


def line_aligned_ranges(path: Path, parts: int, end: int | None = None
                        ) -> list[tuple[int, int]]:
    """About `parts` byte ranges of the file's first `end` bytes (all of it by default), each
    starting at the start of a line; fewer when the lines are too long to cut that often."""
    size = Path(path).stat().st_size if end is None else end
    starts = [0]
    with open(path, "rb") as file:
        for part in range(1, parts):
            file.seek(max(size * part // parts, starts[-1]))
            if file.tell() > 0:
                file.seek(file.tell() - 1)  # a range starting right after a newline is kept
                file.readline()
            position = file.tell()
            if starts[-1] < position < size:
                starts.append(position)
    return list(zip(starts, starts[1:] + [size]))


class FileWorkers:
    """One worker process per byte range of `path`, all started on entering the `with` block
    and all stopped (killed if still running) on leaving it.

    `function` is "module:function"; each worker calls it with `task` plus its range's
    `path`, `start` and `end`. `environment` adds variables to the workers' environment.
    """

    def __init__(self, function: str, path: Path, ranges: list[tuple[int, int]],
                 task: dict[str, Any], *, environment: dict[str, str] | None = None,
                 timeout: float | None = None,
                 cancelled: Callable[[], bool] | None = None) -> None:
        self.function = function
        self.path = Path(path)
        self.ranges = ranges
        self.task = task
        self.environment = environment or {}
        self.timeout = timeout
        self.cancelled = cancelled
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> "FileWorkers":
        environment = same_package_environment(**self.environment)
        try:
            for start, end in self.ranges:
                task = json.dumps({**self.task, "path": str(self.path), "start": start,
                                   "end": end})
                self.processes.append(subprocess.Popen(
                    python_command(FILE_WORKER, self.function, task), env=environment,
                    # Never the terminal: under the dashboard, stray output would garble it.
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def outputs(self) -> Iterator[BinaryIO]:
        """Each worker's output as a stream, in range order, read as the worker writes it.

        Reading raises WorkerFailed when the worker's output ends with an error exit, when
        the wait passes `timeout` seconds (counted from the first read), or when
        `cancelled()` turns true. A stream left unfinished is drained before the next one.
        """
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        for process in self.processes:
            stream = io.BufferedReader(_WorkerOutput(self, process, deadline), 1 << 16)
            yield stream
            while stream.read(1 << 16):
                pass  # the rest, to learn how the worker ended

    def check_stop(self, deadline: float | None) -> None:
        """Raise WorkerFailed when the work is cancelled or past its deadline."""
        if self.cancelled is not None and self.cancelled():
            raise WorkerFailed("stopped: its work was cancelled")
        if deadline is not None and time.monotonic() > deadline:
            raise WorkerFailed(f"stopped after {self.timeout:.0f} s")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
            for stream in (process.stdout, process.stderr):
                if stream:
                    stream.close()


class _WorkerOutput(io.RawIOBase):
    """A worker's stdout as it arrives. Waits in short polls, so a cancel or the deadline is
    noticed; keeps its stderr drained (a full pipe would stall it), for the error message
    when its output ends with an error exit."""

    def __init__(self, workers: FileWorkers, process: subprocess.Popen,
                 deadline: float | None) -> None:
        super().__init__()
        self.workers = workers
        self.process = process
        self.deadline = deadline
        self.errors = bytearray()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        out = self.process.stdout.fileno()
        err = self.process.stderr.fileno() if not self.process.stderr.closed else None
        while True:
            waiting = [out] if err is None else [out, err]
            ready, _, _ = select.select(waiting, [], [], POLL_SECONDS)
            if err in ready:
                chunk = os.read(err, 1 << 16)
                if chunk:
                    self.errors += chunk
                else:
                    err = None
                    self.process.stderr.close()
            if out in ready:
                data = os.read(out, len(buffer))
                if not data:
                    self._ended()
                buffer[:len(data)] = data
                return len(data)
            self.workers.check_stop(self.deadline)

    def _ended(self) -> None:
        if self.process.stderr and not self.process.stderr.closed:
            self.errors += self.process.stderr.read()
        while True:
            try:
                self.process.wait(timeout=POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                self.workers.check_stop(self.deadline)
        if self.process.returncode != 0:
            text = self.errors.decode(errors="replace").strip().splitlines() or ["no message"]
            raise WorkerFailed(f"exit status {self.process.returncode}: {text[-1]}",
                               self.process.returncode)


def main(argv: list[str] | None = None) -> int:
    """A worker: `python -m zyquo_tui.core.system.file_workers MODULE:FUNCTION TASK_JSON`."""
    function_name, task_text = sys.argv[1:] if argv is None else argv
    module_name, _, name = function_name.partition(":")
    function = getattr(importlib.import_module(module_name), name)
    out = sys.stdout.buffer
    function(json.loads(task_text), out)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
