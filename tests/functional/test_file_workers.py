"""Worker processes over line-aligned byte ranges of a file (core.system.file_workers), the
piece dataset validation and the history load share."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from zyquo_tui.core.system.file_workers import (
    FileWorkers,
    WorkerFailed,
    line_aligned_ranges,
)

TESTS = Path(__file__).resolve().parent


# Worker functions: the workers import this module (the tests folder is put on PYTHONPATH).

def echo_range(task, out) -> None:
    with open(task["path"], "rb") as handle:
        handle.seek(task["start"])
        out.write(task["label"].encode() + b":" + handle.read(task["end"] - task["start"]))


def fail_on_second_line(task, out) -> None:
    if task["start"] > 0:
        raise SystemExit("this range is cursed")
    echo_range(task, out)


def sleep_long(task, out) -> None:
    time.sleep(60)


@pytest.fixture
def workers_see_tests(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))


def lines_file(tmp_path: Path, count: int = 100) -> Path:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"line %d %s\n" % (i, b"x" * (i % 17)) for i in range(count)))
    return path


def test_ranges_start_at_line_starts_and_cover_the_file(tmp_path):
    path = lines_file(tmp_path)
    data = path.read_bytes()
    for parts in (1, 2, 3, 7, 500):
        ranges = line_aligned_ranges(path, parts)
        assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
        assert all(stop == start for (_, stop), (start, _) in zip(ranges, ranges[1:]))
        assert all(start == 0 or data[start - 1:start] == b"\n" for start, _ in ranges)
        assert len(ranges) <= min(parts, 100)
    assert line_aligned_ranges(path, 3, end=40)[-1][1] == 40


def test_outputs_come_back_in_range_order(tmp_path, workers_see_tests):
    path = lines_file(tmp_path)
    ranges = line_aligned_ranges(path, 4)
    with FileWorkers("test_file_workers:echo_range", path, ranges, {"label": "w"}) as running:
        outputs = [output.read() for output in running.outputs()]
    assert [o.split(b":", 1)[0] for o in outputs] == [b"w"] * 4
    assert b"".join(o.split(b":", 1)[1] for o in outputs) == path.read_bytes()


def test_a_failing_worker_says_why_and_the_others_are_stopped(tmp_path, workers_see_tests):
    path = lines_file(tmp_path)
    ranges = line_aligned_ranges(path, 3)
    with pytest.raises(WorkerFailed, match="this range is cursed"):
        with FileWorkers("test_file_workers:fail_on_second_line", path, ranges,
                         {"label": "w"}) as running:
            processes = running.processes
            list(running.outputs())
    assert all(p.poll() is not None for p in processes)


def test_cancelling_kills_the_workers(tmp_path, workers_see_tests):
    path = lines_file(tmp_path)
    started = time.monotonic()
    with pytest.raises(WorkerFailed, match="cancelled"):
        with FileWorkers("test_file_workers:sleep_long", path, line_aligned_ranges(path, 2),
                         {}, cancelled=lambda: time.monotonic() - started > 0.5) as running:
            processes = list(running.processes)
            pids = [p.pid for p in processes]
            list(running.outputs())
    # Killed, not waited for: a worker that finished its 60 s sleep would have exited with 0.
    assert all(p.returncode == -signal.SIGKILL for p in processes)
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in pids)
