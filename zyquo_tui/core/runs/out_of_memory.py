"""Running out of memory: a run's memory limit, and the ladder it steps down after a death by it.

The limit (docs/unattended.md) is the run's `memory_limit`, else config.toml's [memory] limit,
else none (the machine's budget, which the memory verdict judges against). The trainer sets
MLX's limit to it and ends a step whose peak passed it as out of memory (trainer/
memory_limit.py).

The ladder: a run that ran out of memory, with `on_oom` step-down, is resumed by its runner
from its last checkpoint with one setting changed, the first of these it can still change:

1. grad_checkpoint on: the blocks' activations recomputed in the backward pass, not kept;
2. micro_batches doubled: each batch's rows computed in two slices (four, ...), their
   gradients added up into the whole batch's before the update (trainer/objectives.py);
3. loss slices: the loss's logits computed 256 tokens at a time (trainer/chunked_loss.py).

None of them changes what the run learns: each update is made of the same rows, in the same
order, with the same loss, so the resumed run goes on as the one that died would have (to
float rounding). Each rung is taken once, at most MAX_STEPS in all; with none left the run
stops and says what would fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zyquo_tui.core.runs.hosts import world_size_of
from zyquo_tui.core.runs.settings import DEFAULT_LOSS_CHUNK_TOKENS, SETTINGS, Hyperparameters
from zyquo_tui.core.runs.value_checks import OFF_TEXT, is_whole, size_in_bytes

STEP_DOWN = "step-down"
STOP = "stop"
MAX_STEPS = 3


def memory_limit(hp: Hyperparameters, machine_limit: int | None) -> tuple[int | None, str]:
    """(bytes, where they come from) of the limit a run trains within; (None, "") for none."""
    own = size_in_bytes(SETTINGS["memory_limit"].get(hp))
    if own is not None:
        return own, "the run's memory_limit"
    if machine_limit is not None:
        return machine_limit, "config.toml [memory] limit"
    return None, ""


@dataclass(frozen=True)
class Rung:
    """One step down: the setting it changes, its new value, and what that means in words."""

    setting: str
    value: Any
    sentence: str

    def to_dict(self) -> dict[str, Any]:
        return {"setting": self.setting, "value": self.value, "change": self.sentence}


def next_rung(hp: Hyperparameters, taken: list[str], sliced: Any = None) -> Rung | None:
    """The rung a run with these settings steps down to next, None when no rung is left.

    `taken`: the settings earlier rungs changed (each rung is taken once); `sliced`: the loss
    slice the run trained with (its summary's loss_chunk_tokens: auto may already slice)."""
    if len(taken) >= MAX_STEPS:
        return None
    if "grad_checkpoint" not in taken and not hp.grad_checkpoint:
        return Rung("grad_checkpoint", True, "gradient checkpointing on")
    objective = SETTINGS["objective"].get(hp)
    micro = SETTINGS["micro_batches"].get(hp)
    rows = hp.batch_size // max(world_size_of(hp.zyquo_tui), 1) if is_whole(hp.batch_size) else 1
    if "micro_batches" not in taken and objective == "sft" and is_whole(micro) \
            and micro * 2 <= rows:
        return Rung("micro_batches", micro * 2,
                    f"each batch in {micro * 2} micro-batches of about {rows // (micro * 2)} "
                    f"rows, their gradients added up before the update")
    chunk = SETTINGS["loss_chunk_tokens"].get(hp)
    already = sliced not in (None, OFF_TEXT) or is_whole(chunk)
    if "loss_chunk_tokens" not in taken and not already:
        return Rung("loss_chunk_tokens", DEFAULT_LOSS_CHUNK_TOKENS,
                    f"the loss computed {DEFAULT_LOSS_CHUNK_TOKENS} tokens at a time")
    return None


def step_down(hp: Hyperparameters, rung: Rung) -> Hyperparameters:
    """`hp` one rung down (a copy)."""
    lower = Hyperparameters.from_dict(hp.to_dict())
    SETTINGS[rung.setting].set(lower, rung.value)
    return lower
