"""A scaled-down replica of a training config, whose measured peak predicts the real one's.

MLX's peak depends on which arrays its scheduler keeps alive together, and that order is set by
the shape of the step's graph (layers, which of them train, the method, the optimizer, grad
checkpointing), not by the sizes of the arrays: a closed-form estimate cannot follow it
(docs/memory.md). A replica keeps the graph and divides every width by the same factor k (the
hidden size, each head's width, the MLP, the vocabulary, the LoRA rank and the tokens a row),
keeping the layers, heads, batch and every setting. Every array but the base's weights then
holds k^2 times fewer bytes (a weight is width x width, an activation tokens x width, an
attention matrix tokens x tokens, the logits tokens x vocabulary) and the scheduler takes the
same order, so

    real peak = real base weights + k^2 x (replica peak - replica base weights)

(the base's weights are known exactly from the model's headers, and they are not width x width
in a quantized model: its scales and biases take a group size the replica may change). Measured
on the calibration matrix, peaks so scaled agree within a percent, luck of the schedule and all
(bench/calibrate_memory.py --replica; the table is in docs/memory.md).

Nothing here imports mlx: this plans the replica; trainer/replica.py builds and measures it.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from zyquo_tui.core.memory.estimate import TrainingConfig, features, loss_slice_tokens
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.runs.settings import Method

# Keys that say a model has widths the replica does not know how to scale (mixture of
# experts, multi-head latent attention, vision towers): no replica for those.
UNSCALED_WIDTH_KEYS = ("moe_intermediate_size", "num_experts", "num_local_experts",
                       "kv_lora_rank", "q_lora_rank", "vision_config", "text_config",
                       "shared_expert_intermediate_size", "ffn_dim", "n_embd")
SCALES = (16, 8, 4, 2)  # the largest that fits is used: the smaller the replica, the faster
GROUP_SIZES = (128, 64, 32)  # what MLX's quantization accepts, largest first
MIN_TOKENS = 16  # a replica's row keeps at least this many tokens
# Rows too short for that (under 32 tokens) still get a half-scale replica whose rows keep at
# least this many: short rows are where full fine-tuning's step, not its activations, sets the
# peak, and the calibration's 13 configs of 32-token rows (two 8- and 16-layer models, every
# optimizer, with and without accumulation) were predicted within -0.5% to +0.9% by replicas of
# 16-token rows (bench/memory_calibration/replica.json). Longer rows keep MIN_TOKENS, so no
# replica that already stands for a config changes.
SHORT_ROW_MIN_TOKENS = 8
# A replica's hidden size is at least this: below it the arrays that do not scale (the norms'
# weights, MLX's own) are a visible share of the peak. The calibration's replicas are 32 to
# 256 wide.
MIN_HIDDEN = 32
# The verdict's margin for a replica's figure: the largest underestimate of the calibration's
# half-scale replicas (bench/memory_calibration/replica.json and those of its chunked and
# layers folders; docs/memory.md), rounded up. It is the chunked loss's: how many of its slices
# are in flight depends on how fast the device drains MLX's queue, which varies from run to
# run (the same replica measured twice: -4.9% and +1.6%); without it, -2.6%.
REPLICA_ERROR = 0.05
# A config the terms put at or below this is measured whole (a "replica" of scale 1): at that
# size its own few steps cost what a replica's would (a process start and a second or two), and
# nothing is scaled. It is how the smallest models, which no replica can divide (a hidden size
# below 2 x MIN_HIDDEN), and grpo runs, whose sampled answers do not scale, get a measured
# figure: the terms over-state such small configs most (a fixed amount is a large share of a
# few MiB).
WHOLE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Replica:
    """A replica of a config: its model's config.json and its training config, and the factor
    every width was divided by."""

    scale: int
    model_config: dict[str, Any]
    config: TrainingConfig  # its rows: the real ones' tokens / scale, exactly (not padded)
    group_size: int | None  # the replica's quantization group (None: not quantized)

    @classmethod
    def whole(cls, model_config: dict[str, Any], config: TrainingConfig) -> Replica:
        """The config itself (scale 1), its rows exactly as wide as its widest batch: an SFT
        or preference row of batch_width tokens, cut there (no padding to a multiple of 32
        beyond it); a grpo run's prompts as long as its longest, each answer as long as it may
        be (trainer/measure.py samples them to max_completion_tokens)."""
        if config.objective == "grpo":
            return cls(scale=1, model_config=model_config, config=config, group_size=None)
        width = config.batch_width
        return cls(scale=1, model_config=model_config, group_size=None,
                   config=dataclasses.replace(config, max_seq_length=width,
                                              longest_row_tokens=width))

    @property
    def whole_config(self) -> bool:
        return self.scale == 1

    def real_peak(self, replica_peak: float, replica_weights: float,
                  real_weights: float) -> float:
        """The real config's peak from the replica's measured one (the module's formula)."""
        return real_weights + self.scale ** 2 * max(replica_peak - replica_weights, 0.0)

    def predicted_peak(self, model: ModelFacts, config: TrainingConfig, replica_peak: float,
                       replica_model_weights: float) -> int:
        """The real config's peak from the replica's measured peak and its model's weights
        (a DPO reference's frozen copy counts as weights on both sides)."""
        quantities = features(model, config)
        copies = 2 if quantities["reference"] else 1
        return int(round(self.real_peak(replica_peak, replica_model_weights * copies,
                                        quantities["base_weights"] + quantities["reference"])))

    def to_json(self) -> dict[str, Any]:
        return {"scale": self.scale, "model_tokens": self.config.model_tokens,
                "group_size": self.group_size, "settings": self.config.settings()}


def _head_dim(config: dict[str, Any]) -> int | None:
    if config.get("head_dim"):
        return int(config["head_dim"])
    heads = config.get("num_attention_heads")
    if heads and config.get("hidden_size"):
        return int(config["hidden_size"]) // int(heads)
    return None


def _group_size(widths: list[int], wanted: int) -> int | None:
    """The quantization group the replica's inputs allow: the model's, else the largest that
    divides every input width."""
    for size in (wanted, *GROUP_SIZES):
        if all(width % size == 0 for width in widths):
            return size
    return None


def can_measure_whole(config: TrainingConfig, terms_bytes: float) -> bool:
    """Whether the config is small enough to be measured whole (WHOLE_BYTES) and a measurement
    of synthetic rows stands for it: not a base quantized first (a QLoRA suggestion: the
    measurement would need the quantized copy), packed rows (synthetic rows all of one length
    pack one a sequence) or a distillation (its teacher is another model)."""
    return (terms_bytes <= WHOLE_BYTES and config.quantize_base is None and not config.packed
            and config.objective != "distill")


def why_no_replica(model_config: dict[str, Any], config: TrainingConfig) -> str | None:
    """Why no replica can stand for this config, or None when one can."""
    if config.objective == "grpo":
        return ("a grpo run's answers are sampled, so their length does not scale with a "
                f"replica's, and it is larger than the {WHOLE_BYTES // 2**20} MiB measured "
                "whole; `plan --measure` measures the run whole")
    for key in UNSCALED_WIDTH_KEYS:
        if key in model_config:
            return f"its config.json has {key}, a width a replica does not scale"
    if _head_dim(model_config) is None or not model_config.get("intermediate_size"):
        return "its config.json gives no hidden_size, heads or intermediate_size"
    if plan_replica(model_config, config) is not None:
        return None
    hidden = int(model_config["hidden_size"])
    if hidden // 2 < MIN_HIDDEN:
        return (f"the model is too small to divide (hidden size {hidden}); "
                "`plan --measure` measures it whole")
    if config.model_tokens // 2 < SHORT_ROW_MIN_TOKENS:
        return f"its rows ({config.model_tokens} tokens) are too short to divide"
    if config.method is not Method.FULL and config.rank % 2:
        return f"its LoRA rank ({config.rank}) divides by nothing a replica could use"
    return "its widths have no common factor a replica could divide them by"


def plan_replica(model_config: dict[str, Any], config: TrainingConfig,
                 scales: tuple[int, ...] = SCALES) -> Replica | None:
    """The smallest replica of `config` on the model of `model_config`, or None: the largest
    scale whose rows keep MIN_TOKENS, else, for short rows, half scale with rows of at least
    SHORT_ROW_MIN_TOKENS."""
    replica = _plan_replica(model_config, config, scales, MIN_TOKENS)
    if replica is None and 2 in scales:
        replica = _plan_replica(model_config, config, (2,), SHORT_ROW_MIN_TOKENS)
    return replica


def _plan_replica(model_config: dict[str, Any], config: TrainingConfig,
                  scales: tuple[int, ...], min_tokens: int) -> Replica | None:
    if config.objective == "grpo":  # why_no_replica says why
        return None
    if any(key in model_config for key in UNSCALED_WIDTH_KEYS):
        return None
    head_dim = _head_dim(model_config)
    hidden = int(model_config.get("hidden_size") or 0)
    mlp = int(model_config.get("intermediate_size") or 0)
    heads = int(model_config.get("num_attention_heads") or 0)
    vocab = int(model_config.get("vocab_size") or 0)
    if not (head_dim and hidden and mlp and heads and vocab):
        return None
    quantization = model_config.get("quantization") or None
    if config.quantize_base:
        bits, group = config.quantize_base
        quantization = {"bits": bits, "group_size": group}
    lora = config.method is not Method.FULL
    tokens = config.model_tokens
    chunk = loss_slice_tokens(config)
    for k in scales:
        if hidden % k or head_dim % k or mlp % k or hidden // k < MIN_HIDDEN:
            continue
        if lora and config.rank % k:
            continue
        if tokens // k < min_tokens or (chunk is not None and chunk % k):
            continue
        group = None
        if quantization:
            # A quantized matrix's groups run along its input width (w.shape[-1]).
            inputs = [hidden // k, mlp // k, heads * head_dim // k]
            group = _group_size(inputs, int(quantization.get("group_size", 64)))
            if group is None:
                continue
        scaled = copy.deepcopy(model_config)
        scaled["hidden_size"] = hidden // k
        scaled["intermediate_size"] = mlp // k
        scaled["vocab_size"] = max(vocab // k, 2)
        if "head_dim" in scaled:
            scaled["head_dim"] = head_dim // k
        scaled.pop("quantization_config", None)
        scaled.pop("quantization", None)
        if group is not None:
            scaled["quantization"] = {"group_size": group, "bits": int(quantization["bits"])}
        replica_tokens = max(round(tokens / k), min_tokens)
        changes: dict[str, Any] = {
            # A row of exactly replica_tokens + 1 tokens, cut at max_seq_length: no padding
            # to a multiple of 32 (which would not scale).
            "max_seq_length": replica_tokens + 1, "longest_row_tokens": replica_tokens + 1,
            "quantize_base": None,
        }
        if lora:
            changes["rank"] = config.rank // k
        if chunk is not None:
            changes["loss_chunk_tokens"] = chunk // k
        return Replica(scale=k, model_config=scaled, config=dataclasses.replace(config, **changes),
                       group_size=group)
    return None
