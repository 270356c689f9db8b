"""On-policy distillation's batches: the student answers the prompts of a batch of rows, and
those answers, not the dataset's, are what the teacher scores and the loss compares.

A row's prompt is its tokens before its offset (the data is loaded with mask_prompt on for an
on-policy run, so the offset is where the prompt's tokens end, the assistant's turn opened:
the tokens `encoding.prompt_tokens` makes). Each answer is drawn at temperature 1 (the
student's own distribution) through the one generation function (trainer/sampling.py
`complete`), from MLX's global random state, which each checkpoint saves: a resumed run draws
the answers an uninterrupted one would. Dropout is off while it samples.
"""

from __future__ import annotations

import mlx.core as mx

from zyquo_tui.trainer.encoding import pad_rows

# The student's own distribution: answers are drawn as it would write them, untempered.
SAMPLING_TEMPERATURE = 1.0


def sample_answers(model, tokenizer, prompts: list[list[int]], max_tokens: int
                   ) -> list[list[int]]:
    """Each prompt's answer as tokens, ended by the end-of-sequence token when the model
    stopped (so the stop is learned too), else cut at `max_tokens`.

    One prompt after another through `complete`: the place a batched sampler goes."""
    from zyquo_tui.trainer.sampling import complete

    answers = []
    for prompt in prompts:
        done = complete(model, tokenizer, prompt, max_tokens, temperature=SAMPLING_TEMPERATURE)
        stop = [tokenizer.eos_token_id] if done.finish_reason == "stop" else []
        answers.append(done.tokens + stop)
    return answers


def on_policy_batch(model, tokenizer, tokens: mx.array, lengths: mx.array, max_tokens: int,
                    max_seq_length: int) -> tuple[mx.array, mx.array]:
    """The batch (tokens, lengths) of each row's prompt followed by the student's answer to
    it, padded as the trainer pads a batch; the answer is what is trained."""
    spans = lengths.tolist()
    rows = tokens.tolist()
    prompts = [row[:offset] for row, (offset, _length) in zip(rows, spans, strict=True)]
    was_training = model.training
    model.eval()
    try:
        answers = sample_answers(model, tokenizer, prompts, max_tokens)
    finally:
        if was_training:
            model.train()
    sampled, lengths_out, _cut = pad_rows(
        [(prompt + answer, len(prompt)) for prompt, answer in zip(prompts, answers, strict=True)],
        max_seq_length)
    return sampled, lengths_out
