"""Prompts with answers, the rows GRPO learns from: their tokens, batches and resumable order.

A row is {"prompt": text, "answer": ...} or {"messages": [... ending in a user turn], "answer":
...} (core/library/rows.py's PROMPTS format), optionally with a `type` that reward functions
receive as mlx-lm-lora's do. The prompt is rendered as every generation renders one
(encoding.prompt_tokens: the chat template with the assistant's turn opened), so the answers
a run samples are the ones `runs try` would give. A batch is the rows themselves: the trainer
samples their answers (trainer/grpo.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zyquo_tui.trainer.batches import BatchStream
from zyquo_tui.trainer.encoding import prompt_tokens


@dataclass(frozen=True)
class PromptRow:
    tokens: list[int]  # the prompt's tokens, as generation starts from them
    text: str  # the prompt as reward functions receive it: the last user turn's text
    answer: str  # the row's answer, as text
    type: Any = None  # the row's `type`, when it has one


def prompt_text(row: dict[str, Any]) -> str:
    if "prompt" in row:
        return str(row["prompt"])
    content = row["messages"][-1].get("content", "")
    return content if isinstance(content, str) else " ".join(
        part.get("text", "") for part in content if isinstance(part, dict))


class PromptDataset:
    """Rows tokenized once, on first use (like mlx-lm's CacheDataset)."""

    def __init__(self, rows: list[dict[str, Any]], tokenizer) -> None:
        self.rows = rows
        self.tokenizer = tokenizer
        self._encoded: list[PromptRow | None] = [None] * len(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def itemlen(self, index: int) -> int:
        return len(self[index].tokens)

    @property
    def has_types(self) -> bool:
        return any("type" in row for row in self.rows)

    def __getitem__(self, index: int) -> PromptRow:
        if self._encoded[index] is None:
            row = self.rows[index]
            prompt = row["prompt"] if "prompt" in row else row["messages"]
            self._encoded[index] = PromptRow(prompt_tokens(self.tokenizer, prompt),
                                             prompt_text(row), str(row["answer"]),
                                             row.get("type"))
        return self._encoded[index]


class PromptBatchStream(BatchStream):
    """BatchStream's order (by prompt length, one permutation per epoch from NumPy's global
    RNG, a position that can be saved and restored) over prompt rows; a batch is its rows,
    each prompt cut to its last max_seq_length tokens."""

    def _make_batch(self, indices: list[int]) -> list[PromptRow]:
        rows = [self.dataset[j] for j in indices]
        return [cut(row, self.max_seq_length) for row in rows]


def cut(row: PromptRow, max_seq_length: int) -> PromptRow:
    if len(row.tokens) <= max_seq_length:
        return row
    return PromptRow(row.tokens[-max_seq_length:], row.text, row.answer, row.type)


def validation_rows(dataset: PromptDataset, batch_size: int, num_batches: int,
                    max_seq_length: int):
    """The validation prompts in file order, batch by batch (-1: all of it)."""
    count = len(dataset) // batch_size
    if num_batches != -1:
        count = min(count, num_batches)
    for b in range(count):
        yield [cut(dataset[j], max_seq_length)
               for j in range(b * batch_size, (b + 1) * batch_size)]
