"""A grpo run's mean reward where a loss would be: `runs list` and the listing rows it reads
(run.json's summary `reward_mean`), marked as a reward (`r 0.62`)."""

from __future__ import annotations

import math

from zyquo_tui.cli.main import main
from zyquo_tui.core.formatting import fmt_reward
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method
from zyquo_tui.core.store.index import INDEX_FILE, INDEX_VERSION, listing_rows
from zyquo_tui.core.store.store import RunStore


def stored_run(store: RunStore, name: str, objective: str, summary: dict) -> Run:
    hp = Hyperparameters(iters=100)
    SETTINGS["objective"].set(hp, objective)
    run = Run.new(model="/models/tiny", data="/data/sums", method=Method.LORA, name=name,
                  hyperparameters=hp)
    run.state = RunState.COMPLETED
    run.summary = summary
    store.create(run)
    return run


def test_a_reward_is_written_in_six_characters_marked_r():
    assert [fmt_reward(v) for v in (0.6234, -0.25, 1.0, 12.46, 123.4, -45.6)] == \
        ["r 0.62", "r -0.2", "r 1.00", "r 12.5", "r 123", "r -46"]
    assert fmt_reward(None) == "–" and fmt_reward(math.nan) == "r nan"


def test_runs_list_shows_a_grpo_runs_mean_reward_where_an_sft_run_shows_its_loss(capsys):
    store = RunStore().ensure()
    stored_run(store, "sums grpo", "grpo", {"step": 100, "last_train_loss": 0.0123,
                                            "last_val_loss": 0.02, "reward_mean": 0.6234})
    stored_run(store, "chat sft", "sft", {"step": 100, "last_train_loss": 1.2345,
                                          "last_val_loss": 1.5})
    rows = {row["name"]: row for row in listing_rows(store)}
    assert rows["sums grpo"]["reward_mean"] == 0.6234
    assert rows["chat sft"]["reward_mean"] is None

    assert main(["runs", "list"]) == 0
    lines = {line.split()[2]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "r 0.62" in lines["sums"] and "0.0123" not in lines["sums"]
    assert "1.2345" in lines["chat"] and "r 0" not in lines["chat"]


def test_listing_rows_cached_before_rewards_were_listed_are_read_again(capsys):
    """An index written by an earlier version (rows without reward_mean) is not trusted."""
    store = RunStore().ensure()
    stored_run(store, "sums grpo", "grpo", {"step": 100, "reward_mean": 0.5})
    listing_rows(store)
    index = store.runs_root / INDEX_FILE
    written = index.read_text()
    assert written.startswith(f"zyquo-tui runs index {INDEX_VERSION}\n")
    assert ', "reward_mean": 0.5' in written
    index.write_text(written.replace(f"runs index {INDEX_VERSION}", "runs index 2").replace(
        ', "reward_mean": 0.5', ""))
    assert listing_rows(store)[0]["reward_mean"] == 0.5
