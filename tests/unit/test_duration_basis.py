"""Which finished run `plan`'s duration rests on: the nearest run this machine trained, never a
served Tinker session (its program sets its pace: data loading, sampling, its own pauses)."""

from __future__ import annotations

from test_dashboard_fixtures import T0, event, make, training_events, write_events
from test_memory import facts

from zyquo_tui.core.memory.duration import estimate_duration
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.store import RunStore

MODEL = "/models/zyquo-tiny"


def finished(store: RunStore, run_id: str, start: float, **fields) -> None:
    make(store, run_id, run_id, RunState.COMPLETED, iters=100, model=MODEL, **fields)
    write_events(store, run_id, training_events(100, 100, start=start)
                 + [event("completed", start + 60, iteration=100)])


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
