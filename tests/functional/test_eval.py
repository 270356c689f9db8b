"""`zyquo-tui eval`: a trained run's checkpoint against its base model, through the real CLI and
the real evaluator subprocess (the sample run is trained once for the session: conftest
`trained_runs`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA, zyquo_cli
from helpers import copy_run

from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.trainer.evaluation import normalised

COMPLETIONS = SAMPLE_DATA / "completions"


def eval_json(*args: str) -> dict:
    done = zyquo_cli("eval", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def per_row_nll_by_mlx_lm(model: str, adapters: Path | None, rows: list[dict]) -> list[float]:
    """Each row's answer NLL per token from mlx-lm alone: the row rendered by its
    CompletionsDataset with the prompt masked, the cross-entropy of each answer token's
    prediction (offset .. length - 1; mlx-lm 0.32's own mask adds the prediction of a padding
    token after the last, trainer/losses.py says so, which is no token of the answer)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm import load
    from mlx_lm.tuner.datasets import CompletionsDataset

    loaded, tokenizer = load(model, adapter_path=str(adapters) if adapters else None)
    dataset = CompletionsDataset(rows, tokenizer, "prompt", "completion", mask_prompt=True)
    losses = []
    for row in rows:
        tokens, offset = dataset.process(row)
        logits = loaded(mx.array(tokens[:-1])[None])[0]
        ce = nn.losses.cross_entropy(logits, mx.array(tokens[1:]))
        losses.append(float(ce[offset - 1:].mean().item()))
    return losses


def test_eval_on_the_test_split_shows_the_adapter_nll_below_the_base(trained_runs,
                                                                     isolated_home):
    run_id = copy_run(trained_runs["float"], isolated_home)
    shown = json.loads(zyquo_cli("runs", "show", run_id, "--json").stdout)
    [best] = [c["step"] for c in shown["checkpoints"] if c["best"]]

    result = eval_json(run_id)
    table = zyquo_cli("eval", run_id)

    assert result["run_id"] == run_id and result["step"] == best
    assert result["data"] == str(COMPLETIONS / "test.jsonl") and result["rows"] == 40
    assert result["metric"] is None and result["base"]["score"] is None
    base, adapter = result["base"]["nll"], result["adapter"]["nll"]
    difference = result["difference"]["nll"]
    assert base["n"] == adapter["n"] == difference["n"] == 40
    assert difference["mean"] == pytest.approx(adapter["mean"] - base["mean"])
    # Learnt: lower by far more than its standard error (paired, row by row).
    assert difference["mean"] < -3 * difference["se"] < 0
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["METRIC", "BASE", "ADAPTER", "(step", f"{best})", "DIFFERENCE"]
    assert lines[1].split() == [
        "NLL", "per", "token", "(n=40)", f"{base['mean']:.3f}", "±", f"{base['se']:.3f}",
        f"{adapter['mean']:.3f}", "±", f"{adapter['se']:.3f}",
        f"{difference['mean']:.3f}", "±", f"{difference['se']:.3f}"]


def test_eval_nll_is_mlx_lm_s_masked_loss_row_by_row(trained_runs, isolated_home):
    run_id = copy_run(trained_runs["float"], isolated_home)
    run = RunStore().get(run_id)
    rows = [json.loads(line) for line in
            (COMPLETIONS / "test.jsonl").read_text().splitlines()[:3]]

    result = eval_json(run_id, "--checkpoint", "40", "--limit", "3")

    base = per_row_nll_by_mlx_lm(run.model, None, rows)
    adapted = per_row_nll_by_mlx_lm(run.model, RunStore().adapters_dir(run_id), rows)
    assert result["step"] == 40 and result["rows"] == 3
    assert result["base"]["nll"]["mean"] == pytest.approx(sum(base) / 3, abs=1e-4)
    assert result["adapter"]["nll"]["mean"] == pytest.approx(sum(adapted) / 3, abs=1e-4)


def adapter_answers(run_id: str, prompts: list[str]) -> list[str]:
    answers = []
    for prompt in prompts:
        done = zyquo_cli("runs", "try", run_id, "--step", "40", "--prompt", prompt,
                         "--max-tokens", "64", "--no-base", "--json")
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout)["adapter"])
    return answers


