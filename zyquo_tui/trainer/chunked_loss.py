"""Cross-entropy over the output projection a slice of tokens at a time (issue 17).

mlx-lm computes the logits of the whole batch at once, (batch, tokens, vocabulary), and keeps
them, their softmax and their gradient until the backward pass: for a 151,936-token vocabulary
at 4 x 1,024 tokens that is gigabytes. Here the backbone's hidden states are computed as usual,
and then, slice by slice of at most `chunk_tokens` tokens, the projection, the cross-entropy and
its gradient with respect to the hidden states are computed together in the forward pass (as
Liger's fused linear cross-entropy and Apple's Cut Cross-Entropy do): a slice's logits are
dropped as soon as its loss and gradient exist, and nothing is recomputed. The gradient of a
token's cross-entropy depends on that token's hidden state alone (the output weight is frozen),
so it is kept per token (the size of the hidden states) and scaled by whatever weight the loss
gives the token when the backward pass arrives (`mx.custom_function`'s vjp): the same slices
serve SFT, DPO, ORPO and policy gradients, and the whole step stays one compiled function.

A slice's gradient is written out (softmax minus the target's one-hot, then back through the
head) rather than differentiated, which holds two logit-sized arrays per slice instead of the
four of MLX's own backward. Each slice's input depends on the previous slice's outputs
(`mx.depends`), so slices run in order; MLX still queues some operations ahead of the device
and allocates their outputs when it queues them, so a few slices' logits can exist at once
(docs/memory.md has the measured peaks).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten


def output_head(model: nn.Module) -> tuple[Callable, Callable] | None:
    """(backbone, head) with model(x) == head(backbone(x)), for mlx-lm's models that end in
    a plain output projection: the tied embedding's `as_linear` (Embedding or
    QuantizedEmbedding) or `lm_head` (Linear or QuantizedLinear). None for any other model
    (logit soft-capping, scaled logits, a trained head): those keep the whole-batch loss."""
    backbone = getattr(model, "model", None)
    if backbone is None or not callable(backbone):
        return None
    args = getattr(model, "args", None)
    if getattr(args, "tie_word_embeddings", False) or not hasattr(model, "lm_head"):
        embedding = getattr(backbone, "embed_tokens", None)
        head = getattr(embedding, "as_linear", None)
        head_module = embedding
    else:
        head = model.lm_head
        head_module = model.lm_head
    if head is None or tree_flatten(head_module.trainable_parameters()):
        return None  # a trained head needs its own gradient, which the slices do not give
    if not _same_logits(model, backbone, head):
        return None
    return backbone, head


def _same_logits(model: nn.Module, backbone: Callable, head: Callable) -> bool:
    """Whether the model's own logits are head(backbone(x)), on a two-token probe (dropout
    off for the probe): the one check that holds for any architecture."""
    training = model.training
    model.eval()
    try:
        probe = mx.array([[1, 2]])
        whole = model(probe)
        split = head(backbone(probe))
        return whole.shape == split.shape and bool(mx.allclose(whole, split).item())
    except Exception:  # a model whose pieces do not compose so: not chunked
        return False
    finally:
        model.train(training)


def _slice_loss_and_gradient(head: Callable, hidden: mx.array, targets: mx.array
                              ) -> tuple[mx.array, mx.array]:
    """One slice's cross-entropy per token (as nn.losses.cross_entropy computes it, in the
    logits' dtype) and its gradient with respect to `hidden` (softmax minus one-hot, back
    through the head: for a quantized or tied head the same vjp MLX would take)."""
    logits = head(hidden)
    lse = mx.logsumexp(logits, axis=-1, keepdims=True)
    picked = mx.take_along_axis(logits, targets[:, None], axis=-1)
    ce = (lse - picked).squeeze(-1)
    vocabulary = mx.arange(logits.shape[-1])
    probabilities = mx.exp(logits - lse)
    gradient = mx.where(vocabulary == targets[:, None], probabilities - 1, probabilities)
    _, (d_hidden,) = mx.vjp(head, [hidden], [gradient])
    return ce, d_hidden


def _slice_loss(head: Callable, hidden: mx.array, targets: mx.array) -> mx.array:
    return nn.losses.cross_entropy(head(hidden), targets)


def _in_slices(chunk_tokens: int, hidden: mx.array, targets: tuple[mx.array, ...],
               each: Callable) -> list[tuple[mx.array, ...]]:
    """`each(hidden_slice, *target_slices)` over the flattened tokens (each target array has
    a row per token, after the batch and sequence axes), each slice made to wait for the
    previous one's outputs."""
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_targets = [t.reshape(-1, *t.shape[hidden.ndim - 1:]) for t in targets]
    results: list[tuple[mx.array, ...]] = []
    for start in range(0, flat_hidden.shape[0], chunk_tokens):
        piece = flat_hidden[start:start + chunk_tokens]
        if results:
            piece = mx.depends(piece, list(results[-1]))
        results.append(each(piece, *(t[start:start + chunk_tokens] for t in flat_targets)))
    return results


