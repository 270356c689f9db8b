"""complete_batch (trainer/sampling.py), the batched form of the one generation function: its
greedy answers are `complete`'s, prompt by prompt, whatever the other prompts' lengths (the
batch is left-padded), and the same random state draws the same answers."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")


def _moved_model(path):
    """The sample model with adapters away from 0: answers that differ between prompts."""
    from mlx_lm import load
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model, tokenizer = load(str(path))
    model.freeze()
    mx.random.seed(5)
    linear_to_lora_layers(model, 2, {"rank": 4, "dropout": 0.0, "scale": 20.0})
    for _, module in model.named_modules():
        if hasattr(module, "lora_b"):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.5
    return model, tokenizer


def test_greedy_batched_answers_are_the_single_prompt_answers(tiny_model):
    from zyquo_tui.trainer.encoding import prompt_tokens
    from zyquo_tui.trainer.sampling import complete, complete_batch

    model, tokenizer = _moved_model(tiny_model)
    prompts = [prompt_tokens(tokenizer, text) for text in
               ("What is 6 plus 9?", "Which city is the capital of Sweden, and why is it?",
                "Hi")]
    assert len({len(p) for p in prompts}) == 3
    alone = [complete(model, tokenizer, p, 24) for p in prompts]
    together = complete_batch(model, tokenizer, prompts, 24, copies=2)
    assert len({tuple(c.tokens) for c in alone}) > 1  # the prompts' answers differ
    for i, single in enumerate(alone):
        for copy in together[2 * i:2 * i + 2]:
            assert copy.tokens == single.tokens, i
            assert copy.finish_reason == single.finish_reason
            assert copy.logprobs == pytest.approx(single.logprobs, abs=1e-4)


def test_the_same_random_state_draws_the_same_answers(tiny_model):
    from zyquo_tui.trainer.encoding import prompt_tokens
    from zyquo_tui.trainer.sampling import complete_batch

    model, tokenizer = _moved_model(tiny_model)
    prompts = [prompt_tokens(tokenizer, "What is 6 plus 9?"), prompt_tokens(tokenizer, "Hi")]
    mx.random.seed(11)
    first = complete_batch(model, tokenizer, prompts, 16, temperature=1.0, copies=4)
    mx.random.seed(11)
    again = complete_batch(model, tokenizer, prompts, 16, temperature=1.0, copies=4)
    assert [c.tokens for c in first] == [c.tokens for c in again]
    assert len({tuple(c.tokens) for c in first}) > 1  # a group's answers differ


def test_stop_tokens_and_texts_end_a_row_as_tinker_takes_them(tiny_model):
    # The server's sample (Tinker's stop): token ids or strings end a row, the stopping
    # token kept at its end with its log-probability; [] stops only at max_tokens.
    from zyquo_tui.trainer.encoding import prompt_tokens
    from zyquo_tui.trainer.sampling import complete_batch

    model, tokenizer = _moved_model(tiny_model)
    prompt = prompt_tokens(tokenizer, "What is 6 plus 9?")
    free = complete_batch(model, tokenizer, [prompt], 16, stop=[], keep_stop=True)[0]
    assert len(free.tokens) == 16 and free.finish_reason == "length"

    stop_id = free.tokens[5]
    first = free.tokens.index(stop_id)
    for row in complete_batch(model, tokenizer, [prompt], 16, copies=2, stop=[stop_id],
                              keep_stop=True):
        assert row.tokens == free.tokens[:first + 1] and row.finish_reason == "stop"
        assert row.logprobs == pytest.approx(free.logprobs[:first + 1], abs=1e-4)
    left_out = complete_batch(model, tokenizer, [prompt], 16, stop=[stop_id])[0]
    assert left_out.tokens == free.tokens[:first] and left_out.stop_token == stop_id

    checked = 0
    for start in range(3, 12):
        text = tokenizer.decode(free.tokens[start:start + 2])
        if not text.strip():
            continue
        # The reference: the shortest answer whose whole text holds the stop text.
        ends = next((n for n in range(1, 17) if text in tokenizer.decode(free.tokens[:n])),
                    None)
        if ends is None:  # a piece's text that the whole answer's does not hold
            continue
        row = complete_batch(model, tokenizer, [prompt], 16, stop=[text], keep_stop=True)[0]
        assert row.tokens == free.tokens[:ends], (text, ends)
        assert row.finish_reason == "stop"
        checked += 1
    assert checked >= 3


def test_top_k_one_draws_the_greedy_answer_at_any_temperature(tiny_model):
    from zyquo_tui.trainer.encoding import prompt_tokens
    from zyquo_tui.trainer.sampling import complete_batch

    model, tokenizer = _moved_model(tiny_model)
    prompt = prompt_tokens(tokenizer, "Hi")
    greedy = complete_batch(model, tokenizer, [prompt], 12, stop=[])[0]
    mx.random.seed(3)
    drawn = complete_batch(model, tokenizer, [prompt], 12, temperature=1.0, copies=3, stop=[])
    assert any(row.tokens != greedy.tokens for row in drawn)  # temperature 1 draws others...
    mx.random.seed(3)
    for row in complete_batch(model, tokenizer, [prompt], 12, temperature=1.0, copies=3,
                              top_k=1, stop=[]):
        assert row.tokens == greedy.tokens  # ...but not among one token
