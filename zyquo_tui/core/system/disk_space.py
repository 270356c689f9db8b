"""Free space on the disk that holds a path (the store's, for the disk verdict and the floor)."""

from __future__ import annotations

import os
from pathlib import Path


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem of `path` (statvfs
    f_bavail), asked of its nearest existing folder; None when it cannot be read."""
    path = Path(path)
    for candidate in (path, *path.parents):
        try:
            stats = os.statvfs(candidate)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        return stats.f_bavail * stats.f_frsize
    return None
