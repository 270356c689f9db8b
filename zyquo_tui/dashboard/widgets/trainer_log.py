"""TrainerLog: a run's trainer.log, tailed as it grows."""

from __future__ import annotations

import re
from pathlib import Path

from textual.widgets import Log

from zyquo_tui.core.store.logs import LogReader

TAIL_BYTES = 256 * 1024
MAX_LINES = 20_000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*(\x07|\x1b\\)")


class TrainerLog(Log):
    """The log's last 256 KiB on open (across a rotation), then whatever is appended. With
    follow on, the view stays at the end like `tail -f`; with it off, new lines arrive without
    moving the view."""

    DEFAULT_CSS = """
    TrainerLog { height: 1fr; }
    """

    def __init__(self, path: Path, *, id: str | None = None) -> None:
        super().__init__(max_lines=MAX_LINES, auto_scroll=True, id=id)
        self.path = path
        self.reader = LogReader(path, tail_bytes=TAIL_BYTES)  # follows it across rotations
        self._partial = ""

    def read_new(self) -> int:
        """Append what the log gained since the last read; returns the bytes read."""
        chunk = self.reader.read_new()
        if not chunk:
            return 0
        text = self._partial + _ANSI.sub("", chunk.decode("utf-8", errors="replace"))
        lines = text.replace("\r\n", "\n").split("\n")
        self._partial = lines.pop()
        if lines:
            self.write_lines(lines)
        return len(chunk)

    def on_unmount(self) -> None:
        self.reader.close()
