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

import dataclasses
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zyquo_tui.core.library.dataset_conversion import row_sources
from zyquo_tui.core.library.dataset_files import FileReport, RowHashes, validate_file
from zyquo_tui.core.library.folder_search import find_folders
from zyquo_tui.core.library.parallel_validation import (
    default_workers,
    validate_file_parallel,
)
from zyquo_tui.core.library.rows import (
    ERROR,
    WARNING,
    DatasetProblem,
    Severity,
    format_family,
    peek_format,
)
from zyquo_tui.core.runs.settings import default_of
from zyquo_tui.core.store.paths import zyquo_home
from zyquo_tui.resources import sample_data_dir

SPLITS = ("train", "valid", "test")
DEFAULT_BATCH_SIZE = default_of("batch_size")  # the run setting's default
SOURCE_ZYQUO = "zyquo"
SOURCE_SAMPLE = "sample"
SOURCE_PATH = "path"


@dataclass
class DatasetReport:
    """What validating a dataset folder (or one file) found, across its files."""

    path: str
    files: dict[str, FileReport] = field(default_factory=dict)  # by split name
    folder_problems: list[DatasetProblem] = field(default_factory=list)

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
    def problems(self) -> list[DatasetProblem]:
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
        self.folder_problems.append(DatasetProblem(file, None, message, severity))


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
    _name_sources(report)
    return report


def _name_sources(report: DatasetReport) -> None:
    """Add to each problem at a line of a converted file the source row it came from."""
    for file_report in report.files.values():
        lines = [p.line for p in file_report.problems if p.line is not None]
        sources = row_sources(file_report.path, lines)
        if sources:
            file_report.problems = [
                dataclasses.replace(p, source=sources[p.line]) if p.line in sources else p
                for p in file_report.problems]


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
                format_family(other.format) != format_family(train.format):
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
