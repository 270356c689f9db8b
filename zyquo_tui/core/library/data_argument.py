"""What a run's dataset argument (`--data`, a config's `data`, the form's dataset path) names,
as the dataset folder the trainer reads.

A folder with train.jsonl is itself. Two more things are converted into the store on first use
(core/library/dataset_conversion.py), so the trainer only ever reads mlx-lm's folders:

- parquet files (one file, or a folder with some at most three levels down, as the hub serves
  them), converted into
  $ZYQUO_HOME/datasets/converted/NAME-HASH (HASH from the source's path);
- a Hugging Face dataset id (ORG/NAME) already in the local Hugging Face cache
  (core/library/hf_dataset_cache.py), converted into $ZYQUO_HOME/datasets/ORG/NAME.

A conversion is made again when its source changed (the files' sizes and times, or the cached
revision), else reused. Anything else is given back as it is, for the draft's checks to judge.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.dataset_conversion import convert_dataset, converted_from
from zyquo_tui.core.library.hf_dataset_cache import (
    find_cached_dataset,
    hf_datasets_cache,
    looks_like_dataset_id,
)
from zyquo_tui.core.library.models import hf_hub_cache
from zyquo_tui.core.store.paths import zyquo_home

CONVERTED_FOLDER = "converted"


def resolve_data(data: str, home: Path | None = None) -> str:
    """The dataset folder `data` names (see the module docstring); UserError for a Hugging
    Face id that is not cached, or a source whose rows cannot be converted."""
    path = Path(data).expanduser()
    datasets = (home or zyquo_home()) / "datasets"
    if path.exists():
        if path.is_dir() and (path / "train.jsonl").is_file():
            return data
        parquet = _parquet_files(path)
        if not parquet:
            return data
        source = path.resolve()
        digest = hashlib.sha256(str(source).encode()).hexdigest()[:8]
        name = source.stem if source.is_file() else source.name
        fingerprint = json.dumps([[str(p.relative_to(source.parent)), p.stat().st_size,
                                   p.stat().st_mtime_ns] for p in parquet])
        return str(_converted(source, datasets / CONVERTED_FOLDER / f"{name}-{digest}",
                              fingerprint))
    if looks_like_dataset_id(data):
        cached = find_cached_dataset(data)
        if cached is None:
            raise UserError(f"{data} is not a dataset folder, and no Hugging Face dataset "
                            f"{data!r} is in the local caches ({hf_hub_cache()}, "
                            f"{hf_datasets_cache()}): download it once (`hf download "
                            f"--repo-type dataset {data}`), then give --data {data} again.")
        return str(_converted(cached.folder, datasets / data, cached.version,
                              {"dataset_id": data}))
    return data


# How deep parquet files are looked for: the hub's layouts go to CONFIG/SPLIT/0000.parquet,
# and a folder given by mistake (a home folder) must not be searched whole.
PARQUET_DEPTH = 3


def _parquet_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if path.suffix == ".parquet" else []
    found = [p for depth in range(PARQUET_DEPTH)
             for p in path.glob("/".join(["*"] * depth + ["*.parquet"]))]
    return sorted(p for p in found
                  if not any(part.startswith(".") for part in p.relative_to(path).parts))


def _converted(source: Path, folder: Path, fingerprint: str,
               note: dict | None = None) -> Path:
    """`folder` holding `source` converted: reused when made from the same fingerprint."""
    made = converted_from(folder)
    if made is not None and made.get("fingerprint") == fingerprint:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Converted beside its place and moved in whole, so no reader sees half a dataset.
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        convert_dataset(source, staging, note={**(note or {}), "fingerprint": fingerprint})
        if folder.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{folder.name}-old-", dir=folder.parent))
            folder.rename(old / folder.name)
            shutil.rmtree(old, ignore_errors=True)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
