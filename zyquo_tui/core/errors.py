"""Errors a user can cause, carried up to the CLI or the dashboard as one clear sentence."""

from __future__ import annotations

# Exit statuses of the CLI, documented in README.md.
EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (invalid data, a run that failed, won't fit)
EXIT_USAGE = 2  # bad input: nothing was changed


class UserError(Exception):
    """Something the user asked for cannot be done; the message says what, where and what to do.

    The CLI prints the message on stderr as one sentence and exits with `exit_status`;
    the dashboard shows it as a notification. Never a traceback.
    """

    def __init__(self, message: str, exit_status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_status = exit_status

    def __str__(self) -> str:
        return self.message
