"""A Hugging Face dataset already on this machine, found by its id (ORG/NAME) without the
network, in either of the two caches Hugging Face's tools fill:

- the hub cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub), where
  `hf download --repo-type dataset ORG/NAME` and `load_dataset` keep the repository's files:
  datasets--ORG--NAME/snapshots/REVISION, the revision refs/main names;
- the datasets library's cache ($HF_DATASETS_CACHE, else $HF_HOME/datasets, else
  ~/.cache/huggingface/datasets), where `load_dataset` keeps Arrow files:
  ORG___NAME/CONFIG/VERSION/HASH/NAME-SPLIT.arrow (the newest one, as load_dataset takes
  offline).

Nothing here opens a connection: a dataset in neither cache is reported as not cached.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from zyquo_tui.core.library.models import hf_hub_cache
from zyquo_tui.core.library.source_rows import ROW_SUFFIXES

HF_DATASET_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


@dataclass(frozen=True)
class CachedDataset:
    """Where a cached dataset's files are, and a version that changes when they do."""

    dataset_id: str
    folder: Path  # a snapshot folder, or one cached configuration's folder of Arrow files
    version: str  # the snapshot's revision, or the Arrow folder's CONFIG/VERSION/HASH


def looks_like_dataset_id(text: str) -> bool:
    """ORG/NAME, as the hub names datasets (a path that exists is never taken for one)."""
    return bool(HF_DATASET_ID.match(text)) and not Path(text).expanduser().exists()


def hf_datasets_cache() -> Path:
    """The datasets library's cache folder, by its own environment rules."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "datasets"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "huggingface" / "datasets"


def find_cached_dataset(dataset_id: str) -> CachedDataset | None:
    """The dataset's files in the hub cache, else in the datasets cache; None if in neither."""
    return _hub_snapshot(dataset_id) or _arrow_cache(dataset_id)


def _hub_snapshot(dataset_id: str) -> CachedDataset | None:
    repo = hf_hub_cache() / f"datasets--{dataset_id.replace('/', '--')}"
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    try:
        revision = (repo / "refs" / "main").read_text().strip()
    except OSError:
        revision = ""
    candidates = [snapshots / revision] if revision else []
    candidates += sorted((p for p in snapshots.iterdir() if p.is_dir()),
                         key=lambda p: p.stat().st_mtime, reverse=True)
    for snapshot in candidates:
        if snapshot.is_dir() and any(p.suffix in ROW_SUFFIXES for p in snapshot.rglob("*")):
            return CachedDataset(dataset_id, snapshot, snapshot.name)
    return None


def _snake_case(name: str) -> str:
    # The datasets library's camelcase_to_snakecase, which names its cache folders.
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z\d])([A-Z])", r"\1_\2", name).lower()


def _arrow_cache(dataset_id: str) -> CachedDataset | None:
    org, name = dataset_id.split("/", 1)
    root = hf_datasets_cache() / f"{org}___{_snake_case(name)}"
    prepared = [folder for folder in root.glob("*/*/*")
                if folder.is_dir() and (folder / "dataset_info.json").is_file()
                and any(folder.glob("*.arrow"))]
    if not prepared:
        return None
    newest = max(prepared, key=lambda folder: (folder / "dataset_info.json").stat().st_mtime)
    return CachedDataset(dataset_id, newest, str(newest.relative_to(root)))