def test_eval_exact_counts_greedy_answers_equal_to_the_reference(trained_runs, isolated_home,
                                                                 tmp_path):
    """The first row's reference is the adapter's own greedy answer written otherwise
    (capitals, more trailing punctuation, spaces): a match; the second's is another answer.
    The untrained base answers with newlines alone: no match."""
    run_id = copy_run(trained_runs["float"], isolated_home)
    prompts = ["What is 1 plus 0?", "What colour is coal?"]
    [answer, _] = adapter_answers(run_id, prompts)
    assert answer.strip(), "the adapter must say something for this test to mean anything"
    data = tmp_path / "exact.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in [
        {"prompt": prompts[0], "completion": "  " + answer.strip().upper() + " !\n"},
        {"prompt": prompts[1], "completion": "Nothing like it."}]) + "\n")

    result = eval_json(run_id, "--checkpoint", "40", "--data", str(data), "--exact")

    assert result["metric"] == "exact"
    assert result["adapter"]["score"] == {"mean": 0.5, "se": pytest.approx(0.5 ** 1.5),
                                          "n": 2}
    assert result["base"]["score"] == {"mean": 0.0, "se": 0.0, "n": 2}
    assert result["difference"]["score"]["mean"] == 0.5


def test_normalised_answers_drop_case_spaces_and_trailing_punctuation():
    assert normalised("  Coal is  black.\n") == normalised("coal is black") == "coal is black"
    assert normalised("1 plus 0 is 1?!") == "1 plus 0 is 1"
    assert normalised("3.5") != normalised("35")


REWARD_FILE = '''
import json, pathlib

def characters(prompts, completions, answer, types=None):
    calls = pathlib.Path(__file__).with_suffix(".calls.jsonl")
    with calls.open("a") as file:
        file.write(json.dumps({"prompts": prompts, "answer": answer,
                               "completions": completions}) + "\\n")
    return [float(len(text.strip())) for text in completions]
'''


def test_eval_reward_from_a_file_scores_both_sides_with_its_signature(trained_runs,
                                                                      isolated_home,
                                                                      tmp_path):
    run_id = copy_run(trained_runs["float"], isolated_home)
    reward = tmp_path / "rewards.py"
    reward.write_text(REWARD_FILE)
    data = SAMPLE_DATA / "rl" / "test.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()[:4]]

    result = eval_json(run_id, "--data", str(data), "--limit", "4", "--reward",
                       f"{reward}:characters")
    table = zyquo_cli("eval", run_id, "--data", str(data), "--limit", "4", "--reward",
                      f"{reward}:characters")

    assert result["metric"] == "reward" and result["reward"] == f"{reward}:characters"
    calls = [json.loads(line) for line in
             reward.with_suffix(".calls.jsonl").read_text().splitlines()]
    assert len(calls) == 4  # the adapter's answers, then the base's; for the JSON, the table
    assert all(call["prompts"] == [r["prompt"] for r in rows]
               and call["answer"] == [r["answer"] for r in rows] for call in calls)
    adapter, base = calls[0]["completions"], calls[1]["completions"]
    assert adapter != base and calls[2:] == calls[:2]  # greedy: the same answers again
    for side, answers in (("adapter", adapter), ("base", base)):
        lengths = [len(text.strip()) for text in answers]
        assert result[side]["score"]["n"] == 4
        assert result[side]["score"]["mean"] == pytest.approx(sum(lengths) / 4)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[2].split()[:3] == ["reward", f"{reward}:characters", "(n=4)"]


def test_a_reward_that_never_returns_stops_the_eval_after_its_timeout(trained_runs,
                                                                      isolated_home, tmp_path):
    run_id = copy_run(trained_runs["float"], isolated_home)
    asleep = tmp_path / "asleep.py"
    asleep.write_text("import threading\n\ndef forever(prompts, completions, answer, "
                      "types=None):\n    threading.Event().wait()\n")
    data = SAMPLE_DATA / "rl" / "test.jsonl"

    done = zyquo_cli("eval", run_id, "--data", str(data), "--limit", "2", "--reward",
                     f"{asleep}:forever", "--reward-timeout", "1")
    assert done.returncode == EXIT_PROBLEMS, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("zyquo-tui: ") and line.endswith("."), line
    assert "was still running after 1 s (reward_timeout)" in line, line

    refused = zyquo_cli("eval", run_id, "--reward-timeout", "0", "--reward", "bogus")
    assert refused.returncode == EXIT_USAGE and "--reward-timeout is 0" in refused.stderr


def test_eval_of_a_model_alone_on_chat_rows(sample_models, isolated_home):
    model = sample_models["zyquo-tiny"]
    result = eval_json("--model", str(model), "--data", str(SAMPLE_DATA / "chat" / "test.jsonl"),
                       "--limit", "3", "--exact")
    table = zyquo_cli("eval", "--model", str(model), "--data",
                      str(SAMPLE_DATA / "chat" / "test.jsonl"), "--limit", "3")

    assert result["run_id"] is None and result["step"] is None
    assert result["adapter"] is None and result["difference"] is None
    assert result["base"]["nll"]["n"] == 3 and result["base"]["score"]["n"] == 3
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["METRIC", "MODEL"]


