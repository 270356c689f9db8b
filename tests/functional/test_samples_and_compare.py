"""Sample answers at each validation, and `runs compare`, on real runs of the sample model."""

from __future__ import annotations

import json

from conftest import SAMPLE_DATA, run_trainer, zyquo_cli
from helpers import make_run

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.differences import setting_differences
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import Hyperparameters
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.trainer.samples import prompt_from_row, prompts_from_file

COMPLETIONS = SAMPLE_DATA / "completions"


def first_prompts(count: int) -> list[str]:
    rows = (COMPLETIONS / "valid.jsonl").read_text().splitlines()[:count]
    return [json.loads(row)["prompt"] for row in rows]


def test_sample_prompts_2_answers_two_validation_prompts_at_each_validation(tiny_model):
    store, run = make_run(tiny_model, COMPLETIONS, iters=20,
                          zyquo_tui={"sample_prompts": 2, "sample_max_tokens": 8})

    done = run_trainer(store.run_dir(run.id))

    assert done.returncode == 0, done.stderr
    events = read_events(store.events_path(run.id))
    validations = [e["iteration"] for e in events if e["type"] == "val"]
    samples = [e for e in events if e["type"] == "sample"]
    assert validations == [1, 10, 20]
    assert [e["iteration"] for e in samples] == [1, 1, 10, 10, 20, 20]
    assert [e["prompt"] for e in samples] == first_prompts(2) * 3
    assert all(isinstance(e["text"], str) for e in samples)
    # Each sample follows its validation, before the step's training goes on.
    order = [(e["type"], e.get("iteration")) for e in events if e["type"] in ("val", "sample")]
    assert order[:3] == [("val", 1), ("sample", 1), ("sample", 1)]


def test_sample_prompts_come_from_every_row_format_and_from_a_file(tmp_path):
    assert prompt_from_row({"prompt": "Hi?", "completion": "Hello."}).shown == "Hi?"
    chat = prompt_from_row({"messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "2 plus 2?"},
                                         {"role": "assistant", "content": "4."}]})
    assert chat.shown == "2 plus 2?" and [m["role"] for m in chat.messages] == ["system", "user"]
    assert prompt_from_row({"text": "one two three four"}).shown == "one two"
    assert prompt_from_row({"other": 1}) is None
    file = tmp_path / "prompts.txt"
    file.write_text("What is 2 plus 2?\n\nName a colour.\n")
    assert [p.shown for p in prompts_from_file(file)] == ["What is 2 plus 2?", "Name a colour."]


def test_a_missing_prompts_file_is_refused_at_runs_new(tiny_model, tmp_path):
    refused = zyquo_cli("runs", "new", "--model", str(tiny_model), "--data", str(COMPLETIONS),
                        "--sample-prompts", str(tmp_path / "none.txt"))
    assert refused.returncode == 2
    assert "sample_prompts:" in refused.stderr and "is no file" in refused.stderr
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")  # a file the trainer would refuse at start: no prompts in it
    empty = zyquo_cli("runs", "new", "--model", str(tiny_model), "--data", str(COMPLETIONS),
                      "--sample-prompts", str(blank))
    assert empty.returncode == 2
    assert f"sample_prompts: {blank} has no prompts; write one prompt a line" in empty.stderr


def test_compare_of_two_runs_differing_in_learning_rate_lists_exactly_that(tiny_model):
    ids = []
    for rate in ("1e-3", "1e-4"):
        made = zyquo_cli("runs", "new", "--model", str(tiny_model), "--data", str(COMPLETIONS),
                         "--iters", "10", "--learning-rate", rate, "--num-layers", "-1",
                         "--steps-per-report", "5", "--steps-per-eval", "5", "--save-every",
                         "10", "--val-batches", "2")
        assert made.returncode == 0, made.stderr
        ids.append(made.stdout.strip())
    for run_id in ids:
        assert run_trainer(RunStore().run_dir(run_id)).returncode == 0

    compared = zyquo_cli("runs", "compare", *ids, "--json")

    assert compared.returncode == 0, compared.stderr
    data = json.loads(compared.stdout)
    assert data["differences"] == {"learning_rate": [1e-3, 1e-4]}
    assert [r["id"] for r in data["runs"]] == ids
    for figures in data["runs"]:
        assert figures["state"] == "completed" and figures["step"] == 10
        assert figures["best_val_step"] in (1, 5, 10) and figures["best_val_loss"] > 0
        assert figures["final_train_loss"] > 0 and figures["tokens_per_second"] > 0
        assert figures["peak_memory_bytes"] > 0 and figures["duration_seconds"] > 0
        assert figures["stop_reason"] is None
    text = zyquo_cli("runs", "compare", *ids).stdout
    assert "Settings that differ:" in text
    assert [line.split() for line in text.splitlines() if line.startswith("learning_rate")] \
        == [["learning_rate", "0.001", "0.0001"]]


def test_compare_refuses_one_run_a_repeat_and_an_unknown_id(tiny_model):
    _, run = make_run(tiny_model, COMPLETIONS)
    for args, words in (([run.id], "at least two runs"), ([run.id, run.id], "given twice"),
                        ([run.id, "20990101-000000-000-0000"], "There is no run")):
        refused = zyquo_cli("runs", "compare", *args)
        assert refused.returncode == 2 and words in refused.stderr
        assert "Traceback" not in refused.stderr


def test_differences_name_the_method_and_leave_out_what_a_method_has_not():
    lora = Run.new(model="/m", data="/d", method="lora",
                   hyperparameters=Hyperparameters(learning_rate=1e-4))
    full = Run.new(model="/m", data="/d", method="full",
                   hyperparameters=Hyperparameters(learning_rate=1e-4))
    assert setting_differences([lora, full]) == {
        "method": ["lora", "full"], "rank": [8, None], "lora_scale": [20.0, None],
        "lora_dropout": [0.0, None]}
    assert setting_differences([lora, lora]) == {}
