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
