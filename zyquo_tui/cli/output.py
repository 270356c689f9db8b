"""Printing for the CLI: JSON for scripts, aligned plain tables for people."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Sequence

from zyquo_tui.core.formatting import fmt_bytes, fmt_loss  # noqa: F401  (one way to write figures, everywhere)


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
