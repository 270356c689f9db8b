"""Preference runs (objective dpo or orpo) end to end: refused where they cannot train, real
training of the sample model on the sample preference data, exact resume, configs for
mlx-lm-lora."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from conftest import (
    SAMPLE_DATA,
    cancel_mid_run_then_resume,
    run_trainer,
    zyquo_cli,
)
from helpers import losses_by_iteration, make_run

from zyquo_tui.core.events.protocol import PREFERENCE_METRICS, read_events
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.runs.settings import SETTINGS
from zyquo_tui.core.store.store import RunStore

PREFERENCE = SAMPLE_DATA / "preference"


def preference_run(model, objective="dpo", **settings):
    store, run = make_run(model, PREFERENCE, **settings)
    store.update(run.id, lambda r: SETTINGS["objective"].set(r.hyperparameters, objective))
    return store, store.get(run.id)


def events_of(store, run) -> list[dict]:
    return read_events(store.run_dir(run.id) / "events.jsonl")


def test_runs_new_refuses_an_objective_the_data_cannot_train(models, isolated_home):
    sft = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(PREFERENCE),
                    "--objective", "sft")
    assert sft.returncode == 2
    assert "train the dpo or orpo objective, not sft; choose --objective dpo or orpo" in \
        sft.stderr
    # No objective given: the data's (dpo), as the form and `plan` take it.
    chosen = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(PREFERENCE))
    assert chosen.returncode == 0, chosen.stderr
    assert RunStore().get(chosen.stdout.strip()).objective == "dpo"
    dpo = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data",
                    str(SAMPLE_DATA / "completions"), "--objective", "dpo")
    assert dpo.returncode == 2 and "needs preference rows" in dpo.stderr
    made = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(PREFERENCE),
                     "--objective", "orpo", "--beta", "0.2", "--json")
    assert made.returncode == 0, made.stderr
    bad = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(PREFERENCE),
                    "--objective", "dpo", "--reference", "/nowhere")
    assert bad.returncode == 2 and "no model folder" in bad.stderr


def test_a_dpo_run_starts_at_ln_2_and_learns_the_preference(tiny_model):
    store, run = preference_run(tiny_model, iters=60, learning_rate=1e-3, steps_per_eval=30,
                                val_batches=-1, steps_per_report=10, save_every=1000)
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 0, done.stdout[-2000:]
    events = events_of(store, run)
    vals = {e["iteration"]: e for e in events if e["type"] == "val"}
    # Before any update the policy is its reference: the loss is ln 2, the margin 0.
    assert vals[1]["val_loss"] == pytest.approx(math.log(2), abs=1e-3)
    assert vals[1]["reward_margin"] == pytest.approx(0, abs=1e-6)
    last = vals[60]
    assert last["reward_accuracy"] > 0.5 and last["reward_margin"] > 0, last
    trains = [e for e in events if e["type"] == "train"]
    assert all(set(PREFERENCE_METRICS) <= set(e) for e in trains)
    assert store.get(run.id).state is RunState.COMPLETED


def test_an_orpo_run_completes_with_its_metrics(tiny_model):
    store, run = preference_run(tiny_model, "orpo", iters=20, steps_per_eval=10,
                                steps_per_report=5, save_every=10)
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 0, done.stdout[-2000:]
    events = events_of(store, run)
    losses = losses_by_iteration(events, "train", "train_loss")
    assert sorted(losses) == [5, 10, 15, 20] and losses[20] < losses[5]
    assert {e["iteration"] for e in events if e["type"] == "val"} == {1, 10, 20}
    assert all(0 <= e["reward_accuracy"] <= 1 for e in events if e["type"] == "train")


def test_cancel_and_resume_of_a_dpo_run_equals_the_straight_run(tiny_model):
    settings = dict(iters=40, steps_per_report=1, steps_per_eval=10, save_every=100,
                    lora_parameters={"rank": 8, "dropout": 0.1, "scale": 20.0})
    store, straight = preference_run(tiny_model, **settings)
    assert run_trainer(store.run_dir(straight.id)).returncode == 0
    _, interrupted = preference_run(tiny_model, store=store, **settings)
    cancel_mid_run_then_resume(store, interrupted.id, 12)
    want, have = events_of(store, straight), events_of(store, interrupted)
    for kind, key in [("train", "train_loss"), ("val", "val_loss"),
                      *[(kind, m) for kind in ("train", "val") for m in PREFERENCE_METRICS]]:
        expected = losses_by_iteration(want, kind, key)
        got = losses_by_iteration(have, kind, key)
        assert sorted(got) == sorted(expected), (kind, key)
        for step in expected:
            assert got[step] == pytest.approx(expected[step], abs=1e-5), (kind, key, step)


def test_chat_pairs_train_as_the_same_rows_written_as_prompt_chosen_rejected(tiny_model,
                                                                           tmp_path):
    """{"chosen": [messages], "rejected": [messages]} with the prompt as their shared first
    message is the same pair: `data check` accepts it and DPO trains it to the same losses."""
    pairs = tmp_path / "chat-pairs"
    pairs.mkdir()
    for split in ("train", "valid"):
        rows = [json.loads(line) for line in (PREFERENCE / f"{split}.jsonl").open()]
        with open(pairs / f"{split}.jsonl", "w") as out:
            for row in rows:
                ask = {"role": "user", "content": row["prompt"]}
                out.write(json.dumps({
                    side: [ask, {"role": "assistant", "content": row[side]}]
                    for side in ("chosen", "rejected")}) + "\n")
    checked = zyquo_cli("data", "check", str(pairs), "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["objectives"] == ["dpo", "orpo"]
    settings = dict(iters=10, steps_per_report=5, steps_per_eval=10, save_every=100)
    events = []
    for data in (PREFERENCE, pairs):
        store, run = make_run(tiny_model, data, **settings)
        store.update(run.id, lambda r: SETTINGS["objective"].set(r.hyperparameters, "dpo"))
        done = run_trainer(store.run_dir(run.id))
        assert done.returncode == 0, done.stdout[-2000:]
        events.append(events_of(store, run))
    for kind, key in [("train", "train_loss"), ("val", "val_loss"), ("val", "reward_margin")]:
        rows, chat = (losses_by_iteration(e, kind, key) for e in events)
        assert sorted(chat) == sorted(rows) and rows, (kind, key)
        for step in rows:
            assert chat[step] == pytest.approx(rows[step], abs=1e-6), (kind, key, step)


def test_a_preference_config_round_trips_through_mlx_lm_lora_keys(models, tmp_path):
    made = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(PREFERENCE),
                     "--objective", "dpo", "--beta", "0.3", "--dpo-loss", "ipo",
                     "--grad-accumulation-steps", "2")
    run_id = made.stdout.strip()
    out = tmp_path / "dpo.yaml"
    assert zyquo_cli("runs", "export-config", run_id, "-o", str(out)).returncode == 0
    config = yaml.safe_load(out.read_text())
    assert config["train_mode"] == "dpo" and config["beta"] == 0.3
    assert config["dpo_cpo_loss_type"] == "ipo" and config["reference_model_path"] is None
    assert config["train_type"] == "lora" and config["gradient_accumulation_steps"] == 2
    assert config["fuse"] is False

    # A config written for mlx-lm-lora, without our own keys, imports as the same run.
    for key in ("zyquo_tui", "grad_accumulation_steps", "fine_tune_type"):
        config.pop(key, None)
    out.write_text(yaml.safe_dump(config))
    imported = zyquo_cli("runs", "import-config", str(out), "--json")
    assert imported.returncode == 0, imported.stderr
    shown = json.loads(zyquo_cli("runs", "show", json.loads(imported.stdout)["id"],
                                 "--json").stdout)
    own = shown["hyperparameters"]["zyquo_tui"]
    assert own == {"objective": "dpo", "beta": 0.3, "dpo_loss": "ipo"}
    assert shown["hyperparameters"]["grad_accumulation_steps"] == 2
