"""Packing: an SFT run's rows placed into sequences of max_seq_length tokens, best fit first.

mlx-lm pads every batch to its longest row; on short chat rows most of each step is padding.
A packed run instead fills sequences of `max_seq_length` positions with whole rows (best-fit
decreasing: the longest row first, each into the fullest sequence it still fits), and a step
trains `batch_size` such sequences. Attention stays inside each row (a block-diagonal causal
mask, trainer/packing.py), and each row's trained tokens are the ones mlx-lm trains, so the
per-token losses equal those of the rows unpacked.

Which models can be packed is decided here, from config.json alone: models whose layers carry
nothing from one position to the next but attention (rotary positions, relative, so a row
placed at offset k scores as at offset 0) are listed; recurrent, linear-attention and
sliding-window models are not (state or a window would cross from one row into the next).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Any, Iterable

# mlx-lm model types (after mlx-lm's own remapping: mistral loads as llama) whose layers are
# rotary-position attention and MLPs only, each checked against mlx-lm 0.32's code: the mask
# comes from `create_attention_mask` in the model's module, and nothing else crosses positions.
PACKABLE_MODEL_TYPES = frozenset({
    "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma", "phi3", "olmo2", "granite",
})


def packing_refusal(config: dict[str, Any] | None) -> str | None:
    """Why a model (its config.json) cannot be packed, as a clause; None when it can."""
    if not isinstance(config, dict):
        return "its config.json cannot be read"
    model_type = config.get("model_type")
    if model_type not in PACKABLE_MODEL_TYPES:
        return (f"its layers ({model_type or 'an unknown model type'}) may carry state or "
                "positions from one row into the next")
    layer_types = config.get("layer_types") or ()
    if isinstance(layer_types, list) and any(kind != "full_attention" for kind in layer_types):
        return "it has sliding-window layers, whose window would reach across rows"
    return None


def row_positions(length: int, max_seq_length: int) -> int:
    """The sequence positions a row of `length` tokens takes when packed: one per token (the
    last predicts the padding token after the row, as mlx-lm's loss trains it), or, for a row
    cut to max_seq_length, one fewer (mlx-lm's batch of such a row has no such prediction)."""
    return length if length < max_seq_length else max_seq_length - 1


def best_fit_decreasing(sizes: Iterable[int], capacity: int) -> list[list[int]]:
    """Indices of `sizes` in bins of at most `capacity`: each size, longest first (ties by
    index), goes into the fullest bin it fits, or a new one. Deterministic: the same sizes
    always give the same bins, in the order they were opened."""
    order = sorted(((size, i) for i, size in enumerate(sizes)), key=lambda p: (-p[0], p[1]))
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (room left, bin), sorted: the fullest that fits first
    for size, i in order:
        at = bisect_left(free, (size, -1))
        if at < len(free):
            room, b = free.pop(at)
        else:
            room, b = capacity, len(bins)
            bins.append([])
        bins[b].append(i)
        if room - size > 0:
            insort(free, (room - size, b))
    return bins


def packed_sequences(lengths: Iterable[int], max_seq_length: int) -> list[list[int]]:
    """The rows (indices) of each packed sequence, for rows of these token lengths."""
    return best_fit_decreasing([row_positions(n, max_seq_length) for n in lengths],
                               max_seq_length)


def packed_batches(lengths: Iterable[int], batch_size: int, max_seq_length: int) -> int:
    """How many whole batches one epoch of packed sequences makes (the sequences left over
    are never trained, as mlx-lm's rows that fill no batch are not)."""
    return len(packed_sequences(lengths, max_seq_length)) // batch_size
