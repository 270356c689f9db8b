"""Preference pairs as token arrays: the rows, their batches, and a resumable batch order.

A row is {"prompt", "chosen", "rejected"} (strings or message lists) or a chat pair
{"chosen": [messages], "rejected": [messages]} whose shared leading messages are the prompt.
Each side is rendered as the SFT rows are (trainer/encoding.py: the chat template, the prompt
masked), so DPO and ORPO score exactly the response tokens. A batch holds the chosen sides of its
rows, then their rejected sides, padded together: one forward pass scores both.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from zyquo_tui.core.library.rows import chat_pair_prefix
from zyquo_tui.trainer.batches import BatchStream
from zyquo_tui.trainer.encoding import encode_row, pad_rows

Side = tuple[list[int], int]  # tokens and the offset where the response starts


def split_pair(row: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(prompt, chosen response, rejected response) of a row in either form."""
    if "prompt" in row:
        return row["prompt"], row["chosen"], row["rejected"]
    shared = chat_pair_prefix(row["chosen"], row["rejected"])
    return row["chosen"][:shared], row["chosen"][shared:], row["rejected"][shared:]


class PreferenceDataset:
    """Rows tokenized once, on first use (like mlx-lm's CacheDataset)."""

    def __init__(self, rows: list[dict[str, Any]], tokenizer) -> None:
        self.rows = rows
        self.tokenizer = tokenizer
        self._pairs: list[tuple[Side, Side] | None] = [None] * len(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def itemlen(self, index: int) -> int:
        """The batch order's sort key: the longer side's raw length."""
        chosen, rejected = self[index]
        return max(len(chosen[0]), len(rejected[0]))

    def __getitem__(self, index: int) -> tuple[Side, Side]:
        if self._pairs[index] is None:
            prompt, chosen, rejected = split_pair(self.rows[index])
            self._pairs[index] = (encode_row(self.tokenizer, prompt, chosen, False),
                                  encode_row(self.tokenizer, prompt, rejected, False))
        return self._pairs[index]


def pair_batch(pairs: list[tuple[Side, Side]], max_seq_length: int
               ) -> tuple[mx.array, mx.array, int]:
    """(tokens, lengths, rows cut): the chosen sides, then the rejected ones, padded together."""
    return pad_rows([c for c, _ in pairs] + [r for _, r in pairs], max_seq_length)


class PreferenceBatchStream(BatchStream):
    """BatchStream's order (sorted by length, one permutation per epoch from NumPy's global RNG,
    a position that can be saved and restored) over preference pairs."""

    def _make_batch(self, indices: list[int]) -> tuple[mx.array, mx.array]:
        pairs = [self.dataset[j] for j in indices]
        tokens, lengths, cut = pair_batch(pairs, self.max_seq_length)
        if cut:
            self.truncated_batches += 1
            self.longest_truncated = max(self.longest_truncated,
                                         max(len(s[0]) for p in pairs for s in p))
        return tokens, lengths


def validation_batches(dataset: PreferenceDataset, batch_size: int, num_batches: int,
                       max_seq_length: int):
    """The validation set in file order, batch by batch (-1: all of it), as mlx-lm validates."""
    count = len(dataset) // batch_size
    if num_batches != -1:
        count = min(count, num_batches)
    for b in range(count):
        pairs = [dataset[j] for j in range(b * batch_size, (b + 1) * batch_size)]
        tokens, lengths, _ = pair_batch(pairs, max_seq_length)
        yield tokens, lengths
