"""GRPO's reward functions (trainer/rewards.py): the built-ins, a file's function with
mlx-lm-lora's signature, weights, and the sentence for a reward that misbehaves."""

from __future__ import annotations

import pytest

from zyquo_tui.trainer.rewards import (
    RewardError,
    Rewards,
    exact_answer,
    extracted_answer,
    format,
    length,
)


def test_exact_answer_reads_a_tagged_answer_else_the_last_number():
    assert extracted_answer("6 plus 9 is 15.") == "15"
    assert extracted_answer("I think 3, no: <answer> 12 </answer> surely 4") == "12"
    assert extracted_answer("no number here") is None
    completions = ["6 plus 9 is 15.", "6 plus 9 is 16.", "<answer>15.0</answer>", "fifteen",
                   "The capital is <answer>Stockholm</answer>"]
    answers = ["15", "15", "15", "15", "stockholm"]
    assert exact_answer([""] * 5, completions, answers) == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_format_wants_an_answer_in_tags_at_the_end():
    completions = ["<think>6 and 9</think> <answer>15</answer>", "<answer>15</answer> more",
                   "15", "<answer></answer>", "<answer>1</answer><answer>2</answer>"]
    assert format([""] * 5, completions, [""] * 5) == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_length_prefers_short_answers_but_not_empty_ones():
    scores = length(["", "", ""], ["", "fifteen", " ".join(["word"] * 50)], ["", "", ""])
    assert scores[0] == 0.0 and scores[1] == 1.0 and 0 < scores[2] < 1


def test_weights_and_a_file_function_with_mlx_lm_lora_signature(tmp_path):
    reward_file = tmp_path / "mine.py"
    reward_file.write_text(
        "def shouting(prompts, completions, answer, types=None):\n"
        "    return [None if t == 'skip' else float(c.isupper()) "
        "for c, t in zip(completions, types)]\n")
    rewards = Rewards(["exact_answer", f"{reward_file}:shouting"], [2.0, 0.5])
    scores = rewards.score(["p"] * 3, ["IT IS 4", "it is 4", "IT IS 5"], ["4"] * 3,
                           types=["a", "a", "skip"])
    assert scores.totals == [2.5, 2.0, 0.0]
    assert scores.means() == {"exact_answer": pytest.approx(2 / 3),
                              f"{reward_file}:shouting": 0.5}  # the skipped one left out


@pytest.mark.parametrize("body, phrase", [
    ("    return [1.0]", "returned 1 values for 2 answers"),
    ("    raise KeyError('x')", "raised KeyError"),
    ("    return ['high', 'low']", "returned 'high', not a number"),
    ("    return [float('inf'), 0]", "an infinite reward"),
])
def test_a_misbehaving_reward_is_one_sentence_with_its_traceback(tmp_path, body, phrase):
    reward_file = tmp_path / "bad.py"
    reward_file.write_text(f"def bad(prompts, completions, answer, types=None):\n{body}\n")
    rewards = Rewards([f"{reward_file}:bad"])
    with pytest.raises(RewardError) as raised:
        rewards.score(["p", "p"], ["a", "b"], ["1", "1"])
    assert phrase in str(raised.value) and raised.value.name == f"{reward_file}:bad"


def test_a_reward_file_that_cannot_load_says_so(tmp_path):
    reward_file = tmp_path / "broken.py"
    reward_file.write_text("import not_a_module_anywhere\ndef f(p, c, a, types=None):\n"
                           "    return []\n")
    with pytest.raises(RewardError) as raised:
        Rewards([f"{reward_file}:f"])
    assert "could not be loaded (ModuleNotFoundError" in str(raised.value)
    assert "not_a_module_anywhere" in raised.value.details
