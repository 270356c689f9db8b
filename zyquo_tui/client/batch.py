"""TrainingBatch: what one forward-backward trains on, checked when it is made.

Pure Python (no mlx): a batch can be built and checked anywhere. Every inconsistency raises
BatchError with one sentence; nothing is truncated or dropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Text = str | list[dict[str, Any]]

LOSS_TYPES = ("sft", "dpo", "orpo", "reinforce", "grpo", "distill")
PREFERENCE = ("dpo", "orpo")
ADVANTAGES = ("reinforce", "grpo")
DPO_VARIANTS = ("sigmoid", "ipo", "hinge")

# What `extra` may hold for each loss type, with the defaults (docs/client.md).
EXTRA_DEFAULTS: dict[str, dict[str, Any]] = {
    "sft": {},
    "dpo": {"beta": 0.1, "variant": "sigmoid", "reference": None},
    "orpo": {"beta": 0.1},
    "reinforce": {},
    "grpo": {},
    "distill": {"teacher": None, "teacher_logprobs": None, "temperature": 1.0},
}


class BatchError(ValueError):
    """A batch that cannot be trained as given; the message says what and what to do."""


def _is_text(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(m, dict) and "content" in m for m in value)
        and bool(value))


@dataclass
class TrainingBatch:
    """Prompts (strings or chat message lists) with, by loss type, responses, rejected responses
    and advantages, one each per prompt.

    - sft: responses optional (without them each prompt is a whole text, every token trained);
      the prompt is masked unless train_on_prompt.
    - dpo, orpo: responses are the chosen ones; rejected_responses required.
    - reinforce, grpo: responses and one advantage per row required.
    - distill: responses optional; extra names the teacher or gives its log-probabilities.
    """

    prompts: Sequence[Text]
    responses: Sequence[Text] | None = None
    rejected_responses: Sequence[Text] | None = None
    advantages: Sequence[float] | None = None
    loss_type: str = "sft"
    train_on_prompt: bool = False
    max_seq_len: int | None = None
    extra: dict[str, Any] | None = None
    options: dict[str, Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise BatchError(f"loss_type {self.loss_type!r} is unknown; use one of "
                             f"{', '.join(LOSS_TYPES)}.")
        if isinstance(self.prompts, str) or not isinstance(self.prompts, Sequence):
            raise BatchError("prompts must be a list of prompts (strings or chat message "
                             "lists), not a single string.")
        self.prompts = list(self.prompts)
        if not self.prompts:
            raise BatchError("the batch has no prompts; give at least one.")
        for index, prompt in enumerate(self.prompts):
            if not _is_text(prompt):
                raise BatchError(f"prompt {index} is neither a string nor a list of chat "
                                 "messages with a content each.")
        self.responses = self._rows("responses", self.responses)
        self.rejected_responses = self._rows("rejected_responses", self.rejected_responses)
        if self.loss_type in PREFERENCE + ADVANTAGES and self.responses is None:
            raise BatchError(f"a {self.loss_type} batch needs responses, one per prompt.")
        if self.loss_type in PREFERENCE and self.rejected_responses is None:
            raise BatchError(f"a {self.loss_type} batch needs rejected_responses, one per "
                             "prompt (the responses are the chosen ones).")
        if self.loss_type in ADVANTAGES:
            self._check_advantages()
        elif self.advantages is not None:
            raise BatchError(f"advantages weigh reinforce and grpo batches; a {self.loss_type} "
                             "batch does not use them (set loss_type, or drop them).")
        if self.max_seq_len is not None and (not isinstance(self.max_seq_len, int)
                                             or self.max_seq_len < 2):
            raise BatchError(f"max_seq_len must be a whole number of at least 2, not "
                             f"{self.max_seq_len!r}.")
        self.options = self._options()

    def __len__(self) -> int:
        return len(self.prompts)

    def _rows(self, name: str, values: Sequence[Text] | None) -> list[Text] | None:
        if values is None:
            return None
        if isinstance(values, str) or not isinstance(values, Sequence):
            raise BatchError(f"{name} must be a list, one per prompt, not a single value.")
        values = list(values)
        if len(values) != len(self.prompts):
            raise BatchError(f"{name} has {len(values)} entries and prompts has "
                             f"{len(self.prompts)}; give one per prompt.")
        for index, value in enumerate(values):
            if not _is_text(value):
                raise BatchError(f"{name}[{index}] is neither a string nor a list of chat "
                                 "messages.")
        return values

    def _check_advantages(self) -> None:
        if self.advantages is None:
            raise BatchError(f"a {self.loss_type} batch needs advantages, one number per "
                             "prompt.")
        values = list(self.advantages)
        if len(values) != len(self.prompts):
            raise BatchError(f"advantages has {len(values)} entries and prompts has "
                             f"{len(self.prompts)}; give one per prompt.")
        for index, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise BatchError(f"advantages[{index}] is {value!r}; each must be a finite "
                                 "number.")
        self.advantages = [float(v) for v in values]

    def _options(self) -> dict[str, Any]:
        """`extra` over the loss type's defaults; an unknown key or a bad value raises."""
        defaults = EXTRA_DEFAULTS[self.loss_type]
        given = dict(self.extra or {})
        if self.loss_type == "orpo" and "lambda" in given:
            given["beta"] = given.pop("lambda")
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            allowed = ", ".join(defaults) or "nothing"
            raise BatchError(f"extra has {unknown[0]!r}, which a {self.loss_type} batch does not "
                             f"take (it takes {allowed}).")
        options = {**defaults, **given}
        for key in ("beta", "temperature"):
            if key in options and not (isinstance(options[key], (int, float))
                                       and not isinstance(options[key], bool)
                                       and options[key] > 0 and math.isfinite(options[key])):
                raise BatchError(f"extra {key} must be a positive number, not "
                                 f"{options[key]!r}.")
        if self.loss_type == "dpo" and options["variant"] not in DPO_VARIANTS:
            raise BatchError(f"extra variant {options['variant']!r} is unknown; use one of "
                             f"{', '.join(DPO_VARIANTS)}.")
        if self.loss_type == "distill":
            if (options["teacher"] is None) == (options["teacher_logprobs"] is None):
                raise BatchError("a distill batch needs extra teacher (a model folder) or "
                                 "teacher_logprobs (per row, per response token, "
                                 "{token_id: logprob}), one of the two.")
            if options["teacher_logprobs"] is not None \
                    and len(options["teacher_logprobs"]) != len(self.prompts):
                raise BatchError(f"teacher_logprobs has {len(options['teacher_logprobs'])} rows "
                                 f"and prompts has {len(self.prompts)}; give one per prompt.")
        return options
