"""Datasets: find the folders that hold one, tell their format, and validate them before a run.

A dataset is a folder with train.jsonl (required), valid.jsonl and test.jsonl, one JSON object
per line, in one of mlx-lm's formats (mlx_lm/tuner/datasets.py decides from the first row):

  completions  {"prompt": ..., "completion": ...}       (an optional "tools" list)
  chat         {"messages": [{"role": ..., "content": ...}, ...]}
  tools        chat rows that also carry a "tools" list
  text         {"text": ...}
  preference   {"prompt": ..., "chosen": ..., "rejected": ...}  (for preference training)

Validation streams each file line by line in binary and keeps 8 bytes per row (a hash, for
duplicates), so a file of any size validates in bounded memory. It reports every problem that
would stop or spoil a run with its file and line, at most MAX_PROBLEMS_LISTED per file and a
count of the rest.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..resources import sample_data_dir
from .errors import EXIT_PROBLEMS, UserError
from .folder_search import find_folders
from .paths import zyquo_home

ERROR = "error"
WARNING = "warning"
Severity = Literal["error", "warning"]

COMPLETIONS = "completions"
CHAT = "chat"
TOOLS = "tools"
TEXT = "text"
PREFERENCE = "preference"
FORMATS = (COMPLETIONS, CHAT, TOOLS, TEXT, PREFERENCE)


def training_refusal(data_format: str | None) -> str | None:
    """Why mlx-lm's LoRA trainer cannot train rows of this format; None when it can.

    Preference rows are valid data (for DPO-style training), so validation passes them; only
    training refuses them, here, in one place: the trainer, the setup form and `data check`.
    """
    if data_format == PREFERENCE:
        return ("preference rows (prompt, chosen, rejected) are for preference training, "
                "which mlx-lm's LoRA trainer does not do; train on chat, completions or text "
                "rows instead")
    return None


SPLITS = ("train", "valid", "test")
MAX_PROBLEMS_LISTED = 50
DEFAULT_BATCH_SIZE = 4  # mlx-lm's default batch_size
KNOWN_ROLES = ("system", "user", "assistant", "tool")
# The keys each format needs, for saying which one a row lacks.
REQUIRED_KEYS = {
    COMPLETIONS: ("prompt", "completion"),
    CHAT: ("messages",),
    TOOLS: ("messages",),
    TEXT: ("text",),
    PREFERENCE: ("prompt", "chosen", "rejected"),
}
SOURCE_ZYQUO = "zyquo"
SOURCE_SAMPLE = "sample"
SOURCE_PATH = "path"

_BOM = b"\xef\xbb\xbf"
_DECODE_JSON = json.JSONDecoder().decode
_PROGRESS_EVERY_LINES = 65536


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset, where it is, and whether it stops a run (error)."""

    file: str
    line: int | None
    message: str
    severity: Severity = ERROR

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        prefix = "warning: " if self.severity == WARNING else ""
        return f"{where}: {prefix}{self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "message": self.message,
                "severity": self.severity}


@dataclass
class FileReport:
    """What validating one .jsonl file found."""

    path: str
    rows: int = 0  # non-empty lines: mlx-lm reads each line as a row
    format: str | None = None
    # Problems at a line: the first MAX_PROBLEMS_LISTED; then the whole-file ones.
    problems: list[Problem] = field(default_factory=list)
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
            self.problems.append(Problem(self.path, line, message, severity))
            self._listed_lines += line is not None
        else:
            self.problems_not_listed += 1


