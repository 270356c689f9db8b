"""Prompts and responses to token arrays, as mlx-lm's datasets tokenize them.

A prompt is a string or a list of chat messages. With a response, the pair is rendered the way
mlx-lm's CompletionsDataset and ChatDataset render training rows (the model's chat template,
the prompt as the user's turn); the prompt's tokens are masked unless `train_on_prompt`. Without
a response, the prompt is a text row (TextDataset: the tokens plus EOS, all trained).
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import mlx.core as mx
import numpy as np

from zyquo_tui.trainer.batches import PAD_TO

Text = str | list[dict[str, Any]]


def _messages(prompt: Text) -> list[dict[str, Any]]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def has_chat_template(tokenizer) -> bool:
    """Whether the tokenizer has a chat template (an empty one renders nothing: none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def prompt_tokens(tokenizer, prompt: Text, *, chat: bool = True) -> list[int]:
    """The tokens a generation starts from, the one way every generation makes them (the
    client's `sample()`, a run's sample answers, `runs try`): the chat template's prompt with
    the assistant's turn opened (a string is one user turn), or the plain text for a model
    without a template. `chat=False` gives a text as it is, to be continued (a text row's
    beginning)."""
    if chat and has_chat_template(tokenizer):
        return list(tokenizer.apply_chat_template(_messages(prompt), add_generation_prompt=True,
                                                  return_dict=False))
    if not isinstance(prompt, str):
        raise ValueError("chat messages need a model whose tokenizer has a chat template")
    return list(tokenizer.encode(prompt))


def encode_row(tokenizer, prompt: Text, response: Text | None, train_on_prompt: bool
               ) -> tuple[list[int], int]:
    """(tokens, offset): the row's tokens and where its trained part starts."""
    if response is None:
        if not isinstance(prompt, str):  # a whole conversation, trained as mlx-lm's ChatDataset
            tokens = list(tokenizer.apply_chat_template(list(prompt), return_dict=False))
            return tokens, 0
        tokens = list(tokenizer.encode(prompt))
        if not tokens or tokens[-1] != tokenizer.eos_token_id:
            tokens.append(tokenizer.eos_token_id)
        return tokens, 0
    if not has_chat_template(tokenizer):
        if not (isinstance(prompt, str) and isinstance(response, str)):
            raise ValueError("chat messages need a model whose tokenizer has a chat template")
        head = list(tokenizer.encode(prompt))
        tail = list(tokenizer.encode(response, add_special_tokens=False))
        if not tail or tail[-1] != tokenizer.eos_token_id:
            tail.append(tokenizer.eos_token_id)
        return head + tail, 0 if train_on_prompt else len(head)
    turns = ([{"role": "assistant", "content": response}] if isinstance(response, str)
             else list(response))
    messages = _messages(prompt) + turns
    tokens = list(tokenizer.apply_chat_template(messages, return_dict=False))
    if train_on_prompt:
        return tokens, 0
    return tokens, len(prompt_tokens(tokenizer, prompt))


def pad_rows(rows: Sequence[tuple[list[int], int]], max_seq_len: int
             ) -> tuple[mx.array, mx.array, int]:
    """(tokens, lengths, truncated): rows padded as mlx-lm pads a batch (one plus a multiple of
    32 tokens, at most max_seq_len), lengths as (offset, length), and how many rows were cut."""
    lengths = [len(tokens) for tokens, _ in rows]
    width = min(1 + PAD_TO * ((max(lengths) + PAD_TO - 1) // PAD_TO), max_seq_len)
    array = np.zeros((len(rows), width), np.int32)
    spans = []
    truncated = 0
    for i, (tokens, offset) in enumerate(rows):
        kept = min(len(tokens), max_seq_len)
        truncated += kept < len(tokens)
        array[i, :kept] = tokens[:kept]
        spans.append((offset, kept))
    return mx.array(array), mx.array(spans), truncated


def encode(tokenizer, prompts: Sequence[Text], responses: Sequence[Text | None],
           train_on_prompt: bool, max_seq_len: int) -> tuple[mx.array, mx.array]:
    """A batch's arrays; rows longer than max_seq_len are cut, with a warning (as the trainer
    does)."""
    rows = [encode_row(tokenizer, p, r, train_on_prompt) for p, r in zip(prompts, responses,
                                                                          strict=True)]
    tokens, lengths, truncated = pad_rows(rows, max_seq_len)
    if truncated:
        longest = max(len(t) for t, _ in rows)
        warnings.warn(f"{truncated} of {len(rows)} rows are longer than max_seq_len "
                      f"({max_seq_len}) and were cut (the longest has {longest} tokens).",
                      stacklevel=3)
    return tokens, lengths
