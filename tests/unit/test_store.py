"""The run store: atomic records, concurrent updates, damaged runs, partial event lines."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.events.protocol import EventReader, EventWriter, read_events
from zyquo_tui.core.runs.run import InvalidTransition, Run, RunState, new_run_id
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store import atomic
from zyquo_tui.core.store.store import DamagedRun, RunStore


def new_run(store: RunStore, **kw) -> Run:
    return store.create(Run.new(model="/models/m", data="/data/d", **kw))


def test_the_store_is_created_private_under_zyquo_home(isolated_home):
    store = RunStore().ensure()
    assert store.home == isolated_home
    assert stat.S_IMODE(os.stat(isolated_home).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(isolated_home / "runs").st_mode) == 0o700


def test_a_run_round_trips_through_run_json():
    store = RunStore().ensure()
    run = new_run(store, method=Method.DORA, name="free text: ünïcode & spaces")
    loaded = store.get(run.id)
    assert loaded == run
    data = json.loads((store.run_dir(run.id) / "run.json").read_text())
    assert data["schema_version"] == 1 and data["method"] == "dora"


def test_run_ids_sort_by_creation_time():
    ids = [new_run_id(now=t) for t in (1700000000.001, 1700000000.002, 1700000001.5,
                                        1800000000.0)]
    assert ids == sorted(ids)
    store = RunStore().ensure()
    made = [new_run(store).id for _ in range(5)]
    assert [r.id for r in store.list()] == sorted(made)


def test_run_ids_made_in_one_millisecond_still_sort_in_the_order_they_were_made(monkeypatch):
    """A loop on a fast machine makes several runs within a millisecond: each takes the next
    millisecond, so listing order is creation order (it was the random suffix's)."""
    from zyquo_tui.core.runs import run as run_module

    monkeypatch.setattr(run_module.time, "time", lambda: 1800000000.0)
    ids = [new_run_id() for _ in range(50)]
    assert ids == sorted(ids) and len({i.rsplit("-", 1)[0] for i in ids}) == 50
    store = RunStore().ensure()
    made = [new_run(store).id for _ in range(5)]
    assert [r.id for r in store.list()] == made


def test_a_crash_between_write_and_rename_leaves_the_old_record(monkeypatch):
    store = RunStore().ensure()
    run = new_run(store, name="before")

    def crash(*args):
        raise OSError("power cut")
    monkeypatch.setattr(atomic.os, "replace", crash)
    with pytest.raises(OSError):
        store.update(run.id, lambda r: setattr(r, "name", "after"))
    monkeypatch.undo()
    assert store.get(run.id).name == "before"
    assert [p.name for p in store.run_dir(run.id).iterdir() if ".tmp-" in p.name] == []


def test_leftover_temp_files_from_a_crash_are_ignored():
    store = RunStore().ensure()
    run = new_run(store)
    (store.run_dir(run.id) / "run.json.tmp-123-abc").write_text("{half")
    (store.runs_root / "run.json.tmp-9-x").write_text("junk")
    assert [r.id for r in store.list()] == [run.id]
    assert store.get(run.id) == run


def _bump(home: str, run_id: str, times: int) -> None:
    store = RunStore(Path(home))
    for _ in range(times):
        store.update(run_id, lambda r: r.summary.__setitem__("count",
                                                             r.summary.get("count", 0) + 1))


def test_two_processes_updating_one_run_lose_no_update(isolated_home):
    store = RunStore().ensure()
    run = new_run(store)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_bump, args=(str(isolated_home), run.id, 100))
               for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert store.get(run.id).summary["count"] == 200


def _create_runs(home: str, count: int) -> None:
    store = RunStore(Path(home))
    for _ in range(count):
        new_run(store)


def test_a_run_being_created_is_never_listed_half_made(isolated_home):
    """Another process listing the store (the dashboard's poll, a CLI) while runs are created
    sees each run whole or not at all, never a folder without its run.json."""
    store = RunStore().ensure()
    writer = multiprocessing.get_context("spawn").Process(
        target=_create_runs, args=(str(isolated_home), 150))
    writer.start()
    half_made = []
    try:
        while writer.is_alive():
            half_made += [record.reason for record in store.list()
                          if isinstance(record, DamagedRun)]
    finally:
        writer.join(60)
    assert writer.exitcode == 0
    assert len(store.list()) == 150
    assert half_made == []


@pytest.mark.parametrize("content, reason", [
    ('{"schema_version": 1, "id": "x"', "not valid JSON"),
    ("", "empty"),
    ("[1, 2]", "wrong shape"),
    ('{"schema_version": 99}', "schema_version 99"),
    ('{"schema_version": 1, "id": "ID", "name": "n", "method": "lora"}', "missing"),
    ('{"schema_version": 1, "id": "ID", "name": "n", "method": "magic", "model": "m",'
     ' "data": "d", "state": "configured"}', "magic"),
])
def test_a_damaged_record_is_listed_with_its_reason_and_kept(content, reason):
    store = RunStore().ensure()
    good = new_run(store)
    bad = new_run(store)
    path = store.run_dir(bad.id) / "run.json"
    path.write_text(content.replace("ID", bad.id))
    listing = store.list()
    assert [type(item) for item in listing] == [Run, DamagedRun]
    assert listing[0] == good
    assert reason in listing[1].reason
    with pytest.raises(UserError, match="damaged"):
        store.get(bad.id)
    assert path.read_text() == content.replace("ID", bad.id), "nothing is deleted or rewritten"


