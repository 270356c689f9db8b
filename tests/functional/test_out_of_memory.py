"""Runs that run out of memory (docs/unattended.md): a step past the run's memory limit ends
the trainer as out of memory, the runner resumes the run from its last checkpoint one rung down
the ladder, and the run ends with the losses a run trained with those settings has. A death of
another cause never steps down.

The limit is set from the run's own measured peaks, on this machine, never from a fixed figure:
between the peak the stepped-down settings reach and a later step's peak of the original
settings, so the first run dies there, after a checkpoint, and the resumed one fits."""

from __future__ import annotations

import os
import signal
import textwrap

import pytest
from conftest import SAMPLE_DATA, hold_trainers_at, wait_until_held
from helpers import losses_by_iteration, make_run, stop_runs, wait_until_ended

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.processes.supervisor import Supervisor
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.runs.settings import SETTINGS
from zyquo_tui.core.store.store import RunStore

CHAT = SAMPLE_DATA / "chat"
# A checkpoint at every step, a report at every step (each with MLX's peak so far).
SMALL = dict(iters=8, batch_size=4, steps_per_report=1, save_every=1, steps_per_eval=100,
             val_batches=1, learning_rate=1e-3)


def own_run(model, store: RunStore, **own):
    """A run of SMALL with zyquo-tui's own settings `own` (memory_limit, micro_batches...)."""
    plain = {k: v for k, v in own.items() if not SETTINGS[k].own}
    store, run = make_run(model, CHAT, store=store, **{**SMALL, **plain})

    def set_own(r):
        for key, value in own.items():
            if SETTINGS[key].own:
                SETTINGS[key].set(r.hyperparameters, value)
    store.update(run.id, set_own)
    return store.get(run.id)


def to_the_end(store: RunStore, run_id: str, override_memory: bool = False):
    """The run started by a runner and waited for to its end (through any step down)."""
    supervisor = Supervisor(store)
    supervisor.start(run_id, override_memory=override_memory)
    try:
        return wait_until_ended(supervisor, run_id)
    finally:
        stop_runs(store, run_id)


def trained(model, store: RunStore, **own) -> list[dict]:
    """The events of a run of SMALL, started by a runner and followed to its end."""
    run = own_run(model, store, **own)
    # (A limit set below the run's peak on purpose: its memory verdict says so.)
    ended = to_the_end(store, run.id, override_memory="memory_limit" in own)
    assert ended.state is RunState.COMPLETED, ended.failure
    return read_events(store.events_path(run.id))


def limit_between(original: dict[int, int], lower_peak: int) -> int:
    """A limit above everything the stepped-down settings reach and the original's first
    step, halfway to the original's highest later peak: the original dies after its first
    checkpoint, the stepped-down run fits, each with half the gap to spare (MLX's peak moves a
    little from one run to the next, so which step passes it is read, not foretold)."""
    floor = max(lower_peak, original[1])
    highest = max(original.values())
    assert highest > floor, (f"the original settings never peak above {floor} bytes after "
                             f"step 1 ({original}): this data gives the ladder nothing to show")
    return (floor + highest) // 2


@pytest.mark.parametrize("original, stepped, rung", [
    ({}, {"grad_checkpoint": True}, ("grad_checkpoint", True)),
    # gradient checkpointing already on: the next rung, half the micro-batch
    ({"grad_checkpoint": True}, {"grad_checkpoint": True, "micro_batches": 2},
     ("micro_batches", 2)),
], ids=["grad-checkpoint", "micro-batches"])
def test_a_run_past_its_memory_limit_steps_down_and_trains_on_as_that_rung_would(
        tiny_model, original, stepped, rung):
    store = RunStore().ensure()
    straight = trained(tiny_model, store, **original)
    lower = trained(tiny_model, store, **stepped)
    peaks = losses_by_iteration(straight, "train", "peak_memory_bytes")
    limit = limit_between(peaks, max(losses_by_iteration(
        lower, "train", "peak_memory_bytes").values()))

    limited = trained(tiny_model, store, **original, memory_limit=limit)
    failed = [e for e in limited if e["type"] == "failed"]
    assert len(failed) == 1 and failed[0]["cause"] == "oom", failed
    dies_at = failed[0]["iteration"]
    assert dies_at > 1 and "memory_limit" in failed[0]["message"]  # after a checkpoint
    [down] = [e for e in limited if e["type"] == "step_down"]
    assert (down["setting"], down["value"], down["rung"]) == (*rung, 1)
    assert down["iteration"] == dies_at - 1  # its last checkpoint
    assert f"Resumed from step {dies_at - 1}" in down["message"]

    # What each step trained, as the run reports it at the end (a resumed run re-reports the
    # steps after its checkpoint): the stepped-down settings' losses, which are also the
    # original's (no rung changes what is learnt).
    got = losses_by_iteration(limited, "train", "train_loss")
    for reference in (losses_by_iteration(lower, "train", "train_loss"),
                      losses_by_iteration(straight, "train", "train_loss")):
        assert sorted(got) == sorted(reference)
        for step in reference:
            assert got[step] == pytest.approx(reference[step], abs=1e-5), step
    assert max(e["peak_memory_bytes"] for e in limited[limited.index(down):]
               if e["type"] == "train") <= limit


