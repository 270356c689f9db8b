"""Cross-entropy over the output projection a slice of tokens at a time (issue 17).

mlx-lm computes the logits of the whole batch at once, (batch, tokens, vocabulary), and keeps
them, their float32 softmax and their gradient until the backward pass: for a 151,936-token
vocabulary at 4 x 1,024 tokens that is gigabytes. Here the backbone's hidden states are computed
as usual, and then for each slice of at most `chunk_tokens` target tokens the projection, the
cross-entropy and its gradient with respect to the hidden states are computed and evaluated
before the next slice starts, so only one slice's logits ever exist. The gradient of each
token's cross-entropy depends on that token's hidden state alone, so it is kept per token (the
size of the hidden states) and scaled by whatever weight the loss gives the token when the
backward pass arrives (`mx.custom_function`'s vjp): no logits are recomputed, and the same
slices serve SFT, DPO, ORPO and policy gradients.

Tokens outside the loss's mask are never projected (their cross-entropy is 0, as the mask
makes it in mlx-lm), so prompts under mask_prompt and padding cost nothing.

Why the slices are evaluated one by one: MLX schedules work ahead of the device, allocating
every output when an operation is queued, so a lazy graph of slices holds all their logits at
once however it is ordered. Evaluating inside the loss needs two things: the step is not
compiled (mx.compile forbids evaluation; the slice itself is compiled), and the slice works on
a copy of the hidden states that is no tracer of the gradient transform, or MLX would keep
every slice's logits alive for the backward pass.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

# Marks an objective that evaluates inside itself: the step engine runs it uncompiled.
EAGER_ATTRIBUTE = "evaluates_in_slices"


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


def _untraced(array: mx.array) -> mx.array:
    """An evaluated copy of `array` that is no tracer of a gradient transform (a round trip
    through NumPy, in float32 for bfloat16's sake; exact for every float dtype)."""
    if array.dtype in (mx.float32, mx.int32, mx.bool_):
        return mx.array(np.array(array))
    return mx.array(np.array(array.astype(mx.float32))).astype(array.dtype)


def _slice_function(head: Callable) -> Callable:
    def slice_loss(hidden: mx.array, targets: mx.array):
        def cross_entropy(h):
            return nn.losses.cross_entropy(head(h), targets)
        (ce,), (dh,) = mx.vjp(cross_entropy, [hidden], [mx.ones(targets.shape, hidden.dtype)])
        return ce, dh
    return mx.compile(slice_loss)


def _forward_function(head: Callable) -> Callable:
    return mx.compile(lambda hidden, targets: nn.losses.cross_entropy(head(hidden), targets))


class SlicedCrossEntropy:
    """Per-token cross-entropy of a model's next-token predictions, computed in slices.

    `__call__(model_inputs, targets, mask)` returns (B, T) cross-entropy in the logits' dtype,
    0 where `mask` is False, differentiable with respect to the model's trainable weights.
    """

    def __init__(self, backbone: Callable, head: Callable, chunk_tokens: int) -> None:
        self.backbone = backbone
        self.chunk_tokens = chunk_tokens
        self._with_gradient = _slice_function(head)
        self._forward_only = _forward_function(head)

    def worth_it(self, tokens: mx.array) -> bool:
        """Whether a batch has more predictions than one slice: a batch of one slice or less
        gains nothing and trains faster as one compiled step."""
        return tokens.shape[0] * (tokens.shape[1] - 1) > self.chunk_tokens

    def __call__(self, inputs: mx.array, targets: mx.array, mask: mx.array) -> mx.array:
        hidden = self.backbone(inputs)
        slices = self

        @mx.custom_function
        def sliced(hidden, targets, mask):
            ce, dh = slices._compute(hidden, targets, mask, gradient=True)
            return ce, dh

        @sliced.vjp
        def sliced_vjp(primals, cotangents, outputs):
            _, targets, mask = primals
            weight = cotangents[0][..., None].astype(outputs[1].dtype)
            return weight * outputs[1], mx.zeros_like(targets), mx.zeros_like(mask)

        return sliced(hidden, targets, mask)[0]

    def forward(self, inputs: mx.array, targets: mx.array, mask: mx.array) -> mx.array:
        """The same cross-entropy without its gradient (validation, reference scores)."""
        return self._compute(self.backbone(inputs), targets, mask, gradient=False)[0]

    def _compute(self, hidden, targets, mask, gradient: bool):
        mx.eval(hidden, targets, mask)
        width = hidden.shape[-1]
        flat_hidden = _untraced(hidden).reshape(-1, width)
        flat_targets = _untraced(targets.astype(mx.int32)).reshape(-1)
        picked = np.flatnonzero(np.array(mask).reshape(-1))
        count = flat_targets.shape[0]
        ce_parts, dh_parts = [], []
        for start in range(0, len(picked), self.chunk_tokens):
            rows = mx.array(picked[start:start + self.chunk_tokens])
            h, t = flat_hidden[rows], flat_targets[rows]
            if gradient:
                ce, dh = self._with_gradient(h, t)
                mx.eval(ce, dh)
                dh_parts.append(dh)
            else:
                ce = self._forward_only(h, t)
                mx.eval(ce)
            ce_parts.append(ce)
        dtype = ce_parts[0].dtype if ce_parts else hidden.dtype
        ce_all = mx.zeros((count,), dtype)
        dh_all = mx.zeros(flat_hidden.shape, hidden.dtype) if gradient else None
        if ce_parts:
            rows = mx.array(picked)
            ce_all[rows] = mx.concatenate(ce_parts)
            if gradient:
                dh_all[rows] = mx.concatenate(dh_parts)
        ce_all = ce_all.reshape(targets.shape)
        return ce_all, (dh_all.reshape(hidden.shape) if gradient else None)


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


def with_slices(objective: Callable, sliced: SlicedCrossEntropy, **constants) -> Callable:
    """`objective` bound to the sliced loss (and its other constants), marked for the step
    engine to run uncompiled."""
    bound = partial(objective, sliced=sliced, **constants)
    setattr(bound, EAGER_ATTRIBUTE, True)
    return bound


def evaluates_in_slices(objective: Callable) -> bool:
    return bool(getattr(objective, EAGER_ATTRIBUTE, False))
