"""Training batches in mlx-lm's exact order, with a position that can be saved and restored.

This mirrors `mlx_lm.tuner.trainer.iterate_batches` (mlx-lm 0.32) line for line in what it
yields and in how it draws from NumPy's global random state, so a run trains on the same batches
as `mlx_lm lora`. What mlx-lm's generator cannot do is say where it is: `position()` and
`restore()` make exact resume possible (the permutation of the current epoch and the index
within it; the global RNG state is saved beside it by the checkpoint code).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.tuner.datasets import CacheDataset

from zyquo_tui.core.runs.packing import pack_rows, row_positions

PAD_TO = 32  # mlx-lm pads each batch to one plus a multiple of 32 tokens


class BatchStream:
    """An endless stream of (batch, lengths) pairs, epoch after epoch, like mlx-lm's loop=True."""

    def __init__(self, dataset: CacheDataset, batch_size: int, max_seq_length: int,
                 rank: int = 0, world_size: int = 1) -> None:
        if len(dataset) < batch_size:
            raise ValueError(
                f"Dataset must have at least batch_size={batch_size}"
                f" examples but only has {len(dataset)}."
            )
        if batch_size % world_size != 0:
            raise ValueError("The batch size must be divisible by the number of workers")
        self.dataset = dataset
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        # A distributed run splits each batch across the ranks: rank r of n takes its rows
        # r, r + n, r + 2n... (mlx-lm's comm_group offset and step).
        self.rows_per_rank = batch_size // world_size
        # mlx-lm sorts by CacheDataset.itemlen, which is the length of the raw row: keep it.
        idx = sorted(range(len(dataset)), key=dataset.itemlen)
        self.batch_idx = [
            idx[i + rank : i + rank + batch_size : world_size]
            for i in range(0, len(idx) - batch_size + 1, batch_size)
        ]
        self.permutation: np.ndarray | None = None
        self.index = 0
        self.truncated_batches = 0
        self.longest_truncated = 0

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self) -> tuple[mx.array, mx.array]:
        if self.permutation is None or self.index >= len(self.permutation):
            # Drawn lazily, when the first batch of an epoch is asked for, as mlx-lm does:
            # validation draws from the same global RNG in between.
            self.permutation = np.random.permutation(len(self.batch_idx))
            self.index = 0
        i = self.permutation[self.index]
        self.index += 1
        return self._make_batch(self.batch_idx[i])

    def _make_batch(self, indices: list[int]) -> tuple[mx.array, mx.array]:
        batch = [self.dataset[j] for j in indices]
        if len(batch[0]) == 2:
            batch, offsets = zip(*batch)
        else:
            offsets = [0] * len(batch)
        lengths = [len(x) for x in batch]
        if max(lengths) > self.max_seq_length:
            self.truncated_batches += 1
            self.longest_truncated = max(self.longest_truncated, max(lengths))
        max_length_in_batch = 1 + PAD_TO * ((max(lengths) + PAD_TO - 1) // PAD_TO)
        max_length_in_batch = min(max_length_in_batch, self.max_seq_length)
        batch_arr = np.zeros((self.rows_per_rank, max_length_in_batch), np.int32)
        for j in range(self.rows_per_rank):
            truncated_length = min(lengths[j], self.max_seq_length)
            batch_arr[j, :truncated_length] = batch[j][:truncated_length]
            lengths[j] = truncated_length
        return mx.array(batch_arr), mx.array(list(zip(offsets, lengths)))

    def position(self) -> dict[str, Any]:
        return {
            "permutation": None if self.permutation is None else self.permutation.tolist(),
            "index": self.index,
            "batches_per_epoch": len(self.batch_idx),
        }

    def restore(self, position: dict[str, Any]) -> None:
        if position.get("packed") and not isinstance(self, PackedBatchStream):
            raise ValueError("the checkpoint was saved by a run that packed its rows")
        if position.get("batches_per_epoch") != len(self.batch_idx):
            raise ValueError(
                "the training data changed since the checkpoint was saved "
                f"({position.get('batches_per_epoch')} batches per epoch then, "
                f"{len(self.batch_idx)} now)"
            )
        perm = position.get("permutation")
        self.permutation = None if perm is None else np.array(perm, dtype=np.int64)
        self.index = int(position["index"])


class PackedBatchStream(BatchStream):
    """An SFT run's batches, each packed: the rows of mlx-lm's batch (BatchStream's: the same
    rows, in the same order of batches, drawn from the same RNG, so position() and restore()
    are BatchStream's and an epoch trains each row once, as unpacked) placed into as few
    positions as pay (core/runs/packing.py's `pack_rows`). A step trains the rows an unpacked
    step trains and its loss is theirs, within rounding; only the padding is gone.

    A batch is (inputs, targets, mask, segments), each (sequences, width): the tokens, the
    token each position predicts (0 after a row's last token, as mlx-lm's padded batch has it),
    whether that prediction is trained (mlx-lm's mask: from the row's offset), and which row
    of the sequence a position holds (1, 2...; 0 is padding), for the mask that keeps attention
    inside each row (trainer/packing.py). `attention_span`: pack_rows's, the width at which a
    sequence's attention costs as much as its other layers (about three times the model's
    hidden size on the sample model, measured).
    """

    def __init__(self, dataset: CacheDataset, batch_size: int, max_seq_length: int,
                 rank: int = 0, world_size: int = 1, attention_span: int = 1024) -> None:
        super().__init__(dataset, batch_size, max_seq_length, rank, world_size)
        self.attention_span = attention_span

    def _row(self, j: int) -> tuple[list[int], int]:
        item = self.dataset[j]
        return (item[0], item[1]) if len(item) == 2 else (item, 0)

    def rows_of(self, indices: list[int]) -> list[list[int]]:
        """The dataset rows of each sequence a batch of these rows (its batch_idx list) packs
        into, in the order _make_batch places them."""
        limit = self.max_seq_length
        sizes = [row_positions(len(self._row(j)[0]), limit) for j in indices]
        bins, _ = pack_rows(sizes, limit, self.attention_span)
        return [[indices[i] for i in b] for b in bins]

    def _make_batch(self, indices: list[int]) -> tuple[mx.array, ...]:
        limit = self.max_seq_length
        rows = [self._row(j) for j in indices]
        sizes = [row_positions(len(tokens), limit) for tokens, _ in rows]
        bins, width = pack_rows(sizes, limit, self.attention_span)
        if max(len(tokens) for tokens, _ in rows) > limit:  # counted as BatchStream counts
            self.truncated_batches += 1
            self.longest_truncated = max(self.longest_truncated,
                                         max(len(tokens) for tokens, _ in rows))
        shape = (len(bins), width)
        inputs = np.zeros(shape, np.int32)
        targets = np.zeros(shape, np.int32)
        mask = np.zeros(shape, np.bool_)
        segments = np.zeros(shape, np.int32)
        for b, members in enumerate(bins):
            start = 0
            for r, i in enumerate(members, start=1):
                tokens, offset = rows[i]
                n = sizes[i]
                if n < len(tokens):  # cut at max_seq_length: its last kept token predicts
                    following = tokens[1:n + 1]  # the next one, as mlx-lm's cut row does
                else:
                    following = list(tokens[1:]) + [0]
                end = start + n
                inputs[b, start:end] = tokens[:n]
                targets[b, start:end] = following
                # mlx-lm's mask: the prediction of the row's token k (k = 1 .. length, the last
                # being the padding after it) is trained when k >= offset.
                mask[b, start:end] = np.arange(1, n + 1) >= offset
                segments[b, start:end] = r
                start = end
        return (mx.array(inputs), mx.array(targets), mx.array(mask), mx.array(segments))

    def position(self) -> dict[str, Any]:
        return {**super().position(), "packed": True}

    def restore(self, position: dict[str, Any]) -> None:
        if not position.get("packed"):
            raise ValueError("the checkpoint was saved by a run that did not pack its rows")
        super().restore(position)
