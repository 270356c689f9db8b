"""Bad inputs end as a `failed` event with a cause and a sentence, and lose nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA, run_trainer
from helpers import make_run

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.run import RunState


def copy_model(source: Path, target: Path, change=None) -> Path:
    shutil.copytree(source, target)
    if change:
        change(target)
    return target


def edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def write_rows(folder: Path, name: str, rows: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(r + "\n" for r in rows))


def case_missing_model(tmp, models):
    return tmp / "nowhere", SAMPLE_DATA / "completions", "lora"


def case_no_config(tmp, models):
    model = copy_model(models["zyquo-tiny"], tmp / "m",
                       lambda p: (p / "config.json").unlink())
    return model, SAMPLE_DATA / "completions", "lora"


def case_unknown_architecture(tmp, models):
    model = copy_model(models["zyquo-tiny"], tmp / "m", lambda p: edit_json(
        p / "config.json", lambda c: c.update(model_type="zyquonet")))
    return model, SAMPLE_DATA / "completions", "lora"


def case_full_on_quantized(tmp, models):
    return models["zyquo-tiny-4bit"], SAMPLE_DATA / "completions", "full"


def case_qlora_on_unquantized(tmp, models):
    return models["zyquo-tiny"], SAMPLE_DATA / "completions", "qlora"


def case_no_train_jsonl(tmp, models):
    data = tmp / "data"
    write_rows(data, "valid.jsonl", ['{"text": "a"}'])
    return models["zyquo-tiny"], data, "lora"


def case_fewer_rows_than_batch(tmp, models):
    data = tmp / "data"
    write_rows(data, "train.jsonl", ['{"text": "one"}', '{"text": "two"}'])
    return models["zyquo-tiny"], data, "lora"


def case_malformed_row(tmp, models):
    data = tmp / "data"
    write_rows(data, "train.jsonl", ['{"text": "fine"}'] * 5 + ['{"text": "broken'])
    return models["zyquo-tiny"], data, "lora"


def case_chat_without_template(tmp, models):
    model = copy_model(models["zyquo-tiny"], tmp / "m", lambda p: edit_json(
        p / "tokenizer_config.json", lambda c: c.pop("chat_template", None)))
    return model, SAMPLE_DATA / "chat", "lora"


def case_preference_rows(tmp, models):
    return models["zyquo-tiny"], SAMPLE_DATA / "preference", "lora"


@pytest.mark.parametrize("case, cause, phrase", [
    (case_missing_model, "config", "does not exist"),
    (case_no_config, "config", "has no config.json"),
    (case_unknown_architecture, "config", "does not know this architecture"),
    (case_full_on_quantized, "config", "Full fine-tuning needs an unquantized model"),
    (case_qlora_on_unquantized, "config", "QLoRA needs a quantized base model"),
    (case_no_train_jsonl, "data", "no train.jsonl"),
    (case_fewer_rows_than_batch, "data", "train.jsonl: only 2 rows, fewer than the batch size 4"),
    (case_malformed_row, "data", "train.jsonl:6: invalid JSON"),
    (case_chat_without_template, "data", "needs a chat template"),
    (case_preference_rows, "data", "train.jsonl: preference rows (prompt, chosen, rejected) "
                                   "train the dpo or orpo objective, not sft"),
], ids=lambda v: v.__name__ if callable(v) else None)
def test_bad_input_fails_with_its_cause_and_keeps_the_run(case, cause, phrase, tmp_path,
                                                          sample_models):
    model, data, method = case(tmp_path, sample_models)
    store, run = make_run(model, data, method=method, iters=5)
    run_dir = store.run_dir(run.id)

    done = run_trainer(run_dir)

    assert done.returncode == 1
    failed = read_events(run_dir / "events.jsonl")[-1]
    assert failed["type"] == "failed" and failed["cause"] == cause, failed
    assert phrase in failed["message"], failed["message"]
    assert failed["suggestion"] and failed["traceback"]
    record = store.get(run.id)
    assert record.state is RunState.FAILED and record.failure["cause"] == cause
    assert (run_dir / "run.json").is_file() and (run_dir / "adapters").is_dir()
    assert "Traceback" not in done.stderr
