"""Converting a dataset as it came (ShareGPT, Alpaca, renamed columns, parquet, the datasets
cache's Arrow files) into a folder mlx-lm reads: train.jsonl, valid.jsonl, test.jsonl.

Beside them the folder keeps where every row came from, so that `data check` and a run's
data errors name the source row and not only the converted one:

  sources/train.txt   line N: where line N of train.jsonl came from (FILE:LINE, FILE:row N)
  sources/valid.txt, sources/test.txt   the same for the other splits
  converted.json      the source, its row shape, the options and the row counts

Splits: files named for a split (train-00000-of-00001.parquet, validation-..., test.jsonl)
keep it when the source names a valid or test split; otherwise the rows are pooled and
`valid_fraction` and `test_fraction` of them, chosen at random with `seed`, become valid.jsonl
and test.jsonl (train.jsonl keeps the rest in the source's order).
"""

from __future__ import annotations

import json
import random
import tempfile
from array import array
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError
from zyquo_tui.core.library.row_conversion import (
    RowNotConverted,
    RowShape,
    convert_row,
    row_shape,
    unknown_shape_message,
)
from zyquo_tui.core.library.source_rows import SourceRowError, read_rows, source_files

SPLITS = ("train", "valid", "test")
SOURCES_FOLDER = "sources"
CONVERTED_FILE = "converted.json"
DEFAULT_VALID_FRACTION = 0.1
DEFAULT_SEED = 0


@dataclass
class ConversionSummary:
    """What a conversion wrote: rows by split, the source's row shape, the output format."""

    folder: Path
    source: str
    shape: str
    format: str | None
    rows: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "source": self.source, "shape": self.shape,
                "format": self.format, "rows": self.rows}


# A row's split while converting: by its file's name, or none (pooled, then dealt).
_SPLIT_CODES = {"train": 0, "valid": 1, "test": 2, None: 3}


def convert_dataset(source: Path | str, folder: Path | str, *, target: str | None = None,
                    prompt_feature: str | None = None, completion_feature: str | None = None,
                    valid_fraction: float = DEFAULT_VALID_FRACTION,
                    test_fraction: float | None = None, seed: int = DEFAULT_SEED,
                    note: dict[str, Any] | None = None) -> ConversionSummary:
    """Convert `source` (a file or a folder) into `folder` (which must not hold a dataset
    already); `test_fraction` defaults to `valid_fraction`. `note` is kept in converted.json.

    UserError (exit 1) naming the first source row that cannot be converted, and how many
    more; nothing is written then. The rows pass through a staging file beside `folder`, so
    memory holds one byte a row (its split), not the rows."""
    source, folder = Path(source).expanduser(), Path(folder).expanduser()
    if (folder / "train.jsonl").exists():
        raise UserError(f"{folder} already holds a dataset (train.jsonl): give a new or empty "
                        "folder with -o.")
    test_fraction = valid_fraction if test_fraction is None else test_fraction
    for name, value in (("--valid-fraction", valid_fraction), ("--test-fraction", test_fraction)):
        if not 0 <= value < 0.5:
            raise UserError(f"{name} {value} must be at least 0 and below 0.5.")
    files = source_files(source)
    shape = _shape_of(files[0].path, prompt_feature, completion_feature)
    parent = next((p for p in (folder.parent, *folder.parent.parents) if p.is_dir()), None)
    with tempfile.TemporaryDirectory(prefix=".converting-", dir=parent) as staging:
        rows_file, where_file = Path(staging) / "rows.jsonl", Path(staging) / "where.txt"
        codes = array("b")
        first_failure: str | None = None
        failed = 0
        with open(rows_file, "w", encoding="utf-8") as rows_out, \
                open(where_file, "w", encoding="utf-8") as where_out:
            for file in files:
                code = _SPLIT_CODES[file.split]
                try:
                    for row, where in read_rows(file.path.absolute()):
                        try:
                            if not isinstance(row, dict):
                                raise RowNotConverted("a row must be a JSON object")
                            converted = convert_row(row, shape, target, prompt_feature,
                                                    completion_feature)
                        except RowNotConverted as why:
                            failed += 1  # the first is said, the others counted
                            first_failure = first_failure or f"{where}: {why}"
                            continue
                        rows_out.write(json.dumps(converted, ensure_ascii=False) + "\n")
                        where_out.write(where + "\n")
                        codes.append(code)
                except SourceRowError as error:
                    failed += 1
                    first_failure = first_failure or str(error)
        if first_failure is not None:
            more = failed - 1
            extra = f" ({more} more row{'s' * (more != 1)} cannot be converted)" if more else ""
            raise UserError(f"{first_failure}{extra}; fix the source, or name its columns with "
                            "--prompt-feature and --completion-feature.", EXIT_PROBLEMS)
        _deal(codes, valid_fraction, test_fraction, seed)
        if _SPLIT_CODES["train"] not in codes:
            raise UserError(f"{source} has no training rows: a dataset needs some in "
                            "train.jsonl.", EXIT_PROBLEMS)
        summary = ConversionSummary(folder, str(source.resolve()), shape.kind,
                                    target or shape.default_format)
        _write(folder, rows_file, where_file, codes, summary)
    options = {"valid_fraction": valid_fraction, "test_fraction": test_fraction, "seed": seed,
               **(note or {})}
    (folder / CONVERTED_FILE).write_text(
        json.dumps({key: value for key, value in {**summary.to_json(), **options}.items()
                    if key != "folder"}, indent=2) + "\n", encoding="utf-8")
    return summary