def test_eval_refuses_bad_input_in_one_sentence_with_exit_2(trained_runs, isolated_home,
                                                           tmp_path):
    run_id = copy_run(trained_runs["float"], isolated_home)
    bad_row = tmp_path / "bad.jsonl"
    bad_row.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "c"}\n')
    raising = tmp_path / "raising.py"
    raising.write_text("raise RuntimeError('broken on import')\ndef f(prompts, completions, "
                       "answer, types=None):\n    return [0.0] * len(completions)\n")
    no_test = tmp_path / "no-test"
    no_test.mkdir()
    shutil.copy(COMPLETIONS / "train.jsonl", no_test / "train.jsonl")
    other = copy_run(trained_runs["4bit"], isolated_home)
    RunStore().update(other, lambda run: setattr(run, "data", str(no_test)))

    cases = {
        ("no-such-run",): "There is no run no-such-run",
        (run_id, "--data", str(tmp_path / "missing.jsonl")): "missing.jsonl is not a file",
        (run_id, "--data", str(bad_row)): f"{bad_row}:2: missing 'completion'",
        (run_id, "--data", str(SAMPLE_DATA / "text" / "test.jsonl")):
            "test.jsonl:1: a text row has no reference answer",
        (run_id, "--reward", "bogus"): "'bogus' is no built-in reward",
        (run_id, "--reward", f"{raising}:f"): "The reward",
        (run_id, "--checkpoint", "11"): "has no checkpoint at step 11; it has 10, 20, 30, 40",
        (other,): f"data folder {no_test} has no test.jsonl; give the rows to evaluate with "
                  "--data FILE.jsonl",
        ("--model", "zyquo-nowhere", "--data", str(COMPLETIONS / "test.jsonl")):
            "No model 'zyquo-nowhere'",
        (run_id, "--model", "zyquo-tiny"): "Give a run id or --model MODEL (not both)",
        (run_id, "--limit", "0"): "--limit is 0",
    }
    for args, said in cases.items():
        done = zyquo_cli("eval", *args)
        assert done.returncode == EXIT_USAGE, (args, done.stderr)
        assert done.stdout == "", args
        [line] = done.stderr.splitlines()
        assert line.startswith("zyquo-tui: ") and said in line and line.endswith("."), line


# -- in a run: --eval-every ---------------------------------------------------------------------

def test_a_run_evaluates_every_n_steps_and_its_best_checkpoint_follows_the_evaluation(
        tiny_model, isolated_home):
    """eval events at every 10th step and the last, each the figures `zyquo-tui eval` gives
    that step's checkpoint; with best_by eval each evaluated step is saved (save_every is 40)
    and the best is the evaluation's, not the validation loss's."""
    from conftest import run_trainer
    from helpers import make_run

    from zyquo_tui.core.events.protocol import read_events

    data = COMPLETIONS / "valid.jsonl"
    store, run = make_run(tiny_model, COMPLETIONS, iters=35, save_every=40, zyquo_tui={
        "eval_every": 10, "eval_data": str(data), "eval_max_rows": 6, "eval_exact": True,
        "best_by": "eval"})
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 0, done.stderr

    events = read_events(store.events_path(run.id))
    evals = [e for e in events if e["type"] == "eval"]
    saved = sorted(e["iteration"] for e in events if e["type"] == "checkpoint")
    assert [e["iteration"] for e in evals] == [10, 20, 30, 35]
    assert saved == [10, 20, 30, 35]
    assert all(e["rows"] == 6 and e["metric"] == "exact" for e in evals)
    assert len({e["nll"] for e in evals}) == 4, "the adapter changes between evaluations"
    cli = eval_json(run.id, "--checkpoint", "20", "--data", str(data), "--limit", "6",
                    "--exact")
    [at_20] = [e for e in evals if e["iteration"] == 20]
    assert cli["adapter"]["nll"]["mean"] == pytest.approx(at_20["nll"], abs=1e-4)
    assert cli["adapter"]["score"]["mean"] == at_20["score"]

    by_eval = min(evals, key=lambda e: (-e["score"], e["nll"], e["iteration"]))["iteration"]
    shown = json.loads(zyquo_cli("runs", "show", run.id, "--json").stdout)
    assert [c["step"] for c in shown["checkpoints"] if c["best"]] == [by_eval]
    assert shown["progress"]["last_eval"]["iteration"] == 35
    assert store.get(run.id).summary["best_checkpoint_step"] == by_eval
    assert "eval       step 35: answer NLL" in zyquo_cli("runs", "show", run.id).stdout