@dataclass
class DatasetReport:
    """What validating a dataset folder (or one file) found, across its files."""

    path: str
    files: dict[str, FileReport] = field(default_factory=dict)  # by split name
    folder_problems: list[Problem] = field(default_factory=list)

    @property
    def format(self) -> str | None:
        train = self.files.get("train")
        if train is not None and train.format:
            return train.format
        return next((f.format for f in self.files.values() if f.format), None)

    @property
    def rows(self) -> dict[str, int]:
        return {split: report.rows for split, report in self.files.items()}

    @property
    def problems(self) -> list[Problem]:
        listed = [p for report in self.files.values() for p in report.problems]
        return listed + self.folder_problems

    @property
    def errors(self) -> int:
        return sum(f.errors for f in self.files.values()) + sum(
            p.severity == ERROR for p in self.folder_problems
        )

    @property
    def warnings(self) -> int:
        return sum(f.warnings for f in self.files.values()) + sum(
            p.severity == WARNING for p in self.folder_problems
        )

    @property
    def ok(self) -> bool:
        """True when nothing would stop a run (warnings allowed)."""
        return self.errors == 0

    def folder_problem(self, file: str, message: str, severity: Severity = ERROR) -> None:
        self.folder_problems.append(Problem(file, None, message, severity))


@dataclass
class DatasetInfo:
    """A dataset folder as the dataset list shows it; no validation, just a quick look."""

    name: str
    path: Path
    source: str
    format: str | None
    split_bytes: dict[str, int]  # size of each of train/valid/test.jsonl present

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "source": self.source,
                "format": self.format, "split_bytes": self.split_bytes}


# --- formats ----------------------------------------------------------------------------------


def row_format(row: dict[str, Any]) -> str | None:
    """The format of one row, by mlx-lm's precedence (completions, then chat, then text)."""
    if "prompt" in row and "completion" in row:
        return COMPLETIONS
    if "messages" in row:
        return TOOLS if "tools" in row else CHAT
    if "text" in row:
        return TEXT
    if "prompt" in row and "chosen" in row and "rejected" in row:
        return PREFERENCE
    return None


def _family(row_format_name: str | None) -> str | None:
    # Chat rows with and without tools load into the same mlx-lm ChatDataset.
    return CHAT if row_format_name == TOOLS else row_format_name


def peek_format(path: Path) -> str | None:
    """The format of a file's first row, or None if it has no readable first row."""
    try:
        with open(path, "rb") as file:
            first = file.readline(1 << 24)
        row = _DECODE_JSON(first.removeprefix(_BOM).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return row_format(row) if isinstance(row, dict) else None


# --- validating -------------------------------------------------------------------------------


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
    checker = _RowChecker(report)
    _scan(path, report, checker, hashes, on_progress=on_progress)
    _finish_file(report, checker.file_format, hashes)
    return report


def _scan(path: Path, report: FileReport, checker: "_RowChecker", hashes: RowHashes,
          start: int = 0, end: int | None = None,
          on_progress: Callable[[int], None] | None = None) -> int:
    """Check the lines of bytes start..end of `path` (line starts); return how many lines.

    The hot loop of validation: keep it lean (locals, no per-row allocation when a row is fine).
    """
    add_hash = hashes.add
    decode = _DECODE_JSON
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
            if line_number == 1 and start == 0 and raw.startswith(_BOM):
                add_problem(1, "the file starts with a byte-order mark (BOM), which mlx-lm "
                               "reads as part of the first row; save it as UTF-8 without BOM")
                raw = raw[len(_BOM):]
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
                add_problem(line_number, _json_error_message(line_number, text, error))
                continue
            if type(row) is dict:
                checker(line_number, row)
            else:
                add_problem(line_number, _not_an_object_message(row))
    report.rows += rows
    return line_number


def _finish_file(report: FileReport, file_format: str | None, hashes: RowHashes) -> None:
    report.format = file_format
    report.duplicate_rows = hashes.duplicates()
    if report.duplicate_rows:
        report.add(None, f"{report.duplicate_rows} duplicate rows (byte for byte the same as "
                         "an earlier row); they weigh those examples more", WARNING)
    if report.rows == 0 and report.errors == 0:
        report.add(None, "no rows: mlx-lm fails to load an empty file; add rows or delete it")


def _first_format(path: Path) -> tuple[str | None, int | None]:
    """The format of the first row that has one, and its line: what every row must match."""
    with open(path, "rb") as file:
        for line_number, raw in enumerate(file, 1):
            try:
                row = _DECODE_JSON(raw.removeprefix(_BOM).decode("utf-8"))
            except ValueError:
                continue
            found = row_format(row) if type(row) is dict else None
            if found is not None:
                return found, line_number
    return None, None


# --- validating big files on several cores ----------------------------------------------------

# Below this much data, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 64 * 1024 * 1024
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]
_WORKER_CODE = "from zyquo_tui.core.datasets import _chunk_worker_main; _chunk_worker_main()"


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
    file_format, format_line = _first_format(path)
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
    _finish_file(report, file_format, hashes)
    return report


