"""Finding the folders that hold something (a model, a dataset) below a root folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def find_folders(root: Path, matches: Callable[[Path], bool],
                 max_depth: int) -> list[tuple[Path, str]]:
    """The folders at or below `root` (at most `max_depth` levels down) that `matches`,
    each with its path relative to `root` as its name (the root's own name for the root).

    A folder that matches is not searched further; hidden folders (`.`, `__`) are skipped,
    and a folder reached twice through links is searched once. An unreadable folder is
    passed over: searching never fails.
    """
    if matches(root):
        return [(root, root.name)]
    found: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    pending = [(root, 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            children = sorted(p for p in folder.iterdir() if p.is_dir())
        except OSError:
            continue
        for child in children:
            if child.name.startswith((".", "__")):
                continue
            key = resolved(child)
            if key in seen:
                continue
            seen.add(key)
            if matches(child):
                found.append((child, child.relative_to(root).as_posix()))
            elif depth + 1 < max_depth:
                pending.append((child, depth + 1))
    return found


def resolved(path: Path) -> Path:
    """The path with its links followed (as given, made absolute, if they cannot be)."""
    try:
        return path.resolve()
    except OSError:
        return path.absolute()
