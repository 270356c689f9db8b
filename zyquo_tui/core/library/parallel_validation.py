"""Validating a big file on several cores: one worker process per line-aligned byte range
(core.system.file_workers), results merged in order."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError
from zyquo_tui.core.library.dataset_files import (
    FileReport,
    RowHashes,
    finish_file,
    first_format,
    scan_rows,
)
from zyquo_tui.core.library.rows import CHAT, ERROR, TOOLS, WARNING, DatasetProblem, RowChecker
from zyquo_tui.core.system.file_workers import (
    FileWorkers,
    WorkerFailed,
    line_aligned_ranges,
)

# Below this much data, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 64 * 1024 * 1024


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
    stdlib way past that. Workers all start with one PYTHONHASHSEED (`hash_seed`: the same
    for every file whose hashes are compared) so their row hashes compare. Each reports its
    problems with line numbers counted from its range's first line; they are shifted here.
    """
    file_format, format_line = first_format(path)
    task = {"display_path": display_path, "format": file_format, "format_line": format_line}
    report = FileReport(path=display_path)
    lines_before = 0
    with_tools = False
    try:
        with FileWorkers(f"{__name__}:validate_range", path,
                         line_aligned_ranges(path, workers), task,
                         environment={"PYTHONHASHSEED": str(hash_seed)}) as running:
            for output in running.outputs():
                chunk, lines, chunk_format = _read_chunk_result(output, hashes)
                _merge_chunk(report, chunk, lines_before)
                lines_before += lines
                with_tools |= chunk_format == TOOLS
                if on_progress is not None:
                    on_progress(lines_before)
    except WorkerFailed as failure:
        raise UserError(f"A dataset validation worker failed ({failure.message})",
                        EXIT_PROBLEMS) from None
    if with_tools and file_format == CHAT:
        file_format = TOOLS
    finish_file(report, file_format, hashes)
    return report


def validate_range(task: dict[str, Any], out: BinaryIO) -> None:
    """A worker's part (core.system.file_workers): its range's report as one JSON line, then
    the row hashes, part by part, as an 8-byte count followed by that many 8-byte values."""
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
    out.write(json.dumps(summary).encode() + b"\n")
    for part in hashes.parts:
        out.write(struct.pack("<Q", len(part)))
        out.write(part.tobytes())


def _read_chunk_result(stream: BinaryIO, hashes: RowHashes
                       ) -> tuple[FileReport, int, str | None]:
    header = stream.readline()
    if not header:
        raise UserError("A dataset validation worker ended without a report", EXIT_PROBLEMS)
    summary = json.loads(header)
    for part in hashes.parts:
        (count,) = struct.unpack("<Q", stream.read(8))
        part.frombytes(stream.read(count * part.itemsize))
    chunk = FileReport(path="", rows=summary["rows"], errors=summary["errors"],
                       warnings=summary["warnings"],
                       problems_not_listed=summary["not_listed"])
    chunk.problems = [DatasetProblem("", line, message, severity)
                      for line, message, severity in summary["problems"]]
    return chunk, summary["lines"], summary["format"]


def _merge_chunk(report: FileReport, chunk: FileReport, lines_before: int) -> None:
    for problem in chunk.problems:
        line = problem.line + lines_before if problem.line is not None else None
        report.add(line, problem.message, problem.severity)
    # Problems past a chunk's own list were counted, not kept: count them as not listed.
    report.problems_not_listed += chunk.problems_not_listed
    report.errors += chunk.errors - sum(p.severity == ERROR for p in chunk.problems)
    report.warnings += chunk.warnings - sum(p.severity == WARNING for p in chunk.problems)
    report.rows += chunk.rows
