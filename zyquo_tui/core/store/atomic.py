"""Crash-safe file writes and inter-process locks, shared by everything that writes the store."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from pathlib import Path
from typing import Any, Iterator

TEMP_MARK = ".tmp-"


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so a reader sees the old or the new file, never a mix.

    Temp file in the same folder, fsync, rename, fsync the folder: a crash at any point leaves
    the previous file intact (plus, at worst, a stray temp file that readers ignore).
    """
    temp = temp_sibling(path)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)


def temp_sibling(path: Path) -> Path:
    """A fresh name beside `path` that every reader of the store skips (it holds TEMP_MARK)."""
    return path.with_name(f"{path.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(3)}")


def write_json_atomic(path: Path, data: Any, *, compact: bool = False) -> None:
    """Indented for files people read (run.json); compact for caches read on every listing."""
    if compact:
        text = json.dumps(data, separators=(",", ":"))
    else:
        text = json.dumps(data, indent=2)
    write_atomic(path, text + "\n")


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a folder; the rename is still atomic
    finally:
        os.close(fd)


@contextlib.contextmanager
def file_lock(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """An exclusive advisory lock (flock) on `path`, held for the `with` block.

    Yields True when held. With blocking=False yields False at once if another process
    holds it. flock locks die with their process, so a crash never leaves a stale lock.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
