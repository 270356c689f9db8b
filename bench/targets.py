"""A bench's targets as data: what was measured, the bound, whether it was met.

A bench that guards a target stated in docs prints its usual table and, given `--targets`,
one more line: `TARGETS` and a JSON list of its targets. bench/check_targets.py runs the
benches, reads those lines and says, target by target, which were met.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

MARKER = "TARGETS "


@dataclass
class Target:
    """One target: `measured` against `bound`, in `unit`; below the bound unless
    `at_least` (then at or above it)."""

    measure: str
    measured: float
    bound: float
    unit: str
    at_least: bool = False
    detail: str = ""

    @property
    def met(self) -> bool:
        return self.measured >= self.bound if self.at_least else self.measured < self.bound

    @property
    def bound_text(self) -> str:
        return f"{'>=' if self.at_least else '<'} {figure(self.bound, self.unit)}"


def figure(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "ms":
        return f"{value:.1f} ms"
    if unit == "%":
        return f"{value:.1f}%"
    if unit == "MiB":
        return f"{value:.0f} MiB"
    return f"{value:g} {unit}".rstrip()


def print_targets(targets: list[Target]) -> None:
    """The line bench/check_targets.py reads."""
    print(MARKER + json.dumps([asdict(t) for t in targets]), flush=True)


def read_targets(output: str) -> list[Target] | None:
    """The targets a bench printed, or None when it printed none."""
    for line in reversed(output.splitlines()):
        if line.startswith(MARKER):
            return [Target(**item) for item in json.loads(line[len(MARKER):])]
    return None