def _fused(chunk_tokens: int, each: Callable) -> Callable:
    """(hidden, *targets) -> (a value per token, its gradient with respect to that token's
    hidden state), differentiable with respect to `hidden` through the second output:
    `each(hidden_slice, *target_slices)` gives both for one slice."""

    @mx.custom_function
    def fused(hidden, *targets):
        parts = _in_slices(chunk_tokens, hidden, targets, each)
        values = mx.concatenate([part[0] for part in parts]).reshape(hidden.shape[:-1])
        d_hidden = mx.concatenate([part[1] for part in parts]).reshape(hidden.shape)
        return values, d_hidden

    @fused.vjp
    def fused_vjp(primals, cotangents, outputs):
        weight = cotangents[0][..., None].astype(outputs[1].dtype)
        return (weight * outputs[1], *(mx.zeros_like(target) for target in primals[1:]))

    return fused


class SlicedCrossEntropy:
    """Per-token losses of a model's next-token predictions, computed in slices.

    `__call__(model_inputs, targets, mask)` returns (B, T) cross-entropy in the logits' dtype,
    0 where `mask` is False, differentiable with respect to the model's trainable weights;
    `forward` the same values without the gradient's work (validation, reference scores).
    `per_token(model_inputs, loss, *targets)` does the same for any per-token loss of the
    logits (distillation's KL), where `loss(logits, *targets)` reduces the vocabulary axis.
    """

    def __init__(self, backbone: Callable, head: Callable, chunk_tokens: int) -> None:
        self.backbone = backbone
        self.head = head
        self.chunk_tokens = chunk_tokens
        self._fused = _fused(chunk_tokens, partial(_slice_loss_and_gradient, head))

    def at_temperature(self, temperature: float) -> "SlicedCrossEntropy":
        """The same slices of softmax(logits / temperature): a grpo run scores its answers at
        the temperature it sampled them at."""
        if temperature == 1.0:
            return self
        head = self.head
        return SlicedCrossEntropy(self.backbone,
                                  lambda hidden: head(hidden).astype(mx.float32) / temperature,
                                  self.chunk_tokens)

    def worth_it(self, tokens: mx.array) -> bool:
        """Whether a batch has more predictions than one slice: a batch of one slice or less
        gains nothing from slicing."""
        return tokens.shape[0] * (tokens.shape[1] - 1) > self.chunk_tokens

    def __call__(self, inputs: mx.array, targets: mx.array, mask: mx.array) -> mx.array:
        return self.of_hidden(self.backbone(inputs), targets, mask)

    def forward(self, inputs: mx.array, targets: mx.array, mask: mx.array) -> mx.array:
        return self.forward_of_hidden(self.backbone(inputs), targets, mask)

    def of_hidden(self, hidden: mx.array, targets: mx.array, mask: mx.array) -> mx.array:
        """`__call__` from the backbone's last hidden states, already computed (a GRPO step's
        answers, trainer/shared_prompts.py)."""
        ce, _ = self._fused(hidden, targets)
        return mx.where(mask, ce, 0)

    def forward_of_hidden(self, hidden: mx.array, targets: mx.array, mask: mx.array
                          ) -> mx.array:
        """`forward` from the backbone's last hidden states."""
        parts = _in_slices(self.chunk_tokens, hidden, (targets,),
                           lambda h, t: (_slice_loss(self.head, h, t),))
        ce = mx.concatenate([part[0] for part in parts]).reshape(targets.shape)
        return mx.where(mask, ce, 0)

    def per_token(self, inputs: mx.array, loss: Callable, *targets: mx.array) -> mx.array:
        """(B, T) `loss(logits, *targets)` per token, a slice of logits at a time. A slice's
        gradient with respect to its hidden states is MLX's own (`mx.vjp`), taken in the
        forward pass as the cross-entropy's is."""

        def each(hidden, *target_slices):
            def of_hidden(h):
                return loss(self.head(h), *target_slices)

            (values,), (d_hidden,) = mx.vjp(of_hidden, [hidden], [mx.ones(hidden.shape[:-1])])
            return values, d_hidden

        values, _ = _fused(self.chunk_tokens, each)(self.backbone(inputs), *targets)
        return values


def sliced_cross_entropy(model: nn.Module, chunk_tokens: int) -> SlicedCrossEntropy | None:
    """The sliced loss for `model`, or None when its logits are not a plain projection of
    its backbone's output (then the whole-batch loss is used)."""
    pieces = output_head(model)
    if pieces is None:
        return None
    return SlicedCrossEntropy(*pieces, chunk_tokens)


def loss_slicing(model: nn.Module, setting) -> tuple[SlicedCrossEntropy | None, str | None]:
    """The sliced loss a run's `loss_chunk_tokens` setting (a count, or "off") asks for, and
    a sentence when it asked for slices that this model cannot have."""
    if not isinstance(setting, int) or isinstance(setting, bool):
        return None, None
    sliced = sliced_cross_entropy(model, setting)
    if sliced is None:
        return None, ("This model's logits are not a plain projection of its last hidden "
                      "states (or its output layer is trained), so the loss is computed for "
                      "the whole batch at once, as mlx-lm does: loss_chunk_tokens is ignored.")
    return sliced, None
