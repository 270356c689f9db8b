"""A test-only hold: the trainer waits after a chosen step until the test lets it go on.

Tests that cancel, kill or otherwise interrupt a run part-way must find it still running when
they act, however fast a step is on the machine that runs them; a test that merely waited for
"step N" would race the trainer on a faster machine. So, and only for tests: with
ZYQUO_TEST_HOLD_AT_STEP=N in its environment, the trainer, once step N has trained and
reported (its `train` event written when N is a report step; its checkpoint not yet: it is
written after the stop check), creates HELD_FILE in the run folder and waits until
RELEASE_FILE appears there or a stop is asked for (SIGTERM or SIGINT: a cancel during the hold
is seen at once, and the run stops at step N with that step's checkpoint). A release left in
the folder keeps later sessions of the run from holding again.

Without the variable nothing here runs. In a distributed run only rank 0 holds: the other ranks
wait for it in the step's collectives, as they wait for a slow rank.

The same for a memory measurement (trainer/measure.py): with ZYQUO_TEST_HOLD_MEASURE=FOLDER it
writes its pid to FOLDER/measure.held before it measures and waits until FOLDER/measure.release
appears, so a test can act while a runner measures a completed run's config (a start that
wants the machine stops it: core/processes/machine_hold.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HOLD_STEP_ENV = "ZYQUO_TEST_HOLD_AT_STEP"
HELD_FILE = "test-hold.held"
RELEASE_FILE = "test-hold.release"
POLL_SECONDS = 0.02


def hold_step() -> int | None:
    """The step to hold after, when a test asked for one."""
    value = os.environ.get(HOLD_STEP_ENV, "").strip()
    return int(value) if value.isdigit() else None


def hold_after(step: int, run_dir: Path, stop) -> None:
    """Wait here when `step` is the test's step, until released or asked to stop."""
    if step != hold_step() or (run_dir / RELEASE_FILE).exists():
        return
    held = run_dir / f"{HELD_FILE}.tmp"
    held.write_text(f"{step}\n", encoding="utf-8")
    held.replace(run_dir / HELD_FILE)  # whole when it appears: the test reads the step
    # A SIGTERM's handler sets stop.requested: seen within one poll.
    while not stop.requested and not (run_dir / RELEASE_FILE).exists():
        time.sleep(POLL_SECONDS)
    (run_dir / HELD_FILE).unlink(missing_ok=True)


HOLD_MEASURE_ENV = "ZYQUO_TEST_HOLD_MEASURE"
MEASURE_HELD_FILE = "measure.held"
MEASURE_RELEASE_FILE = "measure.release"


def hold_measurement() -> None:
    """Wait here, before measuring, when a test asked for it, until released (or killed)."""
    folder = os.environ.get(HOLD_MEASURE_ENV, "").strip()
    if not folder or (Path(folder) / MEASURE_RELEASE_FILE).exists():
        return
    held = Path(folder) / f"{MEASURE_HELD_FILE}.tmp"
    held.write_text(f"{os.getpid()}\n", encoding="utf-8")
    held.replace(Path(folder) / MEASURE_HELD_FILE)
    while not (Path(folder) / MEASURE_RELEASE_FILE).exists():
        time.sleep(POLL_SECONDS)
