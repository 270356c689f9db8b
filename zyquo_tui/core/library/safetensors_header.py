"""Read the tensor table of .safetensors files without loading a single tensor.

A safetensors file starts with an 8-byte little-endian length N, then N bytes of JSON: one entry
per tensor name, `{"dtype": "BF16", "shape": [4096, 4096], "data_offsets": [begin, end]}`, plus
an optional `__metadata__` of strings. The tensor bytes follow. Reading the header costs one small
read per file, so a 70 GB model is described in milliseconds; the model list and the memory
estimator both build on this.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# The safetensors library refuses headers above 100 MB; a bigger one means a corrupt file.
MAX_HEADER_BYTES = 100 * 1024 * 1024

# Bits per element, for checking that a tensor's byte range fits its dtype and shape.
# Dtypes not listed here (new formats) are accepted and sized by their offsets alone.
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "U16": 16,
    "I16": 16,
    "F16": 16,
    "BF16": 16,
    "U32": 32,
    "I32": 32,
    "F32": 32,
    "U64": 64,
    "I64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}


class SafetensorsHeaderError(ValueError):
    """A file is not a readable safetensors file; the message names the file and the fault."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the header describes it: its dtype, shape and the bytes it takes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: Path

    @property
    def elements(self) -> int:
        """The number of stored elements (for packed quantized weights: packed words)."""
        return math.prod(self.shape)


@dataclass(frozen=True)
class TensorTable:
    """The tensors of one model (one file or all its shards), in file order, with totals."""

    tensors: tuple[TensorInfo, ...]
    metadata: dict[str, str]

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> TensorInfo:
        return self._by_name[name]

    def get(self, name: str) -> TensorInfo | None:
        return self._by_name.get(name)

    @property
    def _by_name(self) -> dict[str, TensorInfo]:
        # Built lazily and kept: frozen dataclasses cannot assign normally.
        table = self.__dict__.get("_index")
        if table is None:
            table = {tensor.name: tensor for tensor in self.tensors}
            object.__setattr__(self, "_index", table)
        return table

    @property
    def total_bytes(self) -> int:
        """Bytes of tensor data (what the weights take in memory once loaded)."""
        return sum(tensor.nbytes for tensor in self.tensors)

    @property
    def total_elements(self) -> int:
        """Stored elements; not the parameter count of a quantized model (see core.models)."""
        return sum(tensor.elements for tensor in self.tensors)

    def bytes_by_dtype(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for tensor in self.tensors:
            totals[tensor.dtype] = totals.get(tensor.dtype, 0) + tensor.nbytes
        return totals


def read_header(path: Path | str) -> TensorTable:
    """The tensor table of one .safetensors file. Raises SafetensorsHeaderError if unreadable."""
    path = Path(path)
    try:
        with open(path, "rb") as file:
            file_size = _file_size(file)
            prefix = file.read(8)
            if len(prefix) < 8:
                raise SafetensorsHeaderError(f"{path}: too short to be a safetensors file.")
            (header_length,) = struct.unpack("<Q", prefix)
            if header_length > MAX_HEADER_BYTES or 8 + header_length > file_size:
                raise SafetensorsHeaderError(
                    f"{path}: header length {header_length} does not fit the file "
                    f"({file_size} bytes); the file is truncated or not safetensors."
                )
            raw_header = file.read(header_length)
    except OSError as error:
        raise SafetensorsHeaderError(f"{path}: cannot read ({error.strerror}).") from None
    try:
        header = json.loads(raw_header)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SafetensorsHeaderError(f"{path}: the header is not valid JSON.") from None
    if not isinstance(header, dict):
        raise SafetensorsHeaderError(f"{path}: the header is not a JSON object.")
    data_size = file_size - 8 - header_length
    metadata = header.pop("__metadata__", None) or {}
    tensors = tuple(
        _tensor_info(path, name, entry, data_size) for name, entry in header.items()
    )
    return TensorTable(tensors=tensors, metadata=dict(metadata))


def read_headers(paths: Iterable[Path | str]) -> TensorTable:
    """One table for a model's shards (model-00001-of-00004.safetensors and the rest)."""
    tensors: list[TensorInfo] = []
    metadata: dict[str, str] = {}
    for path in sorted(Path(p) for p in paths):
        table = read_header(path)
        tensors.extend(table.tensors)
        metadata.update(table.metadata)
    return TensorTable(tensors=tuple(tensors), metadata=metadata)


def _file_size(file) -> int:
    file.seek(0, 2)
    size = file.tell()
    file.seek(0)
    return size


def _tensor_info(path: Path, name: str, entry: object, data_size: int) -> TensorInfo:
    try:
        dtype = entry["dtype"]  # type: ignore[index]
        shape = tuple(int(d) for d in entry["shape"])  # type: ignore[index]
        begin, end = (int(o) for o in entry["data_offsets"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        raise SafetensorsHeaderError(
            f"{path}: tensor {name!r} lacks a dtype, shape or data_offsets entry."
        ) from None
    if not isinstance(dtype, str) or any(d < 0 for d in shape):
        raise SafetensorsHeaderError(f"{path}: tensor {name!r} has a bad dtype or shape.")
    if not 0 <= begin <= end <= data_size:
        raise SafetensorsHeaderError(
            f"{path}: tensor {name!r} lies outside the file (bytes {begin}-{end} of "
            f"{data_size}); the file is truncated."
        )
    nbytes = end - begin
    bits = DTYPE_BITS.get(dtype)
    if bits is not None and nbytes != math.ceil(math.prod(shape) * bits / 8):
        raise SafetensorsHeaderError(
            f"{path}: tensor {name!r} takes {nbytes} bytes, but {dtype} {list(shape)} "
            "needs a different size."
        )
    return TensorInfo(name=name, dtype=dtype, shape=shape, nbytes=nbytes, file=path)