def _chunk_worker_main() -> None:
    # Runs in a worker process. Output: one JSON line (the chunk's report), then the row
    # hashes, part by part, as an 8-byte count followed by that many 8-byte values.
    task = json.loads(sys.argv[1])
    report = FileReport(path=task["display_path"])
    checker = _RowChecker(report, task["format"], task["format_line"])
    hashes = RowHashes()
    lines = _scan(Path(task["path"]), report, checker, hashes, task["start"], task["end"])
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


# --- validating a dataset folder --------------------------------------------------------------


def validate_dataset(path: Path | str, batch_size: int = DEFAULT_BATCH_SIZE,
                     on_progress: Callable[[str, int], None] | None = None,
                     workers: int | None = None) -> DatasetReport:
    """Validate a dataset folder (train, valid, test) or a single .jsonl file.

    Each file: every row against the format of its first row (mlx-lm's rule), and duplicates.
    The folder: train.jsonl present and at least `batch_size` rows (mlx-lm refuses fewer),
    valid.jsonl present (else training runs without validation) and big enough, valid and
    train in one format, valid or test rows that repeat train rows.
    Big data is split across `workers` processes (default: one per core above 64 MB).
    `on_progress(split, lines)` reports progress. Raises FileNotFoundError if `path` is missing.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(path)
    report = DatasetReport(path=str(path))
    if path.is_file():
        files = {"train" if path.stem == "train" else path.stem: path}
    else:
        files = {s: path / f"{s}.jsonl" for s in SPLITS if (path / f"{s}.jsonl").is_file()}
    if workers is None:
        workers = default_workers(sum(f.stat().st_size for f in files.values()))

    hashes = {split: RowHashes() for split in files}
    hash_seed = random.randint(1, 2**32 - 1)  # one for all files: their hashes are compared

    def progress_of(split: str) -> Callable[[int], None] | None:
        if on_progress is None:
            return None
        return lambda lines: on_progress(split, lines)

    for split, file in files.items():
        if workers > 1:
            report.files[split] = validate_file_parallel(
                file, str(file), hashes[split], workers, hash_seed, progress_of(split))
        else:
            report.files[split] = validate_file(file, str(file), hashes[split],
                                                progress_of(split))
    if path.is_dir():
        _check_folder(report, path, batch_size, hashes)
    return report


def _check_folder(report: DatasetReport, path: Path, batch_size: int,
                  hashes: dict[str, RowHashes]) -> None:
    train_name, valid_name = str(path / "train.jsonl"), str(path / "valid.jsonl")
    train, valid = report.files.get("train"), report.files.get("valid")
    if train is None:
        others = sorted(p.name for p in path.glob("*.jsonl"))[:3]
        hint = f" (this folder has {', '.join(others)})" if others else ""
        report.folder_problem(str(path), f"no train.jsonl{hint}: mlx-lm needs one to train; "
                                         "put the training rows in train.jsonl")
        return  # not a dataset folder: the other checks would only add noise
    if 0 < train.rows < batch_size:
        report.folder_problem(train_name, f"only {train.rows} rows, fewer than the batch size "
                                          f"{batch_size}: mlx-lm refuses to train; add rows or "
                                          "lower the batch size")
    if valid is None:
        report.folder_problem(valid_name, "no valid.jsonl: training runs without a validation "
                                          "loss, so overfitting goes unseen", WARNING)
    elif 0 < valid.rows < batch_size:
        # mlx-lm's own first validation would raise; our trainer skips validation instead.
        report.folder_problem(valid_name, f"only {valid.rows} rows, fewer than the batch size "
                                          f"{batch_size}: validation is skipped; add rows or "
                                          "lower the batch size to see a validation loss",
                              WARNING)
    elif valid.rows and valid.rows < 2 * batch_size:
        report.folder_problem(valid_name, f"only {valid.rows} rows: each validation averages "
                                          "one batch, so the validation loss will be noisy",
                              WARNING)
    for split, other in report.files.items():
        if split != "train" and train is not None and other.format and train.format and \
                _family(other.format) != _family(train.format):
            report.folder_problem(other.path, f"{other.format} format, but train.jsonl is "
                                              f"{train.format}: the losses are not comparable",
                                  WARNING)
    for split in ("valid", "test"):
        if split in hashes and "train" in hashes:
            shared = hashes[split].shared_with(hashes["train"])
            if shared:
                report.folder_problem(report.files[split].path, f"{shared} rows also in "
                                      "train.jsonl: the model is scored on rows it trained on",
                                      WARNING)


def _json_error_message(line_number: int, text: str, error: json.JSONDecodeError) -> str:
    stripped = text.strip()
    if stripped == "[" and line_number == 1:
        return ("the file is one JSON array, not JSON Lines: write one JSON object per line "
                "with no enclosing [ ]")
    if stripped in ("{", "}", "},", "]"):
        return ("a row spread over several lines: JSON Lines needs each object on one line")
    return f"invalid JSON at column {error.colno}: {error.msg}"


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _not_an_object_message(row: object) -> str:
    if isinstance(row, list):
        return ("a JSON array where a row should be: each line must be one JSON object "
                "such as {\"text\": ...}")
    return f"a JSON {_json_type(row)} where a row should be: each line must be one JSON object"


class _RowChecker:
    """Checks rows one by one against the format of the file's first row (as mlx-lm does)."""

    def __init__(self, report: FileReport, file_format: str | None = None,
                 format_line: int | None = None) -> None:
        # A worker checking a later chunk of a file is told the format of its first row.
        self.report = report
        # The module's own string, so the hot path can compare by identity.
        self.file_format = next((f for f in FORMATS if f == file_format), None)
        self.format_line = format_line

    def __call__(self, line: int, row: dict[str, Any]) -> None:
        found = row_format(row)
        if found is None:
            self._missing_keys(line, row, self.file_format)
            return
        if found is not self.file_format:
            if self.file_format is None:
                self.file_format, self.format_line = found, line
            elif _family(found) != _family(self.file_format):
                self.report.add(line, f"mixed formats: a {found} row in a {self.file_format} "
                                      f"file (the format comes from line {self.format_line}); "
                                      "mlx-lm reads every row as the first one's format")
                return
            elif found == TOOLS:
                self.file_format = TOOLS
        findings = _CHECKS[found](row)
        if findings:
            for severity, message in findings:
                self.report.add(line, message, severity)

    def _missing_keys(self, line: int, row: dict[str, Any], expected: str | None) -> None:
        keys = ", ".join(sorted(row)) or "none"
        if expected is None:
            self.report.add(line, f"no known format (keys: {keys}): a row needs prompt and "
                                  "completion, messages, text, or prompt, chosen and rejected")
            return
        missing = [k for k in REQUIRED_KEYS[expected] if k not in row]
        self.report.add(line, f"missing {', '.join(repr(k) for k in missing)} for a {expected} "
                              f"row (keys: {keys})")


