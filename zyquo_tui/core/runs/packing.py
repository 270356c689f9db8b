"""Packing: each batch's rows placed into as few positions as pay, best fit first.

mlx-lm pads every batch to its longest row; on short chat rows most of each step is padding.
A packed run trains the rows of mlx-lm's batches (the same batches, in the same order) but
places each batch's rows whole into sequences (best-fit decreasing: the longest row first,
each into the fullest sequence it still fits) of the width that costs least (`pack_rows`).
Attention stays inside each row (a block-diagonal causal mask, trainer/packing.py), and each
row's trained tokens are the ones mlx-lm trains, so the per-token losses equal those of the
rows unpacked.

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


def packed_width(positions: int) -> int:
    """The narrowest width a packed sequence of `positions` is given: rounded up to a multiple
    of 8 up to 128 positions, of 16 up to 256, of 32 beyond (as mlx-lm pads). A compiled step
    traces once for each width it meets, so widths stay few; but rounded up to 32, short
    sequences lose a large share of their positions (two chat rows of 38 and 40 tokens: 96
    positions for 78), and rounded so, at most 7 below 128 (80 for those 78)."""
    step = 8 if positions <= 128 else 16 if positions <= 256 else 32
    return step * -(-positions // step)


def pack_rows(sizes: list[int], max_seq_length: int, attention_span: int
              ) -> tuple[list[list[int]], int]:
    """One step's rows (their positions, `row_positions`) as (the rows of each sequence, the
    sequences' width): the width (`packed_width`'s, from the longest row up to max_seq_length)
    that costs the least, the rows best-fit into as many sequences as it takes.

    A sequence of width W costs about W * (attention_span + W): the layers' work grows with
    its positions, attention's with their square (block-diagonal, attention still scores the
    whole square), `attention_span` being the width at which the two are equal. So the longest
    sequences are not always the cheapest: four rows of 40 tokens cost less as two sequences
    of 88 than as one of 160 on the sample model. No sequence is wider than max_seq_length,
    nor are there more sequences than rows; and since one row a sequence at the narrowest
    width is among the choices, the chosen positions never exceed the unpacked batch's
    (core/memory/estimate.py's `attention_width` counts the wider sequences).
    """
    narrowest = min(packed_width(max(sizes)), max_seq_length)
    widest = min(packed_width(sum(sizes)), max_seq_length)
    widths = [narrowest]
    while widths[-1] < widest:
        widths.append(min(packed_width(widths[-1] + 1), widest))
    best: tuple[float, list[list[int]], int] | None = None
    for width in widths:
        bins = best_fit_decreasing(sizes, width)
        cost = len(bins) * width * (attention_span + width)
        if best is None or cost < best[0]:
            best = (cost, bins, width)
    assert best is not None
    return best[1], best[2]
