"""Run a helper subprocess (token counting, a memory measurement) that the caller can stop.

The dashboard runs these from worker threads; when the screen that asked closes, its worker
is cancelled, and the child must not keep a core busy for minutes after that. So the wait
polls `cancelled()` every 0.1 s and kills the child when it says so, or at the deadline.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError

POLL_SECONDS = 0.1


def run_child(command: list[str], *, input_text: str | None = None, timeout: float,
              cancelled: Callable[[], bool] | None = None, what: str = "The measurement",
              timeout_hint: str = "try something smaller") -> tuple[int, str, str]:
    """Run `command` to its end: (exit status, stdout, stderr).

    Raises UserError when `cancelled()` turns true or past `timeout` seconds (`what` and
    `timeout_hint` make its sentence); the child is killed either way.
    """
    # stdin is a pipe or /dev/null, never the terminal: a child that inherits it fights
    # Textual for keystrokes.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL if input_text is None else subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + timeout
    pending = input_text  # communicate() takes the input once; its retries lose no output
    try:
        while True:
            try:
                stdout, stderr = process.communicate(pending, timeout=POLL_SECONDS)
                return process.returncode, stdout, stderr
            except subprocess.TimeoutExpired:
                pending = None
                if cancelled is not None and cancelled():
                    raise UserError(f"{what} was cancelled.", EXIT_PROBLEMS) from None
                if time.monotonic() > deadline:
                    raise UserError(f"{what} took over {timeout:.0f} s and was stopped; "
                                    f"{timeout_hint}.", EXIT_PROBLEMS) from None
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
