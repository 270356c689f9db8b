"""Tinker's losses on token-level batches: each a sum over tokens, as Tinker defines them.

A token-level batch is what a Tinker `Datum` holds, padded to one width: `inputs` (B, T) the
tokens the model reads, `targets` (B, T) the token each position predicts, `mask` (B, T) 1 on
a datum's own positions and 0 on padding, and the loss's own per-token columns (weights,
sampling log-probabilities, advantages). Position i of `inputs` predicts `targets[i]`.

Each loss is a pure function of the target tokens' log-probabilities under the model (`lp`)
and the columns, and gives a per-token loss; the batch's loss is its sum over every datum's
positions (Tinker sums; it never averages over tokens or datums). The definitions are
Tinker's documented ones (tinker-docs, "Loss Functions"; `q` the sampling policy, `A` the
advantage, `r = exp(lp - sampling_lp)`):

| loss | per token |
|---|---|
| cross_entropy | `-weights * lp` |
| importance_sampling | `-r * A` |
| ppo | `-min(r * A, clip(r, low, high) * A)`, low 0.8 and high 1.2 by default |
| cispo | `-sg(clip(r, low, high)) * lp * A` (sg: no gradient through it), same defaults |
| dro | `-(lp * A - beta / 2 * (lp - sampling_lp)^2)`, beta 0.05 by default |

cross_entropy also takes K target tokens and weights a position (Tinker's top-k distillation:
`topk_cross_entropy_objective`), summing `-weights * lp` over the K.

The objective returns each position's log-probability and loss as metrics, so the step engine
(trainer/engine.py) hands them back with the loss: Tinker's per-datum `loss_fn_outputs`.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import mlx.core as mx
import mlx.nn as nn

# The per-token inputs each loss takes from a datum, besides target_tokens, in order.
COLUMNS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("weights",),
    "importance_sampling": ("logprobs", "advantages"),
    "ppo": ("logprobs", "advantages"),
    "cispo": ("logprobs", "advantages"),
    "dro": ("logprobs", "advantages"),
}

# Each loss's loss_fn_config keys and their defaults.
CONFIG_DEFAULTS: dict[str, dict[str, float]] = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "dro": {"beta": 0.05},
}


def cross_entropy(lp: mx.array, weights: mx.array) -> mx.array:
    return -weights * lp


def importance_sampling(lp: mx.array, sampling_lp: mx.array, advantages: mx.array) -> mx.array:
    return -mx.exp(lp - sampling_lp) * advantages


def ppo(lp: mx.array, sampling_lp: mx.array, advantages: mx.array,
        clip_low_threshold: float = 0.8, clip_high_threshold: float = 1.2) -> mx.array:
    ratio = mx.exp(lp - sampling_lp)
    clipped = mx.clip(ratio, clip_low_threshold, clip_high_threshold)
    return -mx.minimum(ratio * advantages, clipped * advantages)


def cispo(lp: mx.array, sampling_lp: mx.array, advantages: mx.array,
          clip_low_threshold: float = 0.8, clip_high_threshold: float = 1.2) -> mx.array:
    ratio = mx.exp(lp - sampling_lp)
    clipped = mx.stop_gradient(mx.clip(ratio, clip_low_threshold, clip_high_threshold))
    return -clipped * lp * advantages


def dro(lp: mx.array, sampling_lp: mx.array, advantages: mx.array, beta: float = 0.05
        ) -> mx.array:
    return -(lp * advantages - 0.5 * beta * mx.square(lp - sampling_lp))


PER_TOKEN: dict[str, Callable[..., mx.array]] = {
    "cross_entropy": cross_entropy,
    "importance_sampling": importance_sampling,
    "ppo": ppo,
    "cispo": cispo,
    "dro": dro,
}


def target_logprobs(model, inputs: mx.array, targets: mx.array) -> mx.array:
    """(B, T) log-probability of each target token under the model, in float32."""
    logits = model(inputs).astype(mx.float32)
    return -nn.losses.cross_entropy(logits, targets)


def token_objective(model, inputs: mx.array, targets: mx.array, mask: mx.array,
                    *columns: mx.array, per_token: Callable[..., mx.array]):
    """(loss, tokens, {"logprobs", "elementwise_loss"}) of a token-level batch: the sum of
    `per_token`'s loss over every datum's positions; padding contributes nothing."""
    lp = target_logprobs(model, inputs, targets) * mask
    elementwise = per_token(lp, *columns) * mask
    return elementwise.sum(), mask.sum(), {"logprobs": lp, "elementwise_loss": elementwise}


def topk_cross_entropy_objective(model, inputs: mx.array, targets: mx.array, mask: mx.array,
                                 weights: mx.array):
    """cross_entropy with K targets a position (Tinker's top-k distillation): `targets` and
    `weights` (B, T, K); the loss is the sum of `-weights * lp` over every position's K
    tokens, and `logprobs` and `elementwise_loss` come back (B, T, K)."""
    logits = model(inputs).astype(mx.float32)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    lp = mx.take_along_axis(logp, targets, axis=-1) * mask[..., None]
    elementwise = -weights * lp
    return elementwise.sum(), mask.sum(), {"logprobs": lp, "elementwise_loss": elementwise}


def objective_for(loss_fn: str, config: dict[str, float]) -> tuple[Callable, tuple]:
    """The objective of `loss_fn` with its config bound (defaults filled in), and the key the
    engine compiles it under. KeyError for an unknown loss or config key (the caller says
    which)."""
    defaults = CONFIG_DEFAULTS[loss_fn]
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise KeyError(unknown[0])
    bound = {**defaults, **{key: float(value) for key, value in config.items()}}
    per_token = partial(PER_TOKEN[loss_fn], **bound) if bound else PER_TOKEN[loss_fn]
    key = ("tinker", loss_fn, tuple(sorted(bound.items())))
    return partial(token_objective, per_token=per_token), key
