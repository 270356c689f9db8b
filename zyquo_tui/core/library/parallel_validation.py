"""Validating a big file on several cores: line-aligned byte ranges, one worker process each,
results merged in order."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError
from zyquo_tui.core.library.dataset_files import (
    FileReport,
    RowHashes,
    finish_file,
    first_format,
    scan_rows,
)
from zyquo_tui.core.library.rows import CHAT, ERROR, TOOLS, WARNING, Problem, RowChecker

# Below this much data, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 64 * 1024 * 1024
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]
_WORKER_CODE = "from zyquo_tui.core.library.parallel_validation import chunk_worker_main; chunk_worker_main()"


def default_workers(total_bytes: int) -> int:
    """How many processes validate this much data: one for small data, else one per core."""
    if total_bytes < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, 8))


def validate_file_parallel(path: Path, display_path: str, hashes: RowHashes, workers: int,
                           hash_seed: int,
                           on_progress: Callable[[int], None] | None = None) -> FileReport:
    """validate_file across `workers` processes, one byte range of whole lines each.

    CPython parses JSON at about 100,000 rows a second on one core; more cores are the
    stdlib way past that. Workers are plain subprocesses (never forked: the dashboard has
    threads; not multiprocessing: it re-runs the caller's __main__), all started with one
    PYTHONHASHSEED (`hash_seed`: the same for every file whose hashes are compared) so their
    row hashes compare. Each reports its problems with line numbers counted from its range's
    first line; they are shifted here.
    """
    file_format, format_line = first_format(path)
    environment = dict(os.environ, PYTHONHASHSEED=str(hash_seed))
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(_PACKAGE_PARENT), os.environ.get("PYTHONPATH")])
    )
    ranges = _line_aligned_ranges(path, workers)
    processes = []
    try:
        for start, end in ranges:
            task = json.dumps({"path": str(path), "display_path": display_path, "start": start,
                               "end": end, "format": file_format, "format_line": format_line})
            processes.append(subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, task], env=environment,
                # Never the terminal: under the dashboard, stray output would garble the screen.
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            ))
        report = FileReport(path=display_path)
        lines_before = 0
        with_tools = False
        for process in processes:
            chunk, lines, chunk_format = _read_chunk_result(process, hashes)
            _merge_chunk(report, chunk, lines_before)
            lines_before += lines
            with_tools |= chunk_format == TOOLS
            if on_progress is not None:
                on_progress(lines_before)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
            for stream in (process.stdout, process.stderr):
                if stream:
                    stream.close()
    if with_tools and file_format == CHAT:
        file_format = TOOLS
    finish_file(report, file_format, hashes)
    return report


def chunk_worker_main() -> None:
    # Runs in a worker process. Output: one JSON line (the chunk's report), then the row
    # hashes, part by part, as an 8-byte count followed by that many 8-byte values.
    task = json.loads(sys.argv[1])
    report = FileReport(path=task["display_path"])
    checker = RowChecker(report, task["format"], task["format_line"])
    hashes = RowHashes()
    lines = scan_rows(Path(task["path"]), report, checker, hashes, task["start"], task["end"])
    summary = {
        "lines": lines, "rows": report.rows, "format": checker.file_format,
        "errors": report.errors, "warnings": report.warnings,
        "not_listed": report.problems_not_listed,
        "problems": [[p.line, p.message, p.severity] for p in report.problems],
    }
    out = sys.stdout.buffer
    out.write(json.dumps(summary).encode() + b"\n")
    for part in hashes.parts:
        out.write(struct.pack("<Q", len(part)))
        out.write(part.tobytes())
    out.flush()


def _read_chunk_result(process: subprocess.Popen, hashes: RowHashes,
                       ) -> tuple[FileReport, int, str | None]:
    stream = process.stdout
    assert stream is not None
    header = stream.readline()
    if not header:
        process.wait()
        error = process.stderr.read().decode(errors="replace") if process.stderr else ""
        last = (error.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"A dataset validation worker failed (exit status "
                        f"{process.returncode}): {last}", EXIT_PROBLEMS)
    summary = json.loads(header)
    for part in hashes.parts:
        (count,) = struct.unpack("<Q", stream.read(8))
        part.frombytes(stream.read(count * part.itemsize))
    chunk = FileReport(path="", rows=summary["rows"], errors=summary["errors"],
                       warnings=summary["warnings"],
                       problems_not_listed=summary["not_listed"])
    chunk.problems = [Problem("", line, message, severity)
                      for line, message, severity in summary["problems"]]
    return chunk, summary["lines"], summary["format"]


def _line_aligned_ranges(path: Path, parts: int) -> list[tuple[int, int]]:
    """Split a file into about `parts` byte ranges, each starting at the start of a line."""
    size = path.stat().st_size
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


def _merge_chunk(report: FileReport, chunk: FileReport, lines_before: int) -> None:
    for problem in chunk.problems:
        line = problem.line + lines_before if problem.line is not None else None
        report.add(line, problem.message, problem.severity)
    # Problems past a chunk's own list were counted, not kept: count them as not listed.
    report.problems_not_listed += chunk.problems_not_listed
    report.errors += chunk.errors - sum(p.severity == ERROR for p in chunk.problems)
    report.warnings += chunk.warnings - sum(p.severity == WARNING for p in chunk.problems)
    report.rows += chunk.rows
