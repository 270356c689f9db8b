"""TrainerFailure: why training cannot go on, raised anywhere in the trainer and written by the
session as the `failed` event (a cause of core/runs/failures.py and one sentence)."""

from __future__ import annotations

from zyquo_tui.core.runs.failures import Failure, failure


class TrainerFailure(Exception):
    """Training cannot go on; carries the cause and the sentence for the `failed` event."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def fail(cause: str, message: str, suggestion: str | None = None) -> TrainerFailure:
    return TrainerFailure(failure(cause, message, suggestion))