_Findings = list[tuple[Severity, str]] | None


def _check_string(findings: list, row: dict[str, Any], key: str, empty: Severity) -> None:
    value = row[key]
    if type(value) is not str:
        findings.append((ERROR, f"{key!r} must be a string, found {_json_type(value)}"))
    elif not value.strip():
        findings.append((empty, f"{key!r} is empty"))


def _check_completions(row: dict[str, Any]) -> _Findings:
    prompt, completion = row["prompt"], row["completion"]
    if type(prompt) is str and type(completion) is str and prompt.strip() and \
            completion.strip() and "tools" not in row:
        return None
    findings: list[tuple[Severity, str]] = []
    _check_string(findings, row, "prompt", WARNING)
    _check_string(findings, row, "completion", ERROR)
    _check_tools(findings, row)
    return findings


def _check_text(row: dict[str, Any]) -> _Findings:
    text = row["text"]
    if type(text) is str and text.strip():
        return None
    findings: list[tuple[Severity, str]] = []
    _check_string(findings, row, "text", ERROR)
    return findings


def _check_preference(row: dict[str, Any]) -> _Findings:
    # Each of prompt, chosen and rejected is a string, or (the conversational form preference
    # trainers also read) a list of messages: the prompt's turns, then the answer's.
    findings: list[tuple[Severity, str]] = []
    for key, empty in (("prompt", WARNING), ("chosen", ERROR), ("rejected", ERROR)):
        value = row[key]
        if type(value) is not list:
            _check_string(findings, row, key, empty)
        elif not value:
            findings.append((empty, f"{key!r} is empty"))
        else:
            for index, message in enumerate(value):
                role = message.get("role") if type(message) is dict else None
                problem = (f"unknown role {role!r}" if role not in KNOWN_ROLES
                           else _content_problem(message, role))
                if problem:
                    findings.append((ERROR, f"{key}[{index}]: {problem}"))
    if row["chosen"] == row["rejected"]:
        findings.append((WARNING, "'chosen' and 'rejected' are the same: the pair teaches "
                                  "nothing"))
    return findings or None


