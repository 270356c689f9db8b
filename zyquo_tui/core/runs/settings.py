"""Run settings: the method and the hyperparameters, with mlx-lm's names and defaults."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class Method(str, enum.Enum):
    """How the model is fine-tuned. QLoRA is LoRA on a quantized base model."""

    LORA = "lora"
    DORA = "dora"
    QLORA = "qlora"
    FULL = "full"

    @property
    def fine_tune_type(self) -> str:
        """mlx-lm's name for it (mlx-lm has no qlora: the quantized base makes it so)."""
        return "lora" if self is Method.QLORA else self.value


OPTIMIZERS = ("adam", "adamw", "muon", "sgd", "adafactor")
LR_SCHEDULES = ("cosine_decay", "linear_schedule", "exponential_decay", "step_decay")


def default_lora_parameters() -> dict[str, Any]:
    return {"rank": 8, "dropout": 0.0, "scale": 20.0}


@dataclass
class Hyperparameters:
    """The training settings of a run, with mlx-lm's names and defaults."""

    optimizer: str = "adam"
    optimizer_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    num_layers: int = 16
    batch_size: int = 4
    iters: int = 1000
    val_batches: int = 25
    learning_rate: float = 1e-5
    steps_per_report: int = 10
    steps_per_eval: int = 200
    save_every: int = 100
    max_seq_length: int = 2048
    grad_checkpoint: bool = False
    grad_accumulation_steps: int = 1
    mask_prompt: bool = False
    seed: int = 0
    lora_parameters: dict[str, Any] = field(default_factory=default_lora_parameters)
    lr_schedule: dict[str, Any] | None = None

    @property
    def rank(self) -> int:
        return int(self.lora_parameters.get("rank", 8))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Hyperparameters":
        values = {k: v for k, v in data.items() if k in _HYPERPARAMETER_FIELDS}
        hp = cls(**values)
        lora = default_lora_parameters()
        lora.update(hp.lora_parameters or {})
        hp.lora_parameters = lora
        return hp

    def problems(self, method: "Method | None" = None) -> tuple[list[str], list[str]]:
        """Check every value; return (errors, warnings), one sentence each."""
        errors: list[str] = []
        warnings: list[str] = []

        def positive_int(name: str, value: Any, allow: tuple[int, ...] = ()) -> bool:
            if isinstance(value, bool) or not isinstance(value, int):
                errors.append(f"{name} must be a whole number, not {value!r}.")
                return False
            if value < 1 and value not in allow:
                extra = f" (or {', '.join(map(str, allow))})" if allow else ""
                errors.append(f"{name} must be at least 1{extra}, not {value}.")
                return False
            return True

        for name in ("batch_size", "iters", "steps_per_report", "steps_per_eval",
                     "save_every", "max_seq_length", "grad_accumulation_steps"):
            positive_int(name, getattr(self, name))
        positive_int("num_layers", self.num_layers, allow=(-1,))
        positive_int("val_batches", self.val_batches, allow=(-1,))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            errors.append(f"seed must be a whole number of 0 or more, not {self.seed!r}.")

        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, (int, float)):
            errors.append(f"learning_rate must be a number, not {lr!r}.")
        elif not lr > 0 or lr != lr or lr == float("inf"):
            errors.append(f"learning_rate must be greater than 0, not {lr}.")
        elif lr > 1:
            warnings.append(f"learning_rate {lr} is very high; training will likely diverge.")

        if self.optimizer not in OPTIMIZERS:
            errors.append(
                f"optimizer {self.optimizer!r} is unknown; choose one of {', '.join(OPTIMIZERS)}."
            )
        if not isinstance(self.optimizer_config, dict):
            errors.append("optimizer_config must map optimizer names to their settings.")

        lora = self.lora_parameters or {}
        if method is None or method is not Method.FULL:
            rank = lora.get("rank")
            if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
                errors.append(f"rank (lora_parameters.rank) must be at least 1, not {rank!r}.")
            scale = lora.get("scale")
            if isinstance(scale, bool) or not isinstance(scale, (int, float)):
                errors.append(f"lora_parameters.scale must be a number, not {scale!r}.")
            dropout = lora.get("dropout")
            if (isinstance(dropout, bool) or not isinstance(dropout, (int, float))
                    or not 0 <= dropout < 1):
                errors.append(
                    f"lora_parameters.dropout must be from 0 up to (not including) 1, "
                    f"not {dropout!r}."
                )

        if self.lr_schedule is not None:
            schedule = self.lr_schedule
            if not isinstance(schedule, dict) or "name" not in schedule:
                errors.append("lr_schedule needs a name and arguments, as in mlx-lm's config.")
            elif schedule["name"] not in LR_SCHEDULES:
                errors.append(
                    f"lr_schedule {schedule['name']!r} is unknown; choose one of "
                    f"{', '.join(LR_SCHEDULES)}."
                )
            elif not isinstance(schedule.get("arguments"), list) or not schedule["arguments"]:
                errors.append("lr_schedule.arguments must be a list starting with the learning rate.")

        if not errors:
            if self.save_every > self.iters:
                warnings.append(
                    f"save_every ({self.save_every}) is larger than iters ({self.iters}): "
                    "only the final checkpoint will be saved."
                )
            if self.steps_per_eval > self.iters:
                warnings.append(
                    f"steps_per_eval ({self.steps_per_eval}) is larger than iters "
                    f"({self.iters}): validation runs only at the first and last step."
                )
        return errors, warnings


_HYPERPARAMETER_FIELDS = frozenset(f.name for f in dataclasses.fields(Hyperparameters))
