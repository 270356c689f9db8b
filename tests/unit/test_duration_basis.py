"""Which finished run `plan`'s duration rests on: the nearest run this machine trained, never a
served Tinker session (its program sets its pace: data loading, sampling, its own pauses), and
one of the planned run's objective before one of another."""

from __future__ import annotations

from test_dashboard_fixtures import T0, event, make, training_events, write_events
from test_memory import facts

import pytest

from zyquo_tui.core.memory.duration import distill_share, estimate_duration
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.store import RunStore

MODEL = "/models/zyquo-tiny"


def finished(store: RunStore, run_id: str, start: float, slower: float = 1.0,
             **fields) -> None:
    """A completed run of 100 steps at 1,800 tokens a second (`slower` times fewer)."""
    make(store, run_id, run_id, RunState.COMPLETED, iters=100, model=MODEL, **fields)
    events = training_events(100, 100, start=start)
    for train in (e for e in events if e["type"] == "train"):
        train["iterations_per_second"] /= slower
        train["tokens_per_second"] /= slower
    write_events(store, run_id, events + [event("completed", start + 60, iteration=100)])


def test_a_served_session_is_never_the_basis_of_a_runs_duration(tmp_path):
    store = RunStore(tmp_path).ensure()
    finished(store, "20251129-080000-000-aaaa", T0)
    # Later and on the same model, so the nearest but for being served.
    finished(store, "20251129-090000-000-bbbb", T0 + 3600,
             process={"served_by": "zyquo-tui serve"})
    hp = Hyperparameters.from_dict({"iters": 200, "batch_size": 4})
    planned = estimate_duration(store, MODEL, facts(), Method.LORA, hp, None, None)
    assert planned.basis["run_id"] == "20251129-080000-000-aaaa"

    store.update("20251129-080000-000-aaaa", lambda run: setattr(run, "state",
                                                                  RunState.FAILED))
    alone = estimate_duration(store, MODEL, facts(), Method.LORA, hp, None, None)
    assert alone.seconds is None and "no finished run" in alone.sentence()


DISTILL = {"objective": "distill", "teacher": "/models/teacher", "max_completion_tokens": 63}


def test_a_run_of_another_objective_is_the_basis_only_when_none_of_the_same_finished(tmp_path):
    """A distillation step also runs its teacher (on the sample model a distillation run
    trained 939 tokens a second where SFT trained 3,011): an SFT plan rests on the SFT
    run though the distillation finished later on the same model, and a distillation plan on
    the distillation. With the SFT run gone, the distillation's speed stands for SFT's with
    its teacher's share taken out."""
    store = RunStore(tmp_path).ensure()
    finished(store, "20251129-080000-000-aaaa", T0)
    finished(store, "20251129-090000-000-bbbb", T0 + 3600, slower=10.0, zyquo_tui=DISTILL)
    sft = Hyperparameters.from_dict({"iters": 200, "batch_size": 4})
    planned = estimate_duration(store, MODEL, facts(), Method.LORA, sft, None, None)
    assert planned.basis["run_id"] == "20251129-080000-000-aaaa"
    assert planned.basis["tokens_per_second"] == pytest.approx(1800, rel=0.01)
    distill = Hyperparameters.from_dict({"iters": 200, "batch_size": 4, "zyquo_tui": DISTILL})
    planned = estimate_duration(store, MODEL, facts(), Method.LORA, distill, None, None)
    assert planned.basis["run_id"] == "20251129-090000-000-bbbb"
    distilled = planned.basis["tokens_per_second"]
    assert distilled == pytest.approx(180, rel=0.01)

    store.update("20251129-080000-000-aaaa", lambda run: setattr(run, "state",
                                                                  RunState.FAILED))
    alone = estimate_duration(store, MODEL, facts(), Method.LORA, sft, None, None)
    assert alone.basis["run_id"] == "20251129-090000-000-bbbb"
    share = distill_share(distill, facts(), None, None)
    assert share < 1
    assert alone.basis["tokens_per_second"] == pytest.approx(distilled / share, rel=1e-3)
