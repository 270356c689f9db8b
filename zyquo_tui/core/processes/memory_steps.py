"""The runner's answer to a run that ran out of memory (core/runs/out_of_memory.py has the
ladder): one rung down and a resume from its last checkpoint, or, with `on_oom` stop or no rung
left, the failure kept with what would fit.

A death of any other cause (a reward that failed, a kill by a user, bad data) never gets here:
only a failure whose cause is `oom` does, as the trainer recorded it or as the runner
classified a trainer that died without a word (core/runs/failures.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.runs.out_of_memory import MAX_STEPS, STEP_DOWN, next_rung, step_down
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import SETTINGS
from zyquo_tui.core.store.checkpoints import list_checkpoints
from zyquo_tui.core.store.store import RunStore


def ran_out_of_memory(run: Run) -> bool:
    return (run.state in (RunState.FAILED, RunState.INTERRUPTED) and not run.served
            and (run.failure or {}).get("cause") == "oom")


@dataclass
class SteppedDown:
    """A run made ready to resume one rung down: what its `step_down` event says."""

    step: int | None
    rung: int
    setting: str
    value: Any
    change: str
    message: str

    def write_event(self, path: Path) -> None:
        writer = ev.EventWriter(path)
        writer.write(ev.STEP_DOWN, iteration=self.step, rung=self.rung, setting=self.setting,
                     value=self.value, change=self.change, message=self.message)
        writer.close()


def step_down_after_oom(run: Run, adapters: Path) -> SteppedDown | None:
    """Called under the run's lock as its end is recorded: a run out of memory, with a rung
    left and `on_oom` step-down, is changed to resume one rung down from its last checkpoint
    (state starting, so followers know it goes on); None leaves it as it ended."""
    if not ran_out_of_memory(run):
        return None
    taken = [step["setting"] for step in run.memory_steps]
    if SETTINGS["on_oom"].get(run.hyperparameters) != STEP_DOWN:
        return None
    rung = next_rung(run.hyperparameters, taken, run.summary.get("loss_chunk_tokens"))
    if rung is None:
        return None
    resumable = [c.step for c in list_checkpoints(adapters) if c.resumable]
    step = resumable[-1] if resumable else None
    number = len(taken) + 1
    where = f"from step {step}" if step is not None else "from the start (no checkpoint yet)"
    failure = (run.failure or {}).get("message", "")
    message = (f"Out of memory: {failure} Resumed {where} with {rung.sentence} (step {number} "
               f"of at most {MAX_STEPS} down the ladder).")
    run.memory_steps = [*run.memory_steps, {**rung.to_dict(), "rung": number, "from_step": step,
                                            "failure": failure, "at": time.time()}]
    run.hyperparameters = step_down(run.hyperparameters, rung)
    run.resume_from_step = step
    run.failure = None
    run.set_state(RunState.STARTING)
    return SteppedDown(step, number, rung.setting, rung.value, rung.sentence, message)


def explain_failure(store: RunStore, run: Run, machine_limit: int | None) -> None:
    """A run out of memory for good (on_oom stop, or no rung left): its failure, changed in
    place, gets what would fit as the suggestion and, after the ladder, the steps it took.
    Called in the update that records the end, so no follower sees the failure without it."""
    if not ran_out_of_memory(run):
        return
    from zyquo_tui.core.memory.advisor import MemoryAdvisor, what_would_fit_after_oom

    steps = "; ".join(step["change"] for step in run.memory_steps)
    after = (f" It ran out of memory again after {len(run.memory_steps)} step"
             f"{'s' if len(run.memory_steps) > 1 else ''} down the ladder ({steps})."
             if steps else "")
    run.failure = {**(run.failure or {}), "message": (run.failure or {}).get("message", "") + after}
    advisor = MemoryAdvisor.for_machine(store.home).within(run.hyperparameters, machine_limit)
    run.failure["suggestion"] = what_would_fit_after_oom(run, advisor)
