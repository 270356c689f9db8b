"""Generation: the one way text is generated, by the client's `sample()`, a run's sample answers
(trainer/samples.py) and `runs try` (trainer/generate.py).

It is mlx-lm's own `stream_generate` (what `mlx_lm generate` runs): the same tokens, and the
text through mlx-lm's streaming detokenizer, so an answer reads as mlx-lm prints it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlx_lm.generate import stream_generate
from mlx_lm.sample_utils import make_sampler


@dataclass
class Completion:
    text: str
    tokens: list[int]
    logprobs: list[float]  # of each generated token under the model (temperature 1)
    finish_reason: str  # "stop" (an end-of-sequence token) or "length"


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
