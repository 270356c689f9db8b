"""Where the files that ship beside the code live, in a checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _shipped(name: str) -> Path:
    # An installed wheel carries the folder inside the package; a checkout (or an editable
    # install) keeps it at the top level, beside the package.
    inside = _PACKAGE / name
    if inside.is_dir():
        return inside
    return _PACKAGE.parent / name


def styles_dir() -> Path:
    """The folder of .tcss files."""
    return _shipped("styles")


def sample_data_dir() -> Path:
    """The folder of sample datasets (one sub-folder per format)."""
    return _shipped("sample_data")
