"""The runs listing index (core/store/index.py): rows kept as the JSON text `runs list --json`
prints, trusted only when their run.json is unchanged and the file is of this version."""

from __future__ import annotations

import json

from zyquo_tui.cli.main import main
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import Hyperparameters
from zyquo_tui.core.store.index import (
    INDEX_FILE,
    INDEX_VERSION,
    LIVE_STATES,
    listing_entries,
    listing_rows,
)
from zyquo_tui.core.store.store import RunStore


def stored_run(store: RunStore, name: str) -> Run:
    run = Run.new(model="/models/tiny", data="/data/sums", name=name,
                  hyperparameters=Hyperparameters(iters=100))
    run.state = RunState.COMPLETED
    run.summary = {"step": 100, "last_train_loss": 1.25}
    return store.create(run)


def test_a_row_whose_run_json_is_unchanged_is_served_from_the_index():
    store = RunStore().ensure()
    stored_run(store, "first")
    listing_rows(store)
    index = store.runs_root / INDEX_FILE
    index.write_text(index.read_text().replace('"name": "first"', '"name": "from the index"'))
    assert listing_rows(store)[0]["name"] == "from the index"


def test_an_index_of_an_earlier_version_is_rebuilt_from_the_run_records():
    store = RunStore().ensure()
    stored_run(store, "first")
    listing_rows(store)
    index = store.runs_root / INDEX_FILE
    written = index.read_text()
    header = f"zyquo-tui runs index {INDEX_VERSION}\n"
    assert written.startswith(header)
    index.write_text(written.replace(header, f"zyquo-tui runs index {INDEX_VERSION - 1}\n")
                     .replace('"name": "first"', '"name": "from the index"'))
    (store.runs_root / ".index.json").write_text('{"version": 2, "rows": {}}')  # the old file
    assert listing_rows(store)[0]["name"] == "first"
    assert index.read_text() == written
    assert not (store.runs_root / ".index.json").exists()


def test_a_run_changed_since_the_index_was_written_is_read_again():
    store = RunStore().ensure()
    runs = [stored_run(store, f"run {i}") for i in range(3)]
    listing_rows(store)
    store.update(runs[1].id, lambda r: setattr(r, "name", "renamed"))
    assert [e.id for e in listing_entries(store)] == [r.id for r in runs]
    assert [r["name"] for r in listing_rows(store)] == ["run 0", "renamed", "run 2"]
    assert '"name": "renamed"' in (store.runs_root / INDEX_FILE).read_text()


def test_the_live_states_are_the_run_states_a_listing_asks_about():
    assert LIVE_STATES == {RunState.STARTING.value, RunState.RUNNING.value}


def test_runs_list_json_prints_the_index_rows_with_their_queue_position(capsys):
    store = RunStore().ensure()
    runs = [stored_run(store, f"run {i}") for i in range(2)]
    assert main(["runs", "list", "--json"]) == 0  # writes the index
    first = capsys.readouterr().out
    assert main(["runs", "list", "--json"]) == 0  # served from it
    second = capsys.readouterr().out
    assert first == second
    printed = json.loads(second)
    assert printed == [{**row, "queue_position": None, "waiting_for": None}
                       for row in listing_rows(store)]
    assert [r["id"] for r in printed] == [r.id for r in runs]
