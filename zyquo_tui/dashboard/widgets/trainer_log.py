"""TrainerLog: a run's trainer.log, tailed as it grows."""

from __future__ import annotations

import re
from pathlib import Path

from textual.widgets import Log

TAIL_BYTES = 256 * 1024
MAX_LINES = 20_000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*(\x07|\x1b\\)")


class TrainerLog(Log):
    """The log's last 256 KiB on open, then whatever is appended. With follow on, the view
    stays at the end like `tail -f`; with it off, new lines arrive without moving the view."""

    DEFAULT_CSS = """
    TrainerLog { height: 1fr; }
    """

    def __init__(self, path: Path, *, id: str | None = None) -> None:
        super().__init__(max_lines=MAX_LINES, auto_scroll=True, id=id)
        self.path = path
        self.read_offset = 0
        self._partial = ""

    def read_new(self) -> int:
        """Append what the file gained since the last read; returns the bytes read."""
        try:
            with open(self.path, "rb") as handle:
                size = handle.seek(0, 2)
                if size < self.read_offset:  # truncated or replaced: start again
                    self.read_offset = 0
                    self._partial = ""
                    self.clear()
                if self.read_offset == 0 and size > TAIL_BYTES:
                    self.read_offset = size - TAIL_BYTES
                    handle.seek(self.read_offset)
                    handle.readline()  # skip the cut line
                    self.read_offset = handle.tell()
                handle.seek(self.read_offset)
                chunk = handle.read()
        except FileNotFoundError:
            return 0
        if not chunk:
            return 0
        self.read_offset += len(chunk)
        text = self._partial + _ANSI.sub("", chunk.decode("utf-8", errors="replace"))
        lines = text.replace("\r\n", "\n").split("\n")
        self._partial = lines.pop()
        if lines:
            self.write_lines(lines)
        return len(chunk)