def _shape_of(first_file: Path, prompt_feature: str | None,
              completion_feature: str | None) -> RowShape:
    if bool(prompt_feature) != bool(completion_feature):
        raise UserError("--prompt-feature and --completion-feature go together: name both "
                        "columns.")
    try:
        first, where = next(read_rows(first_file.absolute()), (None, str(first_file)))
    except SourceRowError as error:
        raise UserError(f"{error}.", EXIT_PROBLEMS) from None
    if not isinstance(first, dict):
        raise UserError(f"{where}: the first row is not a JSON object, so its shape is "
                        "unknown.", EXIT_PROBLEMS)
    shape = row_shape(first, prompt_feature, completion_feature)
    if shape is None:
        raise UserError(f"{where}: {unknown_shape_message(first)}.", EXIT_PROBLEMS)
    return shape


def _deal(codes: array, valid_fraction: float, test_fraction: float, seed: int) -> None:
    """Give every row its split, in place: the source's own valid and test splits when it
    names one (the other rows train), else held-out rows picked at random with `seed`."""
    train, valid, test, unnamed = (_SPLIT_CODES[s] for s in ("train", "valid", "test", None))
    if valid in codes or test in codes:
        for index, code in enumerate(codes):
            if code == unnamed:
                codes[index] = train
        return
    count = len(codes)
    sizes = [max(round(count * fraction), 1 if fraction > 0 and count >= 3 else 0)
             for fraction in (valid_fraction, test_fraction)]  # one at least, when to spare
    codes[:] = array("b", [train]) * count
    held = random.Random(seed).sample(range(count), sum(sizes))
    for index in held[:sizes[0]]:
        codes[index] = valid
    for index in held[sizes[0]:]:
        codes[index] = test


def _write(folder: Path, rows_file: Path, where_file: Path, codes: array,
           summary: ConversionSummary) -> None:
    """The staged rows into their split files, each in the source's order."""
    (folder / SOURCES_FOLDER).mkdir(parents=True, exist_ok=True)
    present = [split for split in SPLITS if _SPLIT_CODES[split] in codes]
    with ExitStack() as stack:
        outputs = {}
        for split in present:
            outputs[_SPLIT_CODES[split]] = (
                stack.enter_context(open(folder / f"{split}.jsonl", "w", encoding="utf-8")),
                stack.enter_context(open(folder / SOURCES_FOLDER / f"{split}.txt", "w",
                                         encoding="utf-8")))
        with open(rows_file, encoding="utf-8") as rows_in, \
                open(where_file, encoding="utf-8") as where_in:
            for code, row, where in zip(codes, rows_in, where_in):
                rows_out, where_out = outputs[code]
                rows_out.write(row)
                where_out.write(where)
    summary.rows = {split: codes.count(_SPLIT_CODES[split]) for split in present}


def row_sources(data_file: Path | str, lines: Iterable[int]) -> dict[int, str]:
    """Where the given lines of a converted split came from (empty when the folder was not
    converted, or the lines are past its record)."""
    data_file = Path(data_file)
    record = data_file.parent / SOURCES_FOLDER / f"{data_file.stem}.txt"
    wanted = set(lines)
    found: dict[int, str] = {}
    if not wanted or not record.is_file():
        return found
    last = max(wanted)
    with open(record, encoding="utf-8") as handle:
        for number, where in enumerate(handle, start=1):
            if number in wanted:
                found[number] = where.rstrip("\n")
            if number >= last:
                break
    return found


def converted_from(folder: Path | str) -> dict[str, Any] | None:
    """converted.json of a converted folder, or None."""
    try:
        return json.loads((Path(folder) / CONVERTED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
