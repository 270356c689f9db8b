"""Generation with the current weights, for a training loop between its steps (RL, samples)."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler


@dataclass
class Completion:
    text: str
    tokens: list[int]
    logprobs: list[float]  # of each generated token under the model (temperature 1)
    finish_reason: str  # "stop" (an end-of-sequence token) or "length"


def complete(model, tokenizer, prompt_tokens: list[int], max_tokens: int, temperature: float,
             top_p: float = 1.0) -> Completion:
    """One completion of a prompt's tokens; the end-of-sequence token is not part of it."""
    sampler = make_sampler(temp=temperature, top_p=top_p)
    eos = set(getattr(tokenizer, "eos_token_ids", None) or [tokenizer.eos_token_id])
    tokens: list[int] = []
    logprobs: list[float] = []
    finish = "length"
    for token, token_logprobs in generate_step(mx.array(prompt_tokens), model,
                                               max_tokens=max_tokens, sampler=sampler):
        token = int(token)
        if token in eos:
            finish = "stop"
            break
        tokens.append(token)
        logprobs.append(float(token_logprobs[token]))
    return Completion(tokenizer.decode(tokens), tokens, logprobs, finish)
