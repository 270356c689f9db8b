"""GRPO's rollouts: a batch of prompts becomes sampled answers, their rewards, group-normalised
advantages and the arrays of one step of the clipped objective with its KL term.

Each step (objectives.GrpoObjective's `forward_backward`, which trainer/loop.py calls):
1. the batch's prompts, each `group_size` times, are answered together (sampling.complete_batch:
   one KV cache, one forward pass a token for all of them) at the run's temperature;
2. the reward functions (trainer/rewards.py) score the answers, and each answer's advantage is
   its reward against its group's (losses.grpo_advantages);
3. the reference (the base: adapters off, or a frozen copy for full fine-tuning) scores the
   answers' tokens, unless kl_beta is 0;
4. the step engine takes one forward-backward of losses.grpo_objective over prompt + answer
   (the end-of-sequence token included), as it does any objective's, so checkpoints, cancel,
   resume and accumulation are the other runs'.

Steps 3 and 4 compute each prompt once for its group of answers when the model allows it
(trainer/shared_prompts.py: the same values, less work); else they score every prompt + answer
as a whole sequence.

The draws come from MLX's global random state, which checkpoints save and restore, so a run
cancelled and resumed samples the answers the straight run samples.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import mlx.core as mx
import numpy as np

from zyquo_tui.core.events.protocol import REWARD_MEANS
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters
from zyquo_tui.trainer import losses
from zyquo_tui.trainer.prompt_data import PromptRow
from zyquo_tui.trainer.rewards import RewardError, Rewards
from zyquo_tui.trainer.sampling import Completion, complete_batch
from zyquo_tui.trainer.shared_prompts import layout
from zyquo_tui.trainer.trainer_failure import fail

# A metric name of one reward's mean, in the loop's running sums (the report regroups them).
REWARD_MEAN_PREFIX = "reward_mean:"
# The step's sequences are padded to a multiple of this many tokens.
PAD_WIDTH = 8


def scoring_temperature(settings: Hyperparameters) -> float:
    """The temperature a grpo run's answers are scored at: the one they were sampled at, so
    the policy's log-probabilities are those of the distribution that drew them (as TRL
    scores); greedy sampling (temperature 0) has no such distribution and is scored at 1."""
    temperature = float(SETTINGS["sampling_temperature"].get(settings))
    return temperature if temperature > 0 else 1.0


class Sampler:
    """A grpo run's rollouts: its model answers a batch's prompts, its rewards judge them, its
    reference scores them (when kl_beta is not 0)."""

    def __init__(self, settings: Hyperparameters, model, tokenizer, reference,
                 shared: bool = False) -> None:
        self.model = model
        # Whether the step's arrays are shared_prompts' layout (else whole sequences).
        self.shared = shared
        self.tokenizer = tokenizer
        self.reference = reference
        self.group_size = int(SETTINGS["group_size"].get(settings))
        self.max_tokens = int(SETTINGS["max_completion_tokens"].get(settings))
        self.temperature = float(SETTINGS["sampling_temperature"].get(settings))
        self.reward_names = list(SETTINGS["reward_functions"].get(settings))
        self.reward_weights = SETTINGS["reward_weights"].get(settings)
        self.reward_timeout = float(SETTINGS["reward_timeout"].get(settings))
        self.rewards: Rewards | None = None  # loaded at the first step (they run user code)
        # What stops an answer: None, the model's end-of-sequence tokens; [] nothing before
        # max_completion_tokens (trainer/measure.py: the widest step a run can meet).
        self.stop: list[int] | None = None
        self.step = 0  # the loop's step in progress, to name it when a reward fails

    def rollout(self, rows: list[PromptRow]) -> "Rollout":
        completions = complete_batch(self.model, self.tokenizer, [row.tokens for row in rows],
                                     self.max_tokens, self.temperature, copies=self.group_size,
                                     stop=self.stop)
        scores = self._score(rows, completions)
        advantages = mx.array(losses.grpo_advantages(scores.totals, self.group_size),
                              dtype=mx.float32)
        if self.shared:
            sequences = layout([row.tokens for row in rows],
                               [_answer_tokens(c) for c in completions], self.group_size,
                               PAD_WIDTH)
            score = self.reference.answer_logprobs if self.reference is not None else None
            width = sequences[2].shape[1]  # the answers'
        else:
            sequences = self._sequences(rows, completions)
            score = self.reference.token_logprobs if self.reference is not None else None
            width = sequences[0].shape[1] - 1  # the predictions of the sequences' tokens
        if score is not None:
            ref_logps = score(*sequences)
        else:
            ref_logps = mx.zeros((len(completions), width), mx.float32)
        arrays = (*sequences, advantages, ref_logps)
        return Rollout(rows, completions, scores, arrays, self.group_size)

    def _score(self, rows: list[PromptRow], completions: list[Completion]):
        G = self.group_size
        try:
            if self.rewards is None:
                self.rewards = Rewards(self.reward_names, self.reward_weights,
                                       self.reward_timeout)
            types = ([row.type for row in rows for _ in range(G)]
                     if any(row.type is not None for row in rows) else None)
            return self.rewards.score([row.text for row in rows for _ in range(G)],
                                      [c.text for c in completions],
                                      [row.answer for row in rows for _ in range(G)], types)
        except RewardError as error:
            # The whole traceback goes to trainer.log; the event names the step and the reward.
            print(error.details or str(error), file=sys.stderr, flush=True)
            raise fail("reward", f"At step {self.step}, {error}.") from None

    def _sequences(self, rows: list[PromptRow], completions: list[Completion]
                   ) -> tuple[mx.array, mx.array]:
        """Prompt + answer of each sampled answer, padded; the answer (with the token that
        stopped it) is what is trained."""
        sequences, spans = [], []
        for i, completion in enumerate(completions):
            prompt = rows[i // self.group_size].tokens
            answer = _answer_tokens(completion)
            sequences.append(prompt + answer)
            spans.append((len(prompt), len(prompt) + len(answer)))
        # As wide as the longest, rounded up a little: every padded position costs a forward
        # and a backward, and each new width one compilation of the step.
        longest = max(len(sequence) for sequence in sequences)
        width = -(-longest // PAD_WIDTH) * PAD_WIDTH
        tokens = np.zeros((len(sequences), width), np.int32)
        for row, sequence in enumerate(sequences):
            tokens[row, :len(sequence)] = sequence
        return mx.array(tokens), mx.array(spans)


def _answer_tokens(completion: Completion) -> list[int]:
    """What is trained of an answer: its tokens and the end-of-sequence token that stopped it."""
    return completion.tokens + ([completion.stop_token]
                                if completion.stop_token is not None else [])


def shape_report(info: dict[str, Any]) -> dict[str, Any]:
    """A train event's fields with each reward's mean gathered under REWARD_MEANS."""
    means = {key[len(REWARD_MEAN_PREFIX):]: info.pop(key) for key in list(info)
             if key.startswith(REWARD_MEAN_PREFIX)}
    return {**info, REWARD_MEANS: means}


class Rollout:
    """One batch's sampled answers, their rewards and the step's arrays."""

    def __init__(self, rows, completions, scores, arrays, group_size: int) -> None:
        self.rows = rows
        self.completions = completions
        self.scores = scores
        self.arrays = arrays
        self.group_size = group_size

    @property
    def reward_mean(self) -> float:
        return sum(self.scores.totals) / len(self.scores.totals)

    def reward_std(self) -> float:
        """The spread of rewards within each group, averaged over the groups."""
        G, totals = self.group_size, self.scores.totals
        spreads = []
        for start in range(0, len(totals), G):
            group = totals[start:start + G]
            mean = sum(group) / len(group)
            spreads.append(math.sqrt(sum((v - mean) ** 2 for v in group) / len(group)))
        return sum(spreads) / len(spreads)

    def metrics(self) -> dict[str, float]:
        """The step's figures besides the loss's own (kl, clip_fraction)."""
        lengths = [len(c.tokens) + (c.stop_token is not None) for c in self.completions]
        return {"reward_mean": self.reward_mean, "reward_std": self.reward_std(),
                "completion_length": sum(lengths) / len(lengths),
                **{REWARD_MEAN_PREFIX + name: mean
                   for name, mean in self.scores.means().items()}}

    def samples(self, count: int) -> list[dict[str, Any]]:
        """The first answer of each of the first `count` prompts, with its rewards."""
        out = []
        for p, row in enumerate(self.rows[:count]):
            i = p * self.group_size
            out.append({"prompt": row.text, "text": self.completions[i].text,
                        "answer": row.answer, "reward": self.scores.totals[i],
                        "rewards": {name: values[i]
                                    for name, values in self.scores.by_name.items()}})
        return out
