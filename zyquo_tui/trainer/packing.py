"""A packed batch's forward pass: attention kept inside each row of a packed sequence.

mlx-lm's models build their own causal mask (`create_attention_mask`, imported into each
model's module from mlx_lm/models/base.py) from the input's length. For the length of a packed
forward pass, `packed_attention` puts a block-diagonal causal mask in its place in the model's
module: a position attends to the positions before it in its own row only (padding, row 0,
to padding). Rotary positions are relative, so a row placed at offset k in a sequence scores
as it does alone at offset 0, up to rounding (tests/functional/test_packing.py checks the
per-token losses against the same rows unpacked); which models qualify is
core/runs/packing.py's list. Under `mx.compile`, the mask is traced from the segments array,
an input of the compiled step, so one trace serves every batch of its shape.
"""

from __future__ import annotations

import contextlib
import sys
import threading

import mlx.core as mx
import mlx.nn as nn

_lock = threading.Lock()


def block_causal_mask(segments: mx.array) -> mx.array:
    """(B, 1, T, T) bool: position i attends to j when j <= i and both hold the same row."""
    width = segments.shape[1]
    causal = mx.arange(width)[:, None] >= mx.arange(width)[None, :]
    same_row = segments[:, :, None] == segments[:, None, :]
    return mx.logical_and(same_row, causal)[:, None, :, :]


def _mask_modules(model: nn.Module) -> list:
    """The modules whose `create_attention_mask` the model's forward pass calls."""
    found = []
    for part in (model, getattr(model, "model", None)):
        module = sys.modules.get(type(part).__module__) if part is not None else None
        if module is not None and hasattr(module, "create_attention_mask") \
                and module not in found:
            found.append(module)
    if not found:
        raise RuntimeError(f"{type(model).__module__} builds no attention mask packing can "
                           "replace")
    return found


@contextlib.contextmanager
def packed_attention(model: nn.Module, segments: mx.array):
    """Inside: the model's forward passes attend within the rows `segments` marks."""
    mask = block_causal_mask(segments)

    def create_attention_mask(h, cache=None, window_size=None, return_array=False):
        return mask

    modules = _mask_modules(model)
    with _lock:
        saved = [(module, module.create_attention_mask) for module in modules]
        for module, _ in saved:
            module.create_attention_mask = create_attention_mask
        try:
            yield
        finally:
            for module, original in saved:
                module.create_attention_mask = original