def test_with_no_rung_left_the_run_fails_saying_what_it_tried(tiny_model):
    store = RunStore().ensure()
    run = own_run(tiny_model, store, memory_limit="1MB")  # below the weights alone
    ended = to_the_end(store, run.id, override_memory=True)
    assert ended.state is RunState.FAILED and ended.failure["cause"] == "oom"
    assert [step["setting"] for step in ended.memory_steps] == [
        "grad_checkpoint", "micro_batches", "loss_chunk_tokens"]
    assert "ran out of memory again after 3 steps down the ladder" in ended.failure["message"]
    assert ended.failure["suggestion"]  # what would fit, from the advisor
    events = read_events(store.events_path(run.id))
    assert [e["rung"] for e in events if e["type"] == "step_down"] == [1, 2, 3]
    # The settings it ended with are the ladder's: a resume starts from there.
    hp = ended.hyperparameters
    assert hp.grad_checkpoint and SETTINGS["micro_batches"].get(hp) == 2
    assert SETTINGS["loss_chunk_tokens"].get(hp) == 256


def test_on_oom_stop_never_steps_down(tiny_model):
    store = RunStore().ensure()
    run = own_run(tiny_model, store, memory_limit="1MB", on_oom="stop")
    ended = to_the_end(store, run.id, override_memory=True)
    assert ended.state is RunState.FAILED and ended.failure["cause"] == "oom"
    assert ended.memory_steps == [] and not ended.hyperparameters.grad_checkpoint
    assert not [e for e in read_events(store.events_path(run.id)) if e["type"] == "step_down"]


def test_a_killed_trainer_never_steps_down(tiny_model, monkeypatch):
    store = RunStore().ensure()
    # A limit far above the run: a ladder was possible, and nothing says memory ran out.
    run = own_run(tiny_model, store, memory_limit="64GB")
    hold_trainers_at(monkeypatch, 2)
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    try:
        wait_until_held(store.run_dir(run.id))
        os.kill(supervisor.get(run.id).process["pid"], signal.SIGKILL)
        ended = wait_until_ended(supervisor, run.id)
    finally:
        stop_runs(store, run.id)
    assert ended.state is RunState.INTERRUPTED and ended.failure["cause"] == "killed"
    assert ended.memory_steps == []
    assert not [e for e in read_events(store.events_path(run.id)) if e["type"] == "step_down"]


def test_a_failing_reward_never_steps_down(tiny_model, tmp_path):
    rewards = tmp_path / "rewards.py"
    rewards.write_text(textwrap.dedent("""
        def broken(prompts, completions, answer, types=None):
            raise ZeroDivisionError("the reward divided by zero")
    """))
    store = RunStore().ensure()
    store, run = make_run(tiny_model, SAMPLE_DATA / "rl", store=store, iters=4, batch_size=2,
                          steps_per_report=1, save_every=1, val_batches=1)

    def grpo(r):
        for key, value in {"objective": "grpo", "reward_functions": [f"{rewards}:broken"],
                           "group_size": 2, "max_completion_tokens": 8,
                           "memory_limit": 64 << 30}.items():
            SETTINGS[key].set(r.hyperparameters, value)
    store.update(run.id, grpo)
    ended = to_the_end(store, run.id)
    assert ended.state is RunState.FAILED and ended.failure["cause"] == "reward"
    assert ended.memory_steps == []
    assert not [e for e in read_events(store.events_path(run.id)) if e["type"] == "step_down"]


def test_checkpoints_by_the_clock_come_between_those_by_the_step(tiny_model):
    store = RunStore().ensure()
    # save_every past the end: only the clock (a minute's millionth) saves before the last step
    events = trained(tiny_model, store, iters=4, save_every=100, save_every_minutes=1e-6)
    assert [e["iteration"] for e in events if e["type"] == "checkpoint"] == [1, 2, 3, 4]
    events = trained(tiny_model, store, iters=4, save_every=100)  # the default: 10 minutes
    assert [e["iteration"] for e in events if e["type"] == "checkpoint"] == [4]
