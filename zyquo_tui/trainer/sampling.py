"""Generation: the one way text is generated, by the client's `sample()`, a run's sample answers
(trainer/samples.py), `runs try` (trainer/generate.py), a GRPO run's sampled answers
(trainer/grpo.py) and the Tinker server's `sample` (server/trained_model.py).

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
                   temperature: float = 0.0, copies: int = 1, top_p: float = 1.0,
                   top_k: int = 0, stop: list[int] | list[str] | None = None,
                   keep_stop: bool = False) -> list[Completion]:
    """`copies` completions of each prompt's tokens, all decoded together: row i * copies + j
    is prompt i's j-th. Each prompt is read once into its own cache, which its copies then
    share (merged into one batch cache, left-padded to the longest prompt); then one forward
    pass a token for every row until each has stopped or has `max_tokens`. The draws come
    from MLX's global random state, so the same state gives the same answers. Temperature 0
    is greedy; top_k 0 (or less) and top_p 1 filter nothing. The model is put in eval mode
    (no dropout) and back as it was.

    A row stops at one of `stop`: None, the model's end-of-sequence tokens; token ids; or
    strings, once the row's text holds one (as Tinker takes them; [] never stops before
    `max_tokens`). With `keep_stop` the stopping token ends `tokens` (with its log-probability,
    as Tinker's sampler returns it); without, it is left out and kept in `stop_token`."""
    if not prompts or copies < 1 or max_tokens < 1:
        return []
    if any(not prompt for prompt in prompts):
        raise ValueError("every prompt needs at least one token")
    sampler = make_sampler(temp=temperature, top_p=top_p, top_k=top_k)
    if stop is None:
        stops, texts = set(tokenizer.eos_token_ids), []
    else:
        stops = {s for s in stop if isinstance(s, int)}
        texts = [s for s in stop if isinstance(s, str) and s]
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
        return _decode(model, batch_cache, last, sampler, _Stops(stops, texts, tokenizer),
                       max_tokens, tokenizer, keep_stop)
    finally:
        model.train(was_training)


@dataclass
class _Stops:
    """What ends a row: one of `ids`, or its text coming to hold one of `texts`."""

    ids: set[int]
    texts: list[str]
    tokenizer: object

    def __post_init__(self) -> None:
        # A stop text that has just appeared lies in the row's last tokens: each token adds at
        # least one character, or a byte of one (four at most), so 4 tokens a character (and
        # a few more for a character cut at the window's start) hold it; earlier ones would
        # have stopped the row before. Decoding that window, not the whole row, keeps the
        # check's cost flat as answers grow.
        self.window = 4 * max((len(t) for t in self.texts), default=0) + 4

    def by_text(self, tokens: list[int]) -> bool:
        if not self.texts:
            return False
        text = self.tokenizer.decode(tokens[-self.window:])
        return any(t in text for t in self.texts)


def _decode(model, cache, inputs: mx.array, sampler, stops: _Stops, max_tokens: int,
            tokenizer, keep_stop: bool) -> list[Completion]:
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
            if token in stops.ids:
                finish[row] = "stop"
                stopped_by[row] = token
                if not keep_stop:
                    continue
            tokens[row].append(token)
            logprobs[row].append(score)
            if stops.by_text(tokens[row]):
                finish[row] = "stop"
        if upcoming is None or all(reason == "stop" for reason in finish):
            break
        drawn, scores = upcoming
    return [Completion(tokenizer.decode(row), row, scores, reason, stop)
            for row, scores, reason, stop in zip(tokens, logprobs, finish, stopped_by)]
