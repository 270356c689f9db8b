"""Generation: the one way text is generated, by the client's `sample()`, a run's sample answers
(trainer/samples.py), `runs try` (trainer/generate.py) and a GRPO run's sampled answers
(trainer/grpo.py).

One prompt at a time (`complete`) it is mlx-lm's own `stream_generate` (what `mlx_lm generate`
runs): the same tokens, and the text through mlx-lm's streaming detokenizer, so an answer reads
as mlx-lm prints it. Many answers at once (`complete_batch`: every prompt of a batch, each as
many times as its group has answers) share one KV cache and one forward pass a token, which is
where a GRPO step's time goes; each prompt is read once and its cache copied to its group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.generate import stream_generate
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import make_sampler


@dataclass
class Completion:
    text: str
    tokens: list[int]
    logprobs: list[float]  # of each generated token under the model (temperature 1)
    finish_reason: str  # "stop" (an end-of-sequence token) or "length"
    stop_token: int | None = None  # the end-of-sequence token that stopped it (complete_batch)


def complete(model, tokenizer, prompt_tokens: list[int], max_tokens: int,
             temperature: float = 0.0, top_p: float = 1.0,
             on_text: Callable[[str], None] | None = None) -> Completion:
    """One completion of a prompt's tokens (encoding.prompt_tokens makes them); the
    end-of-sequence token is not part of it. Temperature 0 is greedy (no random draw);
    `on_text` hears each piece of text as it is decoded."""
    sampler = make_sampler(temp=temperature, top_p=top_p)
    text: list[str] = []
    tokens: list[int] = []
    logprobs: list[float] = []
    finish = "length"
    for response in stream_generate(model, tokenizer, prompt_tokens, max_tokens=max_tokens,
                                    sampler=sampler):
        if response.text:
            text.append(response.text)
            if on_text is not None:
                on_text(response.text)
        # The last response of a "stop" carries the end-of-sequence token: not the answer's.
        if response.finish_reason != "stop":
            tokens.append(int(response.token))
            logprobs.append(float(response.logprobs[response.token]))
        finish = response.finish_reason or finish
    return Completion("".join(text), tokens, logprobs, finish)


def complete_batch(model, tokenizer, prompts: list[list[int]], max_tokens: int,
                   temperature: float = 0.0, copies: int = 1, top_p: float = 1.0
                   ) -> list[Completion]:
    """`copies` completions of each prompt's tokens, all decoded together: row i * copies + j
    is prompt i's j-th. Each prompt is read once into its own cache, which its copies then
    share (merged into one batch cache, left-padded to the longest prompt); then one forward
    pass a token for every row until each has stopped or has `max_tokens`. The draws come
    from MLX's global random state, so the same state gives the same answers. Temperature 0
    is greedy. The model is put in eval mode (no dropout) and back as it was."""
    if not prompts or copies < 1 or max_tokens < 1:
        return []
    if any(not prompt for prompt in prompts):
        raise ValueError("every prompt needs at least one token")
    sampler = make_sampler(temp=temperature, top_p=top_p)
    stops = set(tokenizer.eos_token_ids)
    was_training = model.training
    model.eval()
    try:
        caches = []
        for prompt in prompts:
            cache = make_prompt_cache(model)
            if len(prompt) > 1:
                model(mx.array(prompt[:-1])[None], cache=cache)
                mx.eval([c.state for c in cache])
            caches.append(cache)
        rows = [cache for cache in caches for _ in range(copies)]
        batch_cache = [layer.merge([row[i] for row in rows]) for i, layer in enumerate(rows[0])]
        last = mx.array([[prompt[-1]] for prompt in prompts for _ in range(copies)])
        return _decode(model, batch_cache, last, sampler, stops, max_tokens, tokenizer)
    finally:
        model.train(was_training)


def _decode(model, cache, inputs: mx.array, sampler, stops: set[int], max_tokens: int,
            tokenizer) -> list[Completion]:
    def step(tokens: mx.array) -> tuple[mx.array, mx.array]:
        logits = model(tokens, cache=cache)[:, -1, :].astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        drawn = sampler(logprobs)
        return drawn, mx.take_along_axis(logprobs, drawn[:, None], axis=-1)[:, 0]

    count = inputs.shape[0]
    tokens: list[list[int]] = [[] for _ in range(count)]
    logprobs: list[list[float]] = [[] for _ in range(count)]
    finish = ["length"] * count
    stopped_by: list[int | None] = [None] * count
    drawn, scores = step(inputs)
    mx.async_eval(drawn, scores)
    for n in range(max_tokens):
        # The next token's work is queued before this one is read, as mlx-lm's loop does.
        upcoming = step(drawn[:, None]) if n + 1 < max_tokens else None
        if upcoming is not None:
            mx.async_eval(*upcoming)
        for row, (token, score) in enumerate(zip(drawn.tolist(), scores.tolist())):
            if finish[row] == "stop":
                continue
            if token in stops:
                finish[row] = "stop"
                stopped_by[row] = token
            else:
                tokens[row].append(token)
                logprobs[row].append(score)
        if upcoming is None or all(reason == "stop" for reason in finish):
            break
        drawn, scores = upcoming
    return [Completion(tokenizer.decode(row), row, scores, reason, stop)
            for row, scores, reason, stop in zip(tokens, logprobs, finish, stopped_by)]
def generate_until_stop(model, tokenizer, prompt_tokens: list[int], max_tokens: int,
                        temperature: float = 1.0, top_p: float = 1.0, top_k: int = -1,
                        stop: list[int] | list[str] | None = None) -> Completion:
    """One completion as Tinker's sampler makes it (the server's `sample`): mlx-lm's own
    generation step, with the stopping token kept at the end of `tokens` (a renderer reads
    it), `stop` as Tinker takes it (None: the model's end-of-sequence tokens; token ids or
    strings, which end the completion once its text holds one; [] never stops before
    `max_tokens`), and top-k (-1: none). `logprobs` are the generated tokens' under the model
    (temperature 1); the text is the tokens decoded whole."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    sampler = make_sampler(temp=temperature, top_p=top_p if 0 < top_p < 1 else 0.0,
                           top_k=max(top_k, 0))
    if stop is None:
        stop_ids, stop_texts = set(tokenizer.eos_token_ids), []
    else:
        stop_ids = {s for s in stop if isinstance(s, int)}
        stop_texts = [s for s in stop if isinstance(s, str)]
    tokens: list[int] = []
    logprobs: list[float] = []
    finish = "length"
    if max_tokens > 0:
        steps = generate_step(mx.array(prompt_tokens), model, max_tokens=max_tokens,
                              sampler=sampler)
        for token, token_logprobs in steps:
            token = int(token)
            tokens.append(token)
            logprobs.append(float(token_logprobs[token]))
            if token in stop_ids or (stop_texts and any(s in tokenizer.decode(tokens)
                                                        for s in stop_texts)):
                finish = "stop"
                break
    return Completion(tokenizer.decode(tokens), tokens, logprobs, finish)
