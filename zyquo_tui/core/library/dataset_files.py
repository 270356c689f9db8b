"""Validating one .jsonl file as a stream: every row checked, 8 bytes kept per row (a hash,
for duplicates), problems with file:line."""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from zyquo_tui.core.library.rows import (
    BOM,
    DECODE_JSON,
    ERROR,
    WARNING,
    DatasetProblem,
    RowChecker,
    Severity,
    json_error_message,
    not_an_object_message,
    row_format,
)

MAX_PROBLEMS_LISTED = 50
_PROGRESS_EVERY_LINES = 65536


@dataclass
class FileReport:
    """What validating one .jsonl file found."""

    path: str
    rows: int = 0  # non-empty lines: mlx-lm reads each line as a row
    format: str | None = None
    # Problems at a line: the first MAX_PROBLEMS_LISTED; then the whole-file ones.
    problems: list[DatasetProblem] = field(default_factory=list)
    problems_not_listed: int = 0
    errors: int = 0
    warnings: int = 0
    duplicate_rows: int = 0
    _listed_lines: int = field(default=0, repr=False)

    def add(self, line: int | None, message: str, severity: Severity = ERROR) -> None:
        if severity == ERROR:
            self.errors += 1
        else:
            self.warnings += 1
        # A whole-file finding (no line) is always listed: there are few, and they matter.
        if line is None or self._listed_lines < MAX_PROBLEMS_LISTED:
            self.problems.append(DatasetProblem(self.path, line, message, severity))
            self._listed_lines += line is not None
        else:
            self.problems_not_listed += 1


class RowHashes:
    """Hashes of a file's rows, for counting duplicates in 8 bytes a row.

    Split by the low byte into 256 arrays so counting needs a set of only one part at a time.
    Python's bytes hash is 64-bit SipHash: a false duplicate among a billion rows is unlikely.
    Its seed differs between processes, so all hashes compared must come from one process or
    from workers started with one PYTHONHASHSEED (see validate_file_parallel).
    """

    PARTS = 256

    def __init__(self) -> None:
        self.parts = [array("q") for _ in range(self.PARTS)]

    def add(self, row_bytes: bytes) -> None:
        value = hash(row_bytes)
        self.parts[value & 0xFF].append(value)

    def extend(self, parts: list[array]) -> None:
        for mine, theirs in zip(self.parts, parts):
            mine.extend(theirs)

    def duplicates(self) -> int:
        """Rows equal to an earlier row of the same file."""
        return sum(len(part) - len(set(part)) for part in self.parts)

    def shared_with(self, other: "RowHashes") -> int:
        """Rows of this file that also occur in `other` (valid rows that are in train)."""
        shared = 0
        for mine, theirs in zip(self.parts, other.parts):
            if mine and theirs:
                seen = set(theirs)
                shared += sum(1 for value in mine if value in seen)
        return shared


def validate_file(path: Path | str, display_path: str | None = None,
                  hashes: RowHashes | None = None,
                  on_progress: Callable[[int], None] | None = None) -> FileReport:
    """Check every row of one .jsonl file, in this process; see validate_dataset for more.

    `display_path` is how problems name the file (default: `path` as given). `hashes`, when
    given, receives each row's hash (to compare files later). `on_progress(lines)` is called
    every 65,536 lines; raise from it to stop early.
    """
    path = Path(path)
    report = FileReport(path=display_path or str(path))
    hashes = hashes if hashes is not None else RowHashes()
    checker = RowChecker(report)
    scan_rows(path, report, checker, hashes, on_progress=on_progress)
    finish_file(report, checker.file_format, hashes)
    return report


def scan_rows(path: Path, report: FileReport, checker: "RowChecker", hashes: RowHashes,
          start: int = 0, end: int | None = None,
          on_progress: Callable[[int], None] | None = None) -> int:
    """Check the lines of bytes start..end of `path` (line starts); return how many lines.

    The hot loop of validation: keep it lean (locals, no per-row allocation when a row is fine).
    """
    add_hash = hashes.add
    decode = DECODE_JSON
    add_problem = report.add
    rows = 0
    line_number = 0
    offset = start
    with open(path, "rb", buffering=1 << 20) as file:
        file.seek(start)
        for raw in file:
            line_number += 1
            if end is not None:
                if offset >= end:
                    line_number -= 1
                    break
                offset += len(raw)
            if line_number == 1 and start == 0 and raw.startswith(BOM):
                add_problem(1, "the file starts with a byte-order mark (BOM), which mlx-lm "
                               "reads as part of the first row; save it as UTF-8 without BOM")
                raw = raw[len(BOM):]
            content = raw.strip()
            if not content:
                add_problem(line_number, "empty line: mlx-lm reads every line as a row; "
                                         "remove it")
                continue
            rows += 1
            add_hash(content)
            if on_progress is not None and line_number % _PROGRESS_EVERY_LINES == 0:
                on_progress(line_number)
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError as error:
                add_problem(line_number, f"invalid UTF-8 at byte {error.start + 1} of the line "
                                         f"({error.reason}); save the file as UTF-8")
                continue
            try:
                row = decode(text)
            except json.JSONDecodeError as error:
                add_problem(line_number, json_error_message(line_number, text, error))
                continue
            if type(row) is dict:
                checker(line_number, row)
            else:
                add_problem(line_number, not_an_object_message(row))
    report.rows += rows
    return line_number


def finish_file(report: FileReport, file_format: str | None, hashes: RowHashes) -> None:
    report.format = file_format
    report.duplicate_rows = hashes.duplicates()
    if report.duplicate_rows:
        report.add(None, f"{report.duplicate_rows} duplicate rows (byte for byte the same as "
                         "an earlier row); they weigh those examples more", WARNING)
    if report.rows == 0 and report.errors == 0:
        report.add(None, "no rows: mlx-lm fails to load an empty file; add rows or delete it")


def first_format(path: Path) -> tuple[str | None, int | None]:
    """The format of the first row that has one, and its line: what every row must match."""
    with open(path, "rb") as file:
        for line_number, raw in enumerate(file, 1):
            try:
                row = DECODE_JSON(raw.removeprefix(BOM).decode("utf-8"))
            except ValueError:
                continue
            found = row_format(row) if type(row) is dict else None
            if found is not None:
                return found, line_number
    return None, None
