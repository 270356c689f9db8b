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
from collections.abc import Iterable
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


@dataclass
class _Row:
    text: str  # the converted row, one JSON line
    where: str  # where it came from


def convert_dataset(source: Path | str, folder: Path | str, *, target: str | None = None,
                    prompt_feature: str | None = None, completion_feature: str | None = None,
                    valid_fraction: float = DEFAULT_VALID_FRACTION,
                    test_fraction: float | None = None, seed: int = DEFAULT_SEED,
                    note: dict[str, Any] | None = None) -> ConversionSummary:
    """Convert `source` (a file or a folder) into `folder` (which must not hold a dataset
    already); `test_fraction` defaults to `valid_fraction`. `note` is kept in converted.json.

    UserError (exit 1) naming the first source row that cannot be converted, and how many
    more; nothing is written then."""
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
    by_split: dict[str | None, list[_Row]] = {}
    failures: list[str] = []
    for file in files:
        rows = by_split.setdefault(file.split, [])
        try:
            for row, where in read_rows(file.path.absolute()):
                try:
                    if not isinstance(row, dict):
                        raise RowNotConverted("a row must be a JSON object")
                    converted = convert_row(row, shape, target, prompt_feature,
                                            completion_feature)
                except RowNotConverted as why:
                    failures.append(f"{where}: {why}")
                    continue
                rows.append(_Row(json.dumps(converted, ensure_ascii=False), where))
        except SourceRowError as error:
            failures.append(str(error))
    if failures:
        more = len(failures) - 1
        extra = f" ({more} more row{'s' * (more != 1)} cannot be converted)" if more else ""
        raise UserError(f"{failures[0]}{extra}; fix the source, or name its columns with "
                        "--prompt-feature and --completion-feature.", EXIT_PROBLEMS)
    splits = _split(by_split, valid_fraction, test_fraction, seed)
    if not splits["train"]:
        raise UserError(f"{source} has no training rows: a dataset needs some in train.jsonl.",
                        EXIT_PROBLEMS)
    summary = ConversionSummary(folder, str(source.resolve()), shape.kind,
                                target or shape.default_format)
    _write(folder, splits, summary, {"valid_fraction": valid_fraction,
                                     "test_fraction": test_fraction, "seed": seed,
                                     **(note or {})})
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


def _split(by_split: dict[str | None, list[_Row]], valid_fraction: float, test_fraction: float,
           seed: int) -> dict[str, list[_Row]]:
    named = {split for split, rows in by_split.items() if split is not None and rows}
    if named & {"valid", "test"}:
        train = by_split.get("train", []) + by_split.get(None, [])
        return {"train": train, "valid": by_split.get("valid", []),
                "test": by_split.get("test", [])}
    pool = [row for rows in by_split.values() for row in rows]
    count = len(pool)
    picked = random.Random(seed).sample(range(count), count)
    held = {}
    start = 0
    for split, fraction in (("valid", valid_fraction), ("test", test_fraction)):
        # At least one row when asked for some and there are rows enough to spare it.
        size = max(round(count * fraction), 1 if fraction > 0 and count >= 3 else 0)
        held[split] = sorted(picked[start:start + size])
        start += size
    taken = set(held["valid"]) | set(held["test"])
    return {"train": [row for index, row in enumerate(pool) if index not in taken],
            "valid": [pool[index] for index in held["valid"]],
            "test": [pool[index] for index in held["test"]]}


def _write(folder: Path, splits: dict[str, list[_Row]], summary: ConversionSummary,
           options: dict[str, Any]) -> None:
    (folder / SOURCES_FOLDER).mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        rows = splits[split]
        if not rows:
            continue
        (folder / f"{split}.jsonl").write_text("".join(f"{r.text}\n" for r in rows),
                                               encoding="utf-8")
        (folder / SOURCES_FOLDER / f"{split}.txt").write_text(
            "".join(f"{r.where}\n" for r in rows), encoding="utf-8")
        summary.rows[split] = len(rows)
    (folder / CONVERTED_FILE).write_text(
        json.dumps({key: value for key, value in {**summary.to_json(), **options}.items()
                    if key != "folder"}, indent=2) + "\n",
        encoding="utf-8")


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
