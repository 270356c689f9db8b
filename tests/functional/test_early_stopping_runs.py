"""Early stopping and divergence: the rules on their own, then real runs that stop by them."""

from __future__ import annotations

import json
import random

from conftest import SAMPLE_DATA, run_trainer, zyquo_cli
from helpers import make_run

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.checkpoints import list_checkpoints
from zyquo_tui.core.store.retention import RetentionPolicy, apply_retention, save_policy


def test_early_stopping_settings_travel_through_flags_and_yaml(tiny_model, tmp_path):
    made = zyquo_cli("runs", "new", "--model", str(tiny_model), "--data",
                     str(SAMPLE_DATA / "completions"), "--num-layers", "-1",
                     "--early-stopping-patience", "3", "--early-stopping-min-delta", "0.01")
    assert made.returncode == 0, made.stderr
    exported = tmp_path / "run.yaml"
    assert zyquo_cli("runs", "export-config", made.stdout.strip(), "-o",
                     str(exported)).returncode == 0
    text = exported.read_text()
    assert "zyquo_tui:\n  early_stopping_patience: 3\n  early_stopping_min_delta: 0.01\n" in text

    imported = zyquo_cli("runs", "import-config", str(exported), "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["unknown_keys"] == []
    shown = json.loads(zyquo_cli("runs", "show", json.loads(imported.stdout)["id"],
                                 "--json").stdout)
    assert shown["hyperparameters"]["zyquo_tui"] == {"early_stopping_patience": 3,
                                                     "early_stopping_min_delta": 0.01}


def test_a_bad_patience_is_refused_in_one_sentence(tiny_model):
    refused = zyquo_cli("runs", "new", "--model", str(tiny_model), "--data",
                        str(SAMPLE_DATA / "completions"), "--early-stopping-patience", "0")
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("early_stopping_patience must be at least 1, not 0.")


def stalling_dataset(folder):
    """The sample's training rows, and validation rows of random letters no training teaches:
    the validation loss falls a little as the model learns the format, then stalls."""
    folder.mkdir()
    (folder / "train.jsonl").write_text(
        (SAMPLE_DATA / "completions" / "train.jsonl").read_text())
    rng = random.Random(0)

    def word() -> str:
        return "".join(rng.choice("qzxjkvw") for _ in range(rng.randint(3, 8)))
    rows = [{"prompt": " ".join(word() for _ in range(4)),
             "completion": " ".join(word() for _ in range(6))} for _ in range(16)]
    (folder / "valid.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_patience_2_stops_a_stalling_run_and_keeps_its_best_step(tiny_model, tmp_path):
    data = stalling_dataset(tmp_path / "stalling")
    store, run = make_run(tiny_model, data, iters=60, steps_per_eval=5, save_every=100,
                          zyquo_tui={"early_stopping_patience": 2})
    save_policy(store.run_dir(run.id), RetentionPolicy(keep_last=1))

    done = run_trainer(store.run_dir(run.id))

    assert done.returncode == 0, done.stderr
    record = store.get(run.id)
    assert record.state is RunState.COMPLETED
    summary = record.summary
    assert summary["stop_reason"] == "early_stopping"
    assert summary["step"] < 60, "it should stop before its last iteration"
    events = read_events(store.events_path(run.id))
    vals = [(e["iteration"], e["val_loss"]) for e in events if e["type"] == "val"]
    best_step = min(vals, key=lambda v: v[1])[0]
    # Two validations without improvement after the best, and then it stopped.
    assert [step for step, _ in vals].index(best_step) == len(vals) - 3
    assert summary["best_val_step"] == best_step == summary["best_checkpoint_step"]
    assert f"the best was {summary['best_val_loss']:.4f} at step {best_step}" in \
        summary["stop_message"]
    assert events[-1]["type"] == "completed"
    assert events[-1]["summary"]["stop_reason"] == "early_stopping"

    apply_retention(store, run.id)
    kept = [c.step for c in list_checkpoints(store.adapters_dir(run.id))]
    assert kept == [best_step, summary["step"]]  # the best, and the last
    shown = json.loads(zyquo_cli("runs", "show", run.id, "--json").stdout)
    assert [c["step"] for c in shown["checkpoints"] if c["best"]] == [best_step]
    assert shown["stopped"] == {"reason": "early_stopping", "message": summary["stop_message"]}
    assert "Stopped early: the validation loss did not improve for 2 validations" in \
        zyquo_cli("runs", "show", run.id).stdout


def mixed_dataset(folder):
    """Short rows learnt at once beside long rows of random words: the train loss of a batch of
    the long ones stays far above the lowest, as a diverging run's would."""
    folder.mkdir()
    rng = random.Random(0)
    rows = [{"text": "a b a b a b"} for _ in range(32)]
    rows += [{"text": " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                                       for _ in range(rng.randint(2, 9))) for _ in range(30))}
             for _ in range(32)]
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_divergence_warns_and_stops_the_run_when_config_toml_says_so(tiny_model, tmp_path,
                                                                    isolated_home):
    (isolated_home / "config.toml").write_text("[runs]\nstop_on_divergence = true\n")
    store, run = make_run(tiny_model, mixed_dataset(tmp_path / "mixed"), iters=60,
                          steps_per_report=1, save_every=100)

    done = run_trainer(store.run_dir(run.id))

    assert done.returncode == 0, done.stderr
    events = read_events(store.events_path(run.id))
    warnings = [e for e in events if e["type"] == "warning" and e["code"] == "diverged"]
    assert len(warnings) == 1 and warnings[0]["stopping"] is True
    assert warnings[0]["train_loss"] > 2 * warnings[0]["lowest_train_loss"]
    record = store.get(run.id)
    assert record.state is RunState.COMPLETED and record.summary["stop_reason"] == "diverged"
    assert record.summary["step"] == warnings[0]["iteration"] < 60
