"""The rows of a dataset as it came: JSON Lines, a JSON array, parquet files (a file, or a
folder of them as the Hugging Face hub serves them: data/train-00000-of-00001.parquet) and the
Arrow files of the `datasets` library's cache; each row with where it is, for error messages.

Where a row is: FILE:LINE for JSON Lines, FILE:row N for the others (N counts from 1).
Parquet and Arrow are read with pyarrow (the `parquet` extra), imported only when needed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import UserError

ROW_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow")
# A file's split, from a word of its name (train-00000-of-00001, tiny-validation, dev.jsonl).
SPLIT_WORDS = {"train": "train", "training": "train", "validation": "valid", "valid": "valid",
               "val": "valid", "dev": "valid", "eval": "valid", "test": "test"}
# Files beside the data that hold no rows: the hub's and the datasets cache's own.
NOT_ROWS = re.compile(r"^(dataset_info|dataset_dict|state|config|dataset_infos)\.json$"
                      r"|^cache-.*\.arrow$")
_BATCH_ROWS = 1024


class SourceRowError(ValueError):
    """A source row that cannot be read: `where` (FILE:LINE or FILE:row N) and why."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where, self.message = where, message


@dataclass(frozen=True)
class SourceFile:
    """One file of rows, and the split its name gives (None: not named for one)."""

    path: Path
    split: str | None


def split_of(path: Path) -> str | None:
    # The last such word: the datasets cache writes NAME-SPLIT, and a NAME may hold one.
    for word in reversed(re.split(r"[-_.]", path.name.lower().removesuffix(path.suffix))):
        if word in SPLIT_WORDS:
            return SPLIT_WORDS[word]
    # The hub's parquet conversions name the folder instead: CONFIG/SPLIT/0000.parquet.
    return SPLIT_WORDS.get(path.parent.name.lower())


def source_files(source: Path) -> list[SourceFile]:
    """The files of rows in `source` (a file, or a folder searched to any depth, hidden
    folders left out), in name order; UserError when there are none."""
    if source.is_file():
        return [SourceFile(source, split_of(source))]
    if not source.is_dir():
        raise UserError(f"{source} does not exist: give a .jsonl, .json or .parquet file, or "
                        "a folder of them.")
    found = sorted(
        path for path in source.rglob("*")
        if path.suffix in ROW_SUFFIXES and path.is_file() and not NOT_ROWS.match(path.name)
        and not any(part.startswith(".") for part in path.relative_to(source).parts))
    if not found:
        raise UserError(f"{source} holds no .jsonl, .json, .parquet or .arrow file: give a "
                        "file of rows or a folder of them.")
    return [SourceFile(path, split_of(path)) for path in found]


def read_rows(path: Path) -> Iterator[tuple[Any, str]]:
    """Each row of one file with where it is; SourceRowError on a row that cannot be read."""
    if path.suffix == ".parquet":
        yield from _table_rows(path, _parquet_batches(path))
    elif path.suffix == ".arrow":
        yield from _table_rows(path, _arrow_batches(path))
    elif path.suffix == ".json" and _starts_with_array(path):
        yield from _json_array_rows(path)
    else:
        yield from _json_lines(path)


def first_row(path: Path) -> Any:
    """The first row of a file, or None when it has no readable one."""
    try:
        return next(read_rows(path), (None, ""))[0]
    except (SourceRowError, UserError, OSError):
        return None


def _json_lines(path: Path) -> Iterator[tuple[Any, str]]:
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            try:
                yield json.loads(raw.removeprefix(b"\xef\xbb\xbf")), where
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise SourceRowError(where, f"not valid JSON ({error})") from None


def _starts_with_array(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(64).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


def _json_array_rows(path: Path) -> Iterator[tuple[Any, str]]:
    try:
        rows = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SourceRowError(str(path), f"not valid JSON ({error})") from None
    for number, row in enumerate(rows, start=1):
        yield row, f"{path}:row {number}"


def pyarrow_module():
    """pyarrow, or UserError saying how to install it."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401  (a submodule that must be imported to be used)
    except ImportError:
        raise UserError("Reading parquet and Arrow files needs pyarrow, which is not "
                        "installed: pip install 'zyquo-tui[parquet]'.") from None
    return pyarrow


def _parquet_batches(path: Path):
    pyarrow = pyarrow_module()
    try:
        yield from pyarrow.parquet.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS)
    except (pyarrow.ArrowException, OSError) as error:
        raise SourceRowError(str(path), f"not a readable parquet file ({error})") from None


def _arrow_batches(path: Path):
    # The datasets library's cache files are Arrow streams; other tools write Arrow files.
    pyarrow = pyarrow_module()
    try:
        with pyarrow.memory_map(str(path)) as source:
            try:
                reader = pyarrow.ipc.open_stream(source)
            except pyarrow.ArrowInvalid:
                reader = pyarrow.ipc.open_file(source)
                yield from (reader.get_batch(i) for i in range(reader.num_record_batches))
                return
            yield from reader
    except (pyarrow.ArrowException, OSError) as error:
        raise SourceRowError(str(path), f"not a readable Arrow file ({error})") from None


def _table_rows(path: Path, batches) -> Iterator[tuple[Any, str]]:
    number = 0
    for batch in batches:
        for row in batch.to_pylist():
            number += 1
            yield row, f"{path}:row {number}"