def _check_tools(findings: list, row: dict[str, Any]) -> None:
    tools = row.get("tools")
    if tools is None:
        return
    if type(tools) is not list or not all(type(t) is dict for t in tools):
        findings.append((ERROR, f"'tools' must be an array of objects, found "
                                f"{_json_type(tools)}"))


def _check_chat(row: dict[str, Any]) -> _Findings:
    messages = row["messages"]
    if type(messages) is not list:
        return [(ERROR, f"'messages' must be an array of messages, found "
                        f"{_json_type(messages)}")]
    if "tools" not in row and _is_flawless(messages):
        return None
    findings = _message_problems(messages, "messages")
    if "tools" in row:
        findings = findings or []
        _check_tools(findings, row)
    return findings or None


_CHECKS = {COMPLETIONS: _check_completions, CHAT: _check_chat, TOOLS: _check_chat,
           TEXT: _check_text, PREFERENCE: _check_preference}


# (previous role, role) pairs of a well-ordered conversation; None is its start.
_GOOD_TURNS = frozenset({
    (None, "system"), (None, "user"), ("system", "user"), ("user", "assistant"),
    ("assistant", "user"), ("assistant", "tool"), ("tool", "tool"), ("tool", "assistant"),
    ("tool", "user"),
})


def _is_flawless(messages: list, _good_turns: frozenset = _GOOD_TURNS) -> bool:
    """A quick yes for the common conversation with nothing to report.

    Most rows are fine, and the detailed check below costs several times more; a False here
    only means "look closer", never that something is wrong.
    """
    try:
        previous = None
        for message in messages:
            content = message["content"]
            if type(content) is not str or not content or content.isspace():
                return False
            role = message["role"]
            if (previous, role) not in _good_turns:
                return False
            previous = role
        return previous == "assistant"
    except (KeyError, TypeError):  # a message that is not an object, or lacks a key
        return False


