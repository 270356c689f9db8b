"""Answers that share a prompt, scored with the prompt computed once (a GRPO step's batch).

A GRPO batch is B prompts with G sampled answers each. Scored as B x G whole sequences (prompt
then answer), each prompt goes through the model G times, forward and backward, and the output
head runs on every prompt position though only the prompt's last one predicts a trained token.
Here the prompts go through the model once, left-padded to one width (B rows); each layer's keys
and values of a prompt are repeated for its G answers, which continue from them (B x G rows), as
generation continues from a KV cache; the output head runs only where a trained token is
predicted: the prompt's last position and the answer's own. The positions (RoPE offsets per
row), the masks and so the values are those of the whole sequences, and the gradient flows back
into the prompt's part through the repeat (its G copies' gradients summed). With dropout (a
LoRA dropout), a prompt's answers share the one draw of its prompt's part, where whole
sequences would each draw their own.

The layout of a batch (grpo.Sampler makes it): `prompts` (B, P) left-padded, `padding` (B,) the
pad tokens before each prompt, `answers` (B x G, A) right-padded (row i answers prompt
i // G), `lengths` (B x G,) the tokens of each answer. Models whose layers all keep plain
key-value caches and whose logits are a plain projection of the last hidden states take it
(`SharedPrompts.for_model` checks on a probe); others are scored as whole sequences.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn


class _Continuation:
    """One attention layer's keys and values for a forward pass that continues `start`
    positions already held (none for the prompts), in the interface mlx-lm's attention layers
    call (`offset`, `update_and_fetch`, `make_mask`). Row r's first `padding[r]` positions are
    padding: no query attends to them but the padding itself, so that every query attends to
    something (a softmax over nothing has no value, and a backward pass would spread it)."""

    def __init__(self, padding: mx.array, start: int = 0, keys: mx.array | None = None,
                 values: mx.array | None = None) -> None:
        self.padding = padding
        self.start = start
        self.offset = start - padding  # each row's RoPE position of its next token
        self.keys, self.values = keys, values

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self.keys is not None:
            keys = mx.concatenate([self.keys, keys], axis=2)
            values = mx.concatenate([self.values, values], axis=2)
        self.keys, self.values = keys, values
        return keys, values

    def make_mask(self, N: int, return_array: bool = False, window_size=None, **_):
        if window_size is not None:
            raise ValueError("sliding-window attention is scored as whole sequences")
        queries = mx.arange(self.start, self.start + N)[:, None]
        keys = mx.arange(self.start + N)[None]
        seen = (keys <= queries) & (keys >= self.padding[:, None, None, None])
        return seen | (keys == queries)

    def repeated(self, group: int) -> "_Continuation":
        """The same positions for `group` rows each, to continue from."""
        return _Continuation(mx.repeat(self.padding, group, axis=0),
                             self.start + self.keys.shape[2],
                             mx.repeat(self.keys, group, axis=0),
                             mx.repeat(self.values, group, axis=0))


class SharedPrompts:
    """A model's scoring of answers that share prompts: its backbone (the model up to its last
    hidden states) and its output head, as trainer/chunked_loss.py's `output_head` finds them."""

    def __init__(self, backbone: Callable, head: Callable, layers: int) -> None:
        self.backbone = backbone
        self.head = head
        self.layers = layers

    def at_temperature(self, temperature: float) -> "SharedPrompts":
        """The same scoring of softmax(logits / temperature) (a grpo run's sampling
        temperature)."""
        if temperature == 1.0:
            return self
        head = self.head
        return SharedPrompts(self.backbone,
                             lambda hidden: head(hidden).astype(mx.float32) / temperature,
                             self.layers)

    @classmethod
    def for_model(cls, model: nn.Module) -> "SharedPrompts | None":
        """The scoring for `model`, or None when it cannot have it: its logits are not a plain
        projection of its backbone's output, a layer keeps another cache than plain keys and
        values (sliding windows, recurrent state), or the shared scoring differs from the
        whole sequences' on a probe of two prompts of different lengths (dropout off)."""
        from mlx_lm.models.cache import KVCache, make_prompt_cache

        from zyquo_tui.trainer.chunked_loss import output_head

        pieces = output_head(model)
        if pieces is None:
            return None
        try:
            caches = make_prompt_cache(model)
        except Exception:  # a model without layers mlx-lm can cache
            return None
        if not caches or any(type(cache) is not KVCache for cache in caches):
            return None
        shared = cls(*pieces, len(caches))
        training = model.training
        model.eval()
        try:
            return shared if shared._same_as_whole_sequences(model) else None
        except Exception:  # a model whose layers do not continue from such a cache
            return None
        finally:
            model.train(training)

    def _same_as_whole_sequences(self, model: nn.Module) -> bool:
        prompts = [[1, 2, 3], [4, 5]]
        answers = [[6, 7], [8], [9, 10], [11, 12]]
        arrays = layout(prompts, answers, group=2, pad_to=1)
        shared, mask = self.answer_logprobs(*arrays)
        whole = []
        for row, answer in enumerate(answers):
            sequence = prompts[row // 2] + answer
            logits = model(mx.array(sequence[:-1])[None])[0, len(prompts[row // 2]) - 1:]
            scores = -nn.losses.cross_entropy(logits, mx.array(answer))
            whole.append(mx.pad(scores, (0, shared.shape[1] - len(answer))))
        whole = mx.stack(whole)
        return bool(mx.allclose(mx.where(mask, shared, 0), mx.where(mask, whole, 0),
                                atol=1e-4).item())

    def hidden(self, prompts: mx.array, padding: mx.array, answers: mx.array) -> mx.array:
        """(B x G, A, H): the last hidden state before each answer token (the prompt's last
        position's for the first, the answer's own for the rest)."""
        group = answers.shape[0] // prompts.shape[0]
        caches = [_Continuation(padding) for _ in range(self.layers)]
        prompt_hidden = self.backbone(prompts, cache=caches)
        before_first = mx.repeat(prompt_hidden[:, -1:, :], group, axis=0)
        if answers.shape[1] < 2:
            return before_first
        caches = [cache.repeated(group) for cache in caches]
        answer_hidden = self.backbone(answers[:, :-1], cache=caches)
        return mx.concatenate([before_first, answer_hidden], axis=1)

    def answer_logprobs(self, prompts: mx.array, padding: mx.array, answers: mx.array,
                        lengths: mx.array, sliced: Callable | None = None
                        ) -> tuple[mx.array, mx.array]:
        """(B x G, A) log-probability of each answer token (0 past its end) and their mask.
        `sliced(hidden, targets, mask)`: the cross-entropy computed a slice of tokens at a time
        (trainer/chunked_loss.py); the whole batch's logits at once without it."""
        hidden = self.hidden(prompts, padding, answers)
        mask = mx.arange(answers.shape[1])[None] < lengths[:, None]
        if sliced is None:
            ce = nn.losses.cross_entropy(self.head(hidden), answers)
        else:
            ce = sliced(hidden, answers, mask)
        return mx.where(mask, -ce.astype(mx.float32), 0), mask


def layout(prompts: list[list[int]], answers: list[list[int]], group: int, pad_to: int
           ) -> tuple[mx.array, mx.array, mx.array, mx.array]:
    """(prompts, padding, answers, lengths) of a batch: the prompts left-padded and the answers
    right-padded with token 0, each to a multiple of `pad_to` tokens (every new width is one
    more compilation of the step); row i of the answers answers prompt i // group."""
    import numpy as np

    def width(rows: list[list[int]]) -> int:
        return -(-max(len(row) for row in rows) // pad_to) * pad_to

    prompt_width, answer_width = width(prompts), width(answers)
    prompt_array = np.zeros((len(prompts), prompt_width), np.int32)
    padding = np.zeros(len(prompts), np.int32)
    for row, prompt in enumerate(prompts):
        padding[row] = prompt_width - len(prompt)
        prompt_array[row, padding[row]:] = prompt
    answer_array = np.zeros((len(answers), answer_width), np.int32)
    for row, answer in enumerate(answers):
        answer_array[row, :len(answer)] = answer
    lengths = np.array([len(answer) for answer in answers], np.int32)
    if len(answers) != group * len(prompts):
        raise ValueError(f"{len(answers)} answers for {len(prompts)} prompts of {group} each")
    return (mx.array(prompt_array), mx.array(padding), mx.array(answer_array),
            mx.array(lengths))
