"""Printing for the CLI: JSON for scripts, aligned plain tables for people."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Sequence


def print_json(data: Any) -> None:
    """Indented for a person at a terminal, compact (and faster) for a pipe or a script."""
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(data, indent=indent, default=str) + "\n")


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    rows = [["" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers).rstrip())
    for row in rows:
        print(line.format(*row).rstrip())


def fmt_loss(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def fmt_bytes(value: int | None) -> str:
    if value is None:
        return "?"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"