def _message_problems(messages: list, key: str) -> list[tuple[Severity, str]]:
    """Problems of one conversation: message shape, known roles, their order, empty turns.

    The order rules are those the strict chat templates (Llama 2, Mistral, Gemma) enforce by
    raising: system first, then user and assistant taking turns, tool results after an
    assistant turn; and a conversation needs an assistant turn to learn from.
    """
    findings: list[tuple[Severity, str]] = []
    if not messages:
        return [(ERROR, f"{key!r} is empty")]
    if type(messages[0]) is dict and "role" not in messages[0] and "from" in messages[0]:
        return [(ERROR, f"{key!r} uses 'from'/'value' (ShareGPT style): mlx-lm needs 'role' "
                        "and 'content' in each message")]
    previous = None  # the role of the previous message
    order_known = True  # after a message of unknown role, order checks would only echo it
    assistant_seen = False
    for index, message in enumerate(messages):
        where = f"{key}[{index}]"
        if type(message) is not dict:
            findings.append((ERROR, f"{where} must be an object with role and content, found "
                                    f"{_json_type(message)}"))
            order_known = False
            continue
        role = message.get("role")
        if role not in KNOWN_ROLES:
            if role is None:
                findings.append((ERROR, f"{where} has no 'role'"))
            else:
                findings.append((ERROR, f"{where}: unknown role {role!r}; use one of "
                                        f"{', '.join(KNOWN_ROLES)}"))
            order_known = False
            continue
        order = _order_problem(role, previous, index) if order_known else None
        if order:
            findings.append((ERROR, f"{where}: {order}"))
        if not (role == "system" and index > 0):  # a misplaced system turn changes no turn
            previous = role
        if role == "assistant":
            assistant_seen = True
        content_problem = _content_problem(message, role)
        if content_problem:
            findings.append((WARNING if role == "system" else ERROR,
                             f"{where} ({role}): {content_problem}"))
    last = messages[-1].get("role") if type(messages[-1]) is dict else None
    if not assistant_seen and order_known:
        findings.append((ERROR, f"{key!r} has no assistant message: nothing to learn from"))
    elif assistant_seen and last in KNOWN_ROLES and last != "assistant":
        findings.append((WARNING, f"{key!r} ends with a {last} message: with mask_prompt "
                                  "that turn is what gets trained"))
    return findings


def _order_problem(role: str, previous: str | None, index: int) -> str | None:
    if role == "system":
        return None if index == 0 else "a system message must come first"
    if role == "tool":
        if previous in ("assistant", "tool"):
            return None
        return "a tool message must follow an assistant message that called the tool"
    if previous is None or previous == "system":
        if role == "user":
            return None
        return f"the conversation must open with a user message, not {role}"
    if role == previous:
        return f"two {role} messages in a row: user and assistant must take turns"
    return None


def _content_problem(message: dict[str, Any], role: str) -> str | None:
    content = message.get("content")
    if type(content) is str:
        if content.strip():
            return None
        if role == "assistant" and message.get("tool_calls"):
            return None
        return "empty content"
    if content is None:
        if role == "assistant" and message.get("tool_calls"):
            return None
        return "no content" if "content" not in message else "content is null"
    if type(content) is list:
        # Multi-part content ({"type": "text", "text": ...}) that templates may render.
        if not content:
            return "empty content"
        if all(type(part) is dict and "type" in part for part in content):
            return None
        return "content parts must be objects with a 'type'"
    return f"content must be a string, found {_json_type(content)}"


# --- finding datasets -------------------------------------------------------------------------


def datasets_dir(home: Path | None = None) -> Path:
    """Where the user keeps datasets: $ZYQUO_HOME/datasets."""
    return (home or zyquo_home()) / "datasets"


def describe_dataset(folder: Path, name: str | None = None,
                     source: str = SOURCE_PATH) -> DatasetInfo:
    splits = {
        split: (folder / f"{split}.jsonl").stat().st_size
        for split in SPLITS if (folder / f"{split}.jsonl").is_file()
    }
    return DatasetInfo(name=name or folder.name, path=folder, source=source,
                       format=peek_format(folder / "train.jsonl"), split_bytes=splits)


def discover_datasets(home: Path | None = None,
                      extra: Iterable[Path | str] = ()) -> list[DatasetInfo]:
    """Dataset folders in $ZYQUO_HOME/datasets, the shipped samples, and the given paths."""
    roots = [(datasets_dir(home), SOURCE_ZYQUO), (sample_data_dir(), SOURCE_SAMPLE)]
    roots += [(Path(p).expanduser(), SOURCE_PATH) for p in extra]
    found: dict[Path, DatasetInfo] = {}
    for root, source in roots:
        for folder, name in _dataset_folders(root):
            key = folder.resolve()
            if key not in found:
                found[key] = describe_dataset(folder, name, source)
    return list(found.values())


def _dataset_folders(root: Path, max_depth: int = 2) -> list[tuple[Path, str]]:
    found = find_folders(root, lambda folder: (folder / "train.jsonl").is_file(), max_depth)
    return sorted(found, key=lambda item: item[1])
