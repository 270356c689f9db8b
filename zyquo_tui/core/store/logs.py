"""Bounded logs: trainer.log, runner.log and serve.log rotate at a size, and readers read across rotations.

`trainer.log` is the newest file, `trainer.log.1` the one before it, up to `trainer.log.N`
(N = config.toml `[logs] backups`); the oldest is dropped. The writer rotates by renaming
(`.N-1` to `.N`, ..., the log to `.1`) and goes on in a new file: the trainer does it between
steps, for its own output (trainer/session.py), the supervisor before a runner starts, and
the Tinker server as it starts, for its own output. A reader keeps its file open, so a rename
never costs it a line: it reads the old file to its end, then the new one from its start.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

SERVE_LOG = "serve.log"  # the Tinker server's output in the store (detached or launchd)


def rotated(path: Path, number: int) -> Path:
    return path.with_name(f"{path.name}.{number}")


def older_files(path: Path) -> list[Path]:
    """The rotated files of a log that exist, oldest first."""
    pattern = re.compile(re.escape(path.name) + r"\.(\d+)$")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    numbered = [(int(m.group(1)), name) for name in names if (m := pattern.match(name))]
    return [path.with_name(name) for _, name in sorted(numbered, reverse=True)]


def log_files(path: Path) -> list[Path]:
    """Every file of a log, oldest first, the current one last (when it exists)."""
    return older_files(path) + ([path] if path.exists() else [])


def rotate(path: Path, backups: int) -> None:
    """Shift the rotated files up by one (dropping those past `backups`) and move the log to
    `.1`; the writer then opens a new file at `path`."""
    for old in older_files(path):
        number = int(old.name.rsplit(".", 1)[1])
        if number >= backups:
            old.unlink(missing_ok=True)
    for number in range(backups - 1, 0, -1):
        source = rotated(path, number)
        if source.exists():
            os.replace(source, rotated(path, number + 1))
    if path.exists():
        os.replace(path, rotated(path, 1))


def rotate_if_large(path: Path, max_bytes: int, backups: int) -> bool:
    """Rotate when the log has reached `max_bytes`; True when it did."""
    try:
        if path.stat().st_size < max_bytes:
            return False
    except FileNotFoundError:
        return False
    rotate(path, backups)
    return True


def rotate_own_output_if_large(path: Path, max_bytes: int, backups: int) -> bool:
    """Rotate the log this process's stdout and stderr write to, when it has reached
    `max_bytes`, and write on in a new file at `path`; True when it did.

    For a process whose output file was opened by whoever started it (launchd's
    StandardOutPath, a detached server's serve.log): renaming alone would leave the process
    writing into the renamed file, so its stdout and stderr are pointed at the new one.
    Nothing happens when neither writes to `path`."""
    try:
        log = path.stat()
    except OSError:
        return False
    if log.st_size < max_bytes:
        return False
    ours = []
    for descriptor in (1, 2):
        try:
            written = os.fstat(descriptor)
        except OSError:
            continue
        if (written.st_dev, written.st_ino) == (log.st_dev, log.st_ino):
            ours.append(descriptor)
    if not ours:
        return False
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    rotate(path, backups)
    fresh = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for descriptor in ours:
            os.dup2(fresh, descriptor)
    finally:
        os.close(fresh)
    return True


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


class LogReader:
    """Reads a log as it grows, across its rotations.

    The first read returns what the log holds (every file, oldest first; only the last
    `tail_bytes` of them when given, from a whole line), later reads what was appended since.
    """

    def __init__(self, path: Path, tail_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.tail_bytes = tail_bytes
        self._handle = None

    def read_new(self) -> bytes:
        if self._handle is None:
            return self._first_read()
        chunk = self._handle.read()
        current = _inode(self.path)
        pinned = os.fstat(self._handle.fileno()).st_ino
        if current is not None and current != pinned:
            # Rotated: the rest of the old file was read just above. Files rotated after it
            # (more than one rotation since the last read) come next, then the new log.
            try:
                handle = open(self.path, "rb")  # noqa: SIM115 (kept open across reads)
            except FileNotFoundError:
                return chunk
            older = older_files(self.path)
            inodes = [_inode(path) for path in older]
            newer = older[inodes.index(pinned) + 1:] if pinned in inodes else older
            for path in newer:
                if _inode(path) != current:
                    try:
                        chunk += path.read_bytes()
                    except FileNotFoundError:
                        pass
            self._handle.close()
            self._handle = handle
            chunk += handle.read()
        elif os.fstat(self._handle.fileno()).st_size < self._handle.tell():
            self._handle.seek(0)  # truncated in place: read it again from its start
            chunk += self._handle.read()
        return chunk

    def _first_read(self) -> bytes:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 (kept open across reads)
        except FileNotFoundError:
            return b""  # not written yet (or between a rename and the new file): try later
        self._handle = handle
        pinned = os.fstat(handle.fileno()).st_ino
        older = [p for p in older_files(self.path) if _inode(p) != pinned]
        if self.tail_bytes is None:
            parts = []
            for path in older:
                try:
                    parts.append(path.read_bytes())
                except FileNotFoundError:
                    pass
            return b"".join(parts) + handle.read()
        return self._tail(older, handle)

    def _tail(self, older: list[Path], handle) -> bytes:
        """The last `tail_bytes` of the older files and the open one, from a whole line."""
        wanted = self.tail_bytes or 0
        size = handle.seek(0, os.SEEK_END)
        start = max(0, size - wanted)
        handle.seek(start)
        parts = [handle.read()]
        cut = start > 0
        need = wanted - len(parts[0])
        for path in reversed(older):
            if need <= 0:
                break
            try:
                with open(path, "rb") as old:
                    old_size = old.seek(0, os.SEEK_END)
                    old.seek(max(0, old_size - need))
                    parts.insert(0, old.read())
                    cut = old_size > need
            except FileNotFoundError:
                continue
            need -= len(parts[0])
        data = b"".join(parts)
        if cut:
            newline = data.find(b"\n")
            data = data[newline + 1:] if newline >= 0 else b""
        return data

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def read_tail(path: Path, size: int) -> str:
    """The log's last `size` bytes, across a rotation (for the cause of a trainer's end)."""
    reader = LogReader(path, tail_bytes=size)
    try:
        return reader.read_new().decode("utf-8", errors="replace")
    finally:
        reader.close()
