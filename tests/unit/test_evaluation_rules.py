"""The rules of an evaluation that need no model: which rows it reads and how, its standard
errors and exact match, its settings, and the best checkpoint by evaluation."""

from __future__ import annotations

import json
import math

import pytest
from conftest import SAMPLE_DATA

from zyquo_tui.core.errors import EXIT_USAGE, UserError
from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.library.eval_rows import read_eval_rows
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters
from zyquo_tui.trainer.evaluation import exact_match, summary


def test_each_format_s_reference_answer_and_prompt():
    [completion] = read_eval_rows(SAMPLE_DATA / "completions" / "test.jsonl", limit=1)
    [chat] = read_eval_rows(SAMPLE_DATA / "chat" / "test.jsonl", limit=1)
    [prompt] = read_eval_rows(SAMPLE_DATA / "rl" / "test.jsonl", limit=1)

    assert (completion.prompt, completion.reference) == ("What is 1 plus 0?", "1 plus 0 is 1.")
    assert chat.prompt == [{"role": "system", "content": "Answer in one short sentence."},
                           {"role": "user", "content": "What is 5 plus 8?"}]
    assert (chat.reference, chat.prompt_text) == ("5 plus 8 is 13.", "What is 5 plus 8?")
    assert (prompt.prompt, prompt.reference, prompt.line) == ("What is 7 minus 5?", "2", 1)
    assert len(read_eval_rows(SAMPLE_DATA / "rl" / "test.jsonl")) == 40


@pytest.mark.parametrize("rows, said", [
    ([{"prompt": "a", "completion": "b"}, {"prompt": "c"}], "rows.jsonl:2: missing 'completion'"),
    ([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ho"}]},
      {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ho"},
                    {"role": "user", "content": "and?"}]}],
     "rows.jsonl:2: a chat row to evaluate must end with the assistant's answer"),
    ([{"text": "just text"}], "rows.jsonl:1: a text row has no reference answer"),
    ([{"prompt": "p", "chosen": "a", "rejected": "b"}],
     "rows.jsonl:1: a preference row has no reference answer"),
])
def test_a_row_that_cannot_be_evaluated_is_named_at_its_line(tmp_path, rows, said):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(UserError) as raised:
        read_eval_rows(path)
    assert said in raised.value.message and raised.value.exit_status == EXIT_USAGE
    assert raised.value.message.count(".") >= 1 and "\n" not in raised.value.message


def test_standard_errors_sample_sd_and_binomial():
    figures = summary([1.0, 2.0, 3.0, 6.0])
    assert figures["mean"] == 3.0 and figures["n"] == 4
    assert figures["se"] == pytest.approx(math.sqrt(14 / 3 / 4))
    assert summary([1.0, 0.0, 0.0, 0.0], binary=True)["se"] == pytest.approx(
        math.sqrt(0.25 * 0.75 / 4))
    assert summary([5.0]) == {"mean": 5.0, "se": None, "n": 1}
    assert summary([]) == {"mean": None, "se": None, "n": 0}


def test_exact_match_is_after_normalising_both_sides():
    assert exact_match("Coal is black.", " coal is BLACK ") == 1.0
    assert exact_match("Coal is black, ", "Coal is black") == 1.0
    assert exact_match("Coal is grey.", "Coal is black.") == 0.0


def problems_of(**own) -> list[str]:
    hp = Hyperparameters()
    for key, value in own.items():
        SETTINGS[key].set(hp, value)
    return [p.sentence for p in hp.problems()]


def test_in_run_evaluation_settings_need_each_other(tmp_path):
    data = tmp_path / "eval.jsonl"
    data.write_text('{"prompt": "a", "completion": "b"}\n')
    assert problems_of(eval_every=10, eval_data=str(data), best_by="eval") == []
    assert any("eval_every needs eval_data" in p for p in problems_of(eval_every=10))
    assert any("need eval_every" in p for p in problems_of(eval_data=str(data)))
    assert any("best_by eval needs an evaluation" in p for p in problems_of(best_by="eval"))
    assert any("not both" in p for p in problems_of(eval_every=5, eval_data=str(data),
                                                    eval_exact=True,
                                                    eval_reward=["exact_answer"]))
    assert any("is no file" in p for p in problems_of(eval_every=5,
                                                      eval_data=str(tmp_path / "none")))
    assert any("best_by" in p for p in problems_of(best_by="accuracy"))


def history(best_by: str) -> list[dict]:
    """Validation improves to the last step; the evaluation is best at step 20 (the
    higher score; 30 has the same score with a higher NLL)."""
    config = {"zyquo_tui": {"best_by": best_by}} if best_by != "val_loss" else {}
    events = [ev.make_event(ev.STARTED, config=config, iters=40, resumed_from_step=None)]
    for step, val, nll, score in ((10, 3.0, 4.0, 0.25), (20, 2.5, 3.9, 0.5),
                                  (30, 2.2, 3.95, 0.5), (40, 2.0, 3.7, 0.25)):
        events.append(ev.make_event(ev.VAL, iteration=step, val_loss=val, val_time=0.1))
        events.append(ev.make_event(ev.EVAL, iteration=step, rows=4, nll=nll, nll_se=0.1,
                                    metric="exact", score=score, score_se=0.2, eval_time=0.1))
        events.append(ev.make_event(ev.CHECKPOINT, iteration=step, adapter_file="a",
                                    latest="l", state_files=[], bytes=1))
    return events


def test_the_best_checkpoint_is_by_validation_unless_best_by_eval():
    by_val, by_eval = RunMetrics(), RunMetrics()
    by_val.ingest(history("val_loss"))
    by_eval.ingest(history("eval"))

    assert by_val.best_checkpoint_step() == 40
    assert by_eval.best_checkpoint_step() == 20
    assert by_eval.last_eval["iteration"] == 40
    assert by_eval.series["eval_nll"].values == [4.0, 3.9, 3.95, 3.7]