def test_a_file_where_the_runs_folder_should_be_is_a_clear_error(isolated_home):
    isolated_home.mkdir(exist_ok=True)
    (isolated_home / "runs").write_text("oops")
    with pytest.raises(UserError, match="is a file"):
        RunStore().ensure()
    with pytest.raises(UserError, match="is a file"):
        RunStore().list()


def test_state_transitions_follow_the_lifecycle():
    run = Run.new(model="m", data="d")
    for state in (RunState.QUEUED, RunState.STARTING, RunState.RUNNING, RunState.CANCELLED,
                  RunState.STARTING, RunState.RUNNING, RunState.COMPLETED):
        run.set_state(state)
    with pytest.raises(InvalidTransition):
        run.set_state(RunState.RUNNING)
    fresh = Run.new(model="m", data="d")
    with pytest.raises(InvalidTransition):
        fresh.set_state(RunState.COMPLETED)
    assert RunState.INTERRUPTED.can_resume and not RunState.COMPLETED.can_resume


@pytest.mark.parametrize("change, message", [
    ({"batch_size": 0}, "batch_size must be at least 1, not 0."),
    ({"learning_rate": -1e-5}, "learning_rate must be greater than 0, not -1e-05."),
    ({"lora_parameters": {"rank": 0, "scale": 20.0, "dropout": 0.0}},
     "rank (lora_parameters.rank) must be at least 1, not 0."),
    ({"optimizer": "adamax"}, "optimizer 'adamax' is unknown; choose one of adam, adamw, muon, "
                              "sgd, adafactor."),
    ({"iters": 2.5}, "iters must be a whole number, not 2.5."),
    ({"num_layers": -2}, "num_layers must be at least 1 (or -1), not -2."),
])
def test_each_bad_hyperparameter_gets_one_clear_sentence(change, message):
    problems = Hyperparameters.from_dict(change).problems(Method.LORA)
    assert [p.sentence for p in problems if p.is_error] == [message]


def test_save_every_larger_than_iters_is_only_a_warning():
    problems = Hyperparameters(iters=50, save_every=100).problems(Method.LORA)
    assert not any(p.is_error for p in problems)
    assert any("save_every (100) is larger than iters (50)" in p.sentence for p in problems)


def test_defaults_are_mlx_lm_defaults():
    hp = Hyperparameters()
    assert (hp.optimizer, hp.num_layers, hp.batch_size, hp.iters, hp.val_batches,
            hp.learning_rate, hp.steps_per_report, hp.steps_per_eval, hp.save_every,
            hp.max_seq_length, hp.grad_accumulation_steps, hp.seed) == (
        "adam", 16, 4, 1000, 25, 1e-5, 10, 200, 100, 2048, 1, 0)
    assert hp.lora_parameters == {"rank": 8, "dropout": 0.0, "scale": 20.0}


def test_event_readers_leave_a_partial_last_line_for_later(tmp_path):
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    writer.write("train", iteration=1, train_loss=2.0)
    writer.close()
    with open(path, "a") as handle:
        handle.write('{"v": 1, "type": "train", "iteration": 2, "train_lo')
    reader = EventReader(path)
    assert [e["iteration"] for e in reader.read_new()] == [1]
    assert read_events(path)[-1]["iteration"] == 1
    with open(path, "a") as handle:
        handle.write('ss": 1.5, "time": 1.0}\n')
    assert [e["iteration"] for e in reader.read_new()] == [2]
    assert reader.read_new() == []


def test_event_readers_skip_garbage_and_keep_unknown_types_and_fields(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('not json\n[1]\n{"v": 2, "type": "future", "x": 1}\n'
                    '{"v": 1, "type": "val", "iteration": 3, "val_loss": 1.0, "new": true}\n')
    reader = EventReader(path)
    events = reader.read_new()
    assert [e["type"] for e in events] == ["future", "val"]
    assert reader.skipped_lines == 2


def test_the_listing_cache_never_serves_a_stale_row():
    from zyquo_tui.core.store.index import INDEX_FILE, listing_rows

    store = RunStore().ensure()
    runs = [new_run(store, name=f"run {i}") for i in range(3)]
    assert [r["name"] for r in listing_rows(store)] == ["run 0", "run 1", "run 2"]
    assert (store.runs_root / INDEX_FILE).is_file()
    store.update(runs[1].id, lambda r: setattr(r, "name", "renamed"))
    (store.run_dir(runs[2].id) / "run.json").write_text("{broken")
    rows = listing_rows(store)
    assert [r["name"] for r in rows[:2]] == ["run 0", "renamed"]
    assert rows[2]["state"] == "damaged"
    store.delete(runs[0].id)
    (store.runs_root / INDEX_FILE).write_text("not json at all")
    assert [r["id"] for r in listing_rows(store)] == [runs[1].id, runs[2].id]
