"""Problems: why a run cannot train as set up, or what it will do that the user may not expect.

Every check of a run's settings (core/runs/settings.py, core/library/run_checks.py) returns these, so
whoever shows them needs no parsing: the new-run form marks the field named by `key`, the CLI
prints the first error's sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"  # the run cannot train this way
WARNING = "warning"  # it can, but probably not as the user expects


@dataclass(frozen=True)
class Problem:
    """One problem: the setting (or control) it is about, one sentence, and its severity.

    `key` is a setting's key (core/runs/settings.py SETTINGS), or "method", "model" or
    "dataset" for a problem with those choices.
    """

    key: str
    sentence: str
    severity: str = ERROR

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR


def errors_in(problems: list[Problem]) -> list[Problem]:
    return [problem for problem in problems if problem.is_error]


def warnings_in(problems: list[Problem]) -> list[Problem]:
    return [problem for problem in problems if not problem.is_error]
