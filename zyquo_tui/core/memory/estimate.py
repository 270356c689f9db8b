"""The memory advisor: how much memory a training config needs, whether it fits, what would.

`MemoryAdvisor.estimate` predicts the peak MLX memory of a run (what `mx.get_peak_memory()`
reports after a few steps) without importing mlx, as a sum of terms:

  base_weights        every tensor of the model, exact bytes from the safetensors headers
                      (any dtype; quantized weights with their scales and biases)
  trainable_parameters  the LoRA/DoRA adapters (float32, as mlx-lm makes them); for full
                      fine-tuning the trained weights are already in base_weights
  gradients           one gradient per trainable parameter, plus the accumulation buffer
                      that grad_accumulation_steps > 1 keeps between steps; for full
                      fine-tuning the share alive at once (a fitted multiplier: the step
                      updates a layer as soon as its gradients exist)
  optimizer_state     adam/adamw two moments; sgd one buffer (MLX allocates it even without
                      momentum); muon one momentum buffer; adafactor a row and a column vector
                      per matrix (a full copy for vectors, and exp_avg when beta_1 is set)
  activations         what each trained layer keeps for the backward pass, proportional to
                      batch x tokens x (hidden, attention and MLP widths); with grad
                      checkpointing only each layer's input, plus one layer recomputed; plus
                      the working memory of the layer being computed
  attention           the attention matrices, batch x heads x tokens^2: MLX differentiates
                      attention unfused, so every trained layer keeps its own for the backward
                      pass, plus the working copies of the layer being computed (a term per
                      device: a fused attention backward on Metal would keep none)
  loss                the logits and the cross-entropy, batch x tokens x vocabulary; with
                      the chunked loss (loss_chunk_tokens, trainer/chunked_loss.py) a derived
                      term instead: the slices alive at once (`chunked_loss_bytes`)
  teacher             a distillation run's teacher (core/memory/teacher.py): its weights,
                      exact from its safetensors headers, what it hands the step (its
                      log-probabilities of the batch, float32, or its last hidden states when
                      the loss is sliced) and the KL's float32 copies of the vocabulary-wide
                      arrays beyond a cross-entropy's
  overhead            a fixed amount, and what the optimizer's step needs beyond the backward
                      pass (it writes new moments while the old ones are alive, after the
                      activations are freed: the peak is the larger of the two phases); for
                      DoRA, likewise what computing its magnitudes needs beyond it (float32
                      copies of one layer's weights, before the first step: a phase of its own)

The multipliers of the activation and overhead terms were fitted to real
mlx-lm training (bench/calibrate_memory.py; the table is in docs/memory.md), one table per
device. When this machine has measured runs (memory_history.jsonl in
$ZYQUO_HOME, from `zyquo-tui plan --measure` and from finished runs), the estimate is scaled by
the median measured/estimated ratio, and the breakdown says so.

Nothing here imports mlx; an estimate takes well under a millisecond once the model's headers
are read (they are cached per folder), so the run setup can recompute it on every keystroke.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from zyquo_tui.core.library.run_checks import problems_with_model
from zyquo_tui.core.memory.budget import CPU, GPU
from zyquo_tui.core.memory.facts import LORA_BYTES, PAD_TO, ModelFacts
from zyquo_tui.core.memory.teacher import TeacherFacts, teacher_bytes
from zyquo_tui.core.runs.problems import Problem, errors_in
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import (
    DEFAULT_LOSS_CHUNK_TOKENS,
    PREFERENCE_OBJECTIVES,
    SETTINGS,
    Hyperparameters,
    Method,
    default_of,
)
from zyquo_tui.core.runs.value_checks import AUTO_TEXT, OFF_TEXT


@dataclass(frozen=True)
class Coefficients:
    """The fitted multipliers of the estimate's terms on one kind of device.

    Widths count tensors per token in the model's compute dtype unless said otherwise:
    kept_hidden 8 means each trained layer keeps about eight hidden-size vectors per token for
    its backward pass. "Once" terms are the working memory of the one layer being computed
    (and of the loss), which exists next to everything the layers keep.
    """

    # Kept by each trained layer until the backward pass reaches it:
    kept_hidden: float  # x hidden size
    kept_mlp: float  # x intermediate size
    # x heads x tokens: the attention matrix each layer keeps, its softmax output (the softmax's
    # and the value matmul's backward read it), in the compute dtype: 1 (0: none kept).
    kept_attention: float
    kept_lora: float  # x rank per adapted matrix, float32: x @ A
    # The inputs of the trained matrices, kept once for their gradients: (3 x hidden +
    # intermediate) values, the attention's input and output, the MLP's input and the down
    # projection's. Float32 for adapters (A is float32: a 16-bit model's inputs are promoted, a
    # float32 model's are its own arrays), the model's dtype for full fine-tuning. Held at 1:
    # kept_hidden and kept_mlp count the rest, so both dtypes share them (measured on two
    # float32 models: a layer keeps no more under full fine-tuning than under LoRA, beyond its
    # gradient).
    kept_inputs: float
    # What full fine-tuning of a 16-bit model keeps beyond those inputs, x the inputs in its
    # dtype (fitted; a float32 model's keeps nothing more).
    kept_full_inputs: float
    dora_outputs: float  # x output widths of the adapted matrices (DoRA rescales them)
    # With grad checkpointing each layer keeps only its input, and the layer being
    # recomputed holds its forward and its backward at once:
    checkpoint_hidden: float  # x hidden size, per checkpointed layer
    # x intermediate size, once (float32 for adapters, as working_mlp), for a 16-bit model
    # only. Measured from one checkpointed layer to four, a bfloat16 model adds 3.5 MiB beyond
    # the layers' saved inputs and the layer below's attention (128-wide: +5.4 MiB, they count
    # 1.9), a float32 one nothing (128-wide: +3.4, they count 3.9; 4-bit with float32 scales:
    # +3.6, they count 6.3).
    checkpoint_mlp: float
    # x heads x tokens, once, with two or more checkpointed layers: the layer below starts its
    # recomputation (it needs only its saved input) while the layer above is differentiated.
    # Fitted (measured alone on the 16-layer model at 2,048 tokens, one checkpointed layer to
    # two: 0.6 of a matrix; held there, it carried that model into its own held-out figure).
    checkpoint_attention: float
    # Once:
    working_hidden: float  # x hidden size
    # x intermediate size, float32 for adapters: the gradients of the adapters' float32 inputs
    # and their products with A and B (a 16-bit model casts them back only when it adds them to
    # the base path), the model's dtype for full fine-tuning.
    working_mlp: float
    # x heads x tokens, the rest of one layer's attention backward beside its kept matrix
    # (the scores, their masked copy, the softmax's gradient and its product with the softmax).
    # Measured on MLX's attention alone, compiled as the training step is
    # (`bench/calibrate_memory.py --attention`: 1,024 tokens, bfloat16 and float32, 4:4 and 8:1
    # heads; GQA's keys and values are broadcast, not repeated): 3.13-3.21 matrices at its peak
    # with the kept one (3.26-3.47 uncompiled); held at 2.25 more, the largest rounded up.
    working_attention: float
    # x output widths of the adapted matrices, float32: (x @ A) @ B. Held at 0, what the fit
    # gave it while DoRA's adapted weights counted in the working memory: working_mlp's float32
    # gradients hold the layer's peak. (Fitted now it takes 0.39 from the DoRA configs and
    # leaves a full fine-tuning config 9% under held out.)
    working_outputs: float
    # x one layer's adapted weights, as copied while DoRA's magnitudes (the norms of a float32
    # copy of each adapted weight) are computed: `dora_copy_bytes` a weight. The trainer
    # computes them when it makes the adapters (trainer/loading.py prepare_model), before any
    # activation exists, so this is a phase of its own: the base's weights, the adapters and
    # these copies; the peak is the larger of it and the backward pass. Measured (its
    # evaluation alone, 512-wide layers): exactly one layer's copies, so held at 1. (Left to
    # the first step, as mlx-lm leaves it, it added to the step: 72.6 MiB on the 512-wide
    # model with grad accumulation, 64.5 MiB with it computed first.)
    dora_weights: float
    # x one layer's adapted weights, float32: every step's forward pass rebuilds each adapted
    # weight (w + scale x B^T A^T, float32) to take the norm DoRA divides by. The norm is
    # behind stop_gradient (mlx-lm's DoRALinear), so the copies live only in the forward
    # pass: beside every kept activation of the layers below, not beside the backward's
    # working memory (a phase of its own; counted beside it, they over-stated the 512-wide
    # DoRA model by 19% held out). Held at 1, all of one layer's matrices at once, an upper
    # bound: no calibration config peaks in this phase (a small batch on large layers does).
    dora_adapted: float
    # x vocabulary, in the compute dtype: the loss's backward holds four logit-sized arrays at
    # once (the shifted logits logsumexp keeps, its exp, that times the incoming gradient, and
    # take_along_axis's scattered gradient before the two are summed). Measured: 4.0 bytes
    # per logit per compute byte at vocabularies of 128k-262k, float32, bfloat16 and 4-bit.
    loss: float
    # x the layer's working memory (the working_* terms) already allocated while the loss's
    # copies are alive: the compiled step does not finish the loss's backward before it starts
    # on the top layer's. Chosen, not fitted, from 0, 0.25, 0.5, 0.75 and 1, by the fit on the
    # families it sees (bench/calibrate_memory.py `choose`).
    loss_overlap: float
    # The optimizer's step writes new moments while the old ones are alive: x the bytes of
    # the state the step rewrites (adam's m and v, muon's and sgd-with-momentum's v,
    # adafactor's temporaries) for adapters (float32); for full fine-tuning x the new weights
    # and that state of one layer (the largest trained), since its step updates a layer at a
    # time. The peak is the larger of the backward pass and the step.
    update_lora: float
    update_full: float
    # x full fine-tuning's gradients: the share of them alive at once. The compiled step
    # updates a layer's weights as soon as its gradients exist, so they are never all alive
    # together (counted whole, with a step over every layer's copies, 16 trained layers were
    # over-stated by 89%). Fitted apart for adafactor, for sgd and for the rest (adam, adamw,
    # muon); with accumulation the share is of the summed and the new gradients together.
    # Adapters' gradients are few and counted whole.
    full_gradients: float
    full_gradients_adafactor: float
    full_gradients_sgd: float
    fixed_bytes: float
    # x the working memory of the layer being differentiated (the working_* terms above) in a
    # grpo step whose prompts are computed once for their answers (trainer/shared_prompts.py);
    # 1 for every other step. Those terms were fitted on SFT steps, and a grpo step of the
    # same tokens peaks lower (the w128-l4-f32 model at 2,080 tokens a step: 118.3 MiB above
    # the weights against SFT's 131.7; a vocabulary 8 times larger moved the gap by 2 MiB of
    # 13, so not the loss). Fitted on the grpo configs of 6 families, every other multiplier
    # held (bench/calibrate_memory.py --fit-grpo). Scaling every layer term instead (kept
    # ones too) left the held-out families at 14.4% at worst, this at 13.4% (docs/memory.md).
    grpo_shared_working: float = 1.0
    # Not a multiplier: the largest underestimate of leave-one-family-out validation (each
    # model family estimated by multipliers fitted without it, from neutral starting values,
    # the fit's choices made without it too; docs/memory.md), how far below its real peak an
    # estimate of a model the fit has never seen may fall, plus how far a peak moves from one
    # run to the next (measured). The verdict calls a config tight within this share of the
    # budget.
    held_out_error: float = 0.15
    calibrated: bool = True


# Fitted on CPU with bench/calibrate_memory.py --fit (mlx 0.32.4, mlx-lm 0.32.2; 115 configs of
# 27 model families), from neutral starting values, loss_overlap (0.5) and the
# underestimate weight (4) chosen with the fit; loss, kept_lora, kept_inputs,
# checkpoint_hidden, kept_attention, working_attention and dora_weights held at what the
# computation gives (measured), working_outputs and dora_adapted as their comments say.
# held_out_error: the largest underestimate with the family left out of everything the fit
# learns (wide-dora-acc2, -9.7%), plus the run-to-run spread measured
# (bench/memory_calibration/repeats.json, 2.3%), rounded up. docs/memory.md has the table.
CPU_COEFFICIENTS = Coefficients(
    kept_hidden=9.901, kept_mlp=3.195, kept_attention=1.0, kept_lora=1.0, kept_inputs=1.0,
    kept_full_inputs=1.098, dora_outputs=1.153, checkpoint_hidden=1.0, checkpoint_mlp=3.615,
    working_hidden=13.545, working_mlp=5.406, working_attention=2.25, checkpoint_attention=0.796,
    working_outputs=0.0, dora_weights=1.0, dora_adapted=1.0, loss=4.0, loss_overlap=0.5,
    update_lora=0.932, update_full=2.352, full_gradients=0.607, full_gradients_adafactor=0.737,
    full_gradients_sgd=0.471, fixed_bytes=1310472.0, held_out_error=0.13,
    grpo_shared_working=0.521,
)

# Metal: not measured here (no Mac in CI). Since mlx PR 2054 (April 2025) MLX computes attention
# unfused whenever it is differentiated, on Metal as on the CPU, so every trained layer keeps its
# attention matrix there too, and the CPU fit is the best prior. A fused attention backward
# (mlx PR 3241, open) would keep none: set kept_attention to 0 here when an MLX with it is
# pinned. Until a Mac's measurements calibrate this table, the machine's history corrects it.
# The CPU's held-out error bounds nothing on another device: a wider margin until measured.
GPU_COEFFICIENTS = dataclasses.replace(CPU_COEFFICIENTS, held_out_error=0.3, calibrated=False)
COEFFICIENTS = {CPU: CPU_COEFFICIENTS, GPU: GPU_COEFFICIENTS}


def _from_definition(key: str) -> Any:
    """A default read from the run settings' one definition (core/runs/settings.py)."""
    return field(default_factory=lambda: default_of(key))


# A grpo step's sequences are padded to a multiple of this (trainer/grpo.py's PAD_WIDTH).
GRPO_PAD = 8

# The settings of the definition that decide a run's memory: TrainingConfig's own fields.
MEMORY_SETTINGS = frozenset({"batch_size", "max_seq_length", "num_layers", "rank",
                             "grad_checkpoint", "optimizer", "grad_accumulation_steps",
                             "loss_chunk_tokens"})


@dataclass(frozen=True)
class TrainingConfig:
    """The settings that decide a run's memory: a projection of its Hyperparameters, with the
    same names, defaults and checks (core/runs/settings.py), plus what the estimate alone needs.

    longest_row_tokens is the dataset's longest tokenized row when known: batches are padded
    to their longest row, so it, not max_seq_length, sets the activations. Unknown, every
    batch is assumed to reach max_seq_length.
    """

    method: Method = Method.LORA
    batch_size: int = _from_definition("batch_size")
    max_seq_length: int = _from_definition("max_seq_length")
    num_layers: int = _from_definition("num_layers")
    rank: int = _from_definition("rank")
    grad_checkpoint: bool = _from_definition("grad_checkpoint")
    optimizer: str = _from_definition("optimizer")
    grad_accumulation_steps: int = _from_definition("grad_accumulation_steps")
    loss_chunk_tokens: int | str = _from_definition("loss_chunk_tokens")  # or auto, off
    longest_row_tokens: int | None = None
    adafactor_first_moment: bool = False  # optimizer_config.adafactor.beta_1 is set
    sgd_momentum: bool = False  # optimizer_config.sgd.momentum is above 0
    # Estimate as if the base were quantized first (a QLoRA suggestion): (bits, group size).
    quantize_base: tuple[int, int] | None = None
    # A preference run (dpo, orpo) runs two sequences per row, chosen and rejected; DPO's
    # reference is a frozen copy of the base beside it for full fine-tuning or when it is
    # another model folder (counted at the base's size), else the base with its adapters off.
    objective: str = "sft"
    reference_copy: bool = False
    # A distillation run's teacher, as its folder's headers and config.json give it (None:
    # no teacher, or one that cannot be read); on-policy, each row is its prompt followed by
    # an answer of at most max_completion_tokens, which may be longer than the dataset's row.
    teacher: TeacherFacts | None = None
    on_policy: bool = False
    max_completion_tokens: int = 0
    # A grpo run samples group_size answers of up to completion_tokens to each prompt (a
    # row's tokens are its prompt's), all at once with a KV cache, then trains on prompt +
    # answer: group_size sequences a row, completion_tokens (and the stop token) wider.
    group_size: int = 1
    completion_tokens: int = 0
    # An SFT run that packs its rows (`pack`, core/runs/packing.py): its positions never
    # exceed the unpacked batch's, but a sequence may hold several rows, so it is wider.
    packed: bool = False
    # An SFT run that computes each batch in micro_batches slices of its rows: the activations
    # are a slice's (MemoryAdvisor.rank_config folds it into batch_size).
    micro_batches: int = 1

    @property
    def sequences_per_row(self) -> int:
        if self.objective == "grpo":
            return self.group_size
        return 2 if self.objective in PREFERENCE_OBJECTIVES else 1

    @property
    def prompt_tokens(self) -> int:
        """A grpo run's longest prompt, cut to max_seq_length (unknown: max_seq_length)."""
        return min(self.longest_row_tokens or self.max_seq_length, self.max_seq_length)

    @property
    def batch_width(self) -> int:
        """Tokens per row of the widest batch, as trainer/batches.py pads and cuts it (a grpo
        run's: the prompt, cut to max_seq_length, and its longest answer, as trainer/grpo.py
        pads them)."""
        if self.objective == "grpo":
            return GRPO_PAD * math.ceil((self.prompt_tokens + self.completion_tokens + 1)
                                        / GRPO_PAD)
        if self.longest_row_tokens is None:
            return self.max_seq_length
        longest = self.longest_row_tokens
        if self.on_policy:  # a prompt (shorter than its row) and the longest answer, with EOS
            longest += self.max_completion_tokens + 1
        padded = 1 + PAD_TO * math.ceil(max(longest, 1) / PAD_TO)
        return min(padded, self.max_seq_length)

    @property
    def attention_width(self) -> int:
        """The width each position's attention row spans. Unpacked, the sequence's. Packed,
        pack_rows's width: its batch's rows in sequences of at most max_seq_length, whose
        positions together never exceed the unpacked batch's (pack_rows keeps the cheaper of
        that and one row a sequence at the narrowest width), so positions x this width bounds
        the attention matrices of a packed step."""
        if not (self.packed and self.objective == "sft"):
            return self.model_tokens
        if self.longest_row_tokens is None:
            return self.max_seq_length
        rows = self.batch_size * max(self.longest_row_tokens, 1)
        return min(PAD_TO * math.ceil(rows / PAD_TO), self.max_seq_length)

    @property
    def model_tokens(self) -> int:
        """Tokens per row the model runs on (inputs are the row without its last token). A
        grpo step computes each prompt once for its group of answers
        (trainer/shared_prompts.py; not with grad checkpointing): a row's tokens are its
        answer's and its share of the prompt."""
        if self.objective == "grpo" and not self.grad_checkpoint:
            # An answer has at most completion_tokens tokens, the stop token included; the
            # model reads all of them but the last, after the prompt.
            answer = GRPO_PAD * math.ceil(max(self.completion_tokens, 1) / GRPO_PAD)
            prompt = GRPO_PAD * math.ceil(self.prompt_tokens / GRPO_PAD)
            return answer - 1 + math.ceil(prompt / max(self.group_size, 1))
        return max(self.batch_width - 1, 1)

    @property
    def synthetic_row_tokens(self) -> int:
        """The tokens of each synthetic row a measurement trains on (trainer/measure.py): a
        grpo run's prompt (its answers are sampled), every other run's whole row."""
        return self.prompt_tokens if self.objective == "grpo" else self.batch_width

    @property
    def predicted_tokens(self) -> int:
        """Tokens of a batch the output head runs on: every one the model reads, but for a
        grpo step whose prompts are computed once (`model_tokens`), the answers' only."""
        rows = self.batch_size * self.sequences_per_row
        if self.objective == "grpo" and not self.grad_checkpoint:
            return rows * GRPO_PAD * math.ceil(max(self.completion_tokens, 1) / GRPO_PAD)
        return rows * self.model_tokens

    def replace(self, **changes: Any) -> "TrainingConfig":
        return dataclasses.replace(self, **changes)

    def settings(self) -> dict[str, Any]:
        """The settings as mlx-lm names them (what suggestions change)."""
        data = {
            "method": self.method.value, "batch_size": self.batch_size,
            "grad_accumulation_steps": self.grad_accumulation_steps,
            "max_seq_length": self.max_seq_length, "num_layers": self.num_layers,
            "grad_checkpoint": self.grad_checkpoint, "optimizer": self.optimizer,
            "loss_chunk_tokens": self.loss_chunk_tokens,
        }
        if self.method is not Method.FULL:
            data["rank"] = self.rank
        if self.quantize_base:
            data["quantize_base"] = {"bits": self.quantize_base[0],
                                     "group_size": self.quantize_base[1]}
        return data

    def problems(self, hp: Hyperparameters | None = None) -> list[Problem]:
        """Values no run can train with: the definition's checks of the settings held here
        (`hp`: this config's `to_hyperparameters()`, when the caller has it already)."""
        hp = hp if hp is not None else self.to_hyperparameters()
        found = errors_in(hp.problems(self.method, only=MEMORY_SETTINGS))
        if self.longest_row_tokens is not None and self.longest_row_tokens < 0:
            found.append(Problem("longest_row_tokens", "the longest row cannot have a negative "
                                                       "number of tokens."))
        return found

    @classmethod
    def from_hyperparameters(cls, method: Method | str, hp: Hyperparameters | dict[str, Any],
                             longest_row_tokens: int | None = None) -> "TrainingConfig":
        if isinstance(hp, dict):
            hp = Hyperparameters.from_dict(hp)
        adafactor = (hp.optimizer_config or {}).get("adafactor") or {}
        sgd = (hp.optimizer_config or {}).get("sgd") or {}
        objective = SETTINGS["objective"].get(hp)
        return cls(
            method=Method(method),
            **{key: SETTINGS[key].get(hp) for key in MEMORY_SETTINGS},
            longest_row_tokens=longest_row_tokens,
            adafactor_first_moment=adafactor.get("beta_1") is not None,
            sgd_momentum=bool(sgd.get("momentum")),
            objective=objective,
            reference_copy=(objective == "dpo" and (Method(method) is Method.FULL
                                                    or SETTINGS["reference"].get(hp) != "base"))
            or (objective == "grpo" and Method(method) is Method.FULL
                and float(SETTINGS["kl_beta"].get(hp)) != 0),
            **({"group_size": int(SETTINGS["group_size"].get(hp)),
                "completion_tokens": int(SETTINGS["max_completion_tokens"].get(hp))}
               if objective == "grpo" else {}),
            teacher=(TeacherFacts.of(SETTINGS["teacher"].get(hp))
                     if objective == "distill" else None),
            on_policy=objective == "distill" and bool(SETTINGS["on_policy"].get(hp)),
            max_completion_tokens=int(SETTINGS["max_completion_tokens"].get(hp) or 0),
            packed=objective == "sft" and SETTINGS["pack"].get(hp) is True,
            micro_batches=(max(int(SETTINGS["micro_batches"].get(hp)), 1)
                           if objective == "sft" else 1),
        )

    @classmethod
    def from_run(cls, run: Run, longest_row_tokens: int | None = None) -> "TrainingConfig":
        return cls.from_hyperparameters(run.method, run.hyperparameters, longest_row_tokens)

    def to_hyperparameters(self, base: Hyperparameters | None = None) -> Hyperparameters:
        """Hyperparameters with this config's settings (the rest from `base` or defaults)."""
        hp = Hyperparameters.from_dict(base.to_dict()) if base is not None else Hyperparameters()
        for key in MEMORY_SETTINGS:
            SETTINGS[key].set(hp, getattr(self, key))
        return hp


TERMS = ("base_weights", "trainable_parameters", "gradients", "optimizer_state", "activations",
         "attention", "loss", "overhead")


@dataclass
class Estimate:
    """A predicted peak and its breakdown in bytes; `notes` say what it assumed or corrected."""

    total_bytes: int
    breakdown: dict[str, int]
    model_bytes: int  # the total before any history correction
    config: TrainingConfig
    device: str
    trained_layers: int
    trainable_parameters: int
    batch_width: int
    notes: list[str] = field(default_factory=list)
    # Settings training would reject (the sentences of the definition's and the model's checks).
    problems: list[str] = field(default_factory=list)
    correction: float | None = None
    # What the widest batch trains with: tokens per slice of the loss, or off (auto resolved).
    loss_chunk_tokens: int | str = OFF_TEXT
    # Set when a replica's measured peak (core/memory/replica.py) replaced the terms' sum:
    # its figures (scale, peaks, seconds).
    replica: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "estimate_bytes": self.total_bytes, "model_estimate_bytes": self.model_bytes,
            "breakdown": dict(self.breakdown), "device": self.device,
            "trained_layers": self.trained_layers,
            "trainable_parameters": self.trainable_parameters,
            "batch_width": self.batch_width, "settings": self.config.settings(),
            "history_correction": self.correction, "loss_chunk_tokens": self.loss_chunk_tokens,
            "notes": list(self.notes),
            "problems": list(self.problems),
            "replica": self.replica,
        }


def trained_layers(model: ModelFacts, config: TrainingConfig) -> int:
    if config.num_layers == -1:
        return model.num_layers
    return max(min(config.num_layers, model.num_layers), 0)


def _optimizer_elements(config: TrainingConfig, elements: int, factored: int) -> float:
    if config.optimizer in ("adam", "adamw"):
        return 2 * elements
    if config.optimizer == "adafactor":
        return factored + (elements if config.adafactor_first_moment else 0)
    return elements  # sgd (MLX keeps its buffer even without momentum) and muon


def _rewritten_copies(config: TrainingConfig) -> int:
    """How many parameter-sized tensors the optimizer's step writes anew."""
    if config.optimizer in ("adam", "adamw"):
        return 2
    if config.optimizer == "adafactor":
        return 1 + (1 if config.adafactor_first_moment else 0)
    if config.optimizer == "sgd":
        return 1 if config.sgd_momentum else 0
    return 1  # muon


# The chunked loss (trainer/chunked_loss.py) is its own term, derived rather than fitted: each
# slice holds two logit-sized arrays in the compute dtype (its logits, and softmax minus
# one-hot), and MLX queues about a hundred operations ahead of the device, allocating their
# outputs as it queues them, which is about 6.5 slices of that loss (measured on the CPU at
# 64, 128 and 256 tokens a slice, vocabulary 151,936: 13 slice-sized copies at once). Besides
# them it keeps the gradient of every hidden state until the backward pass.
CHUNKED_COPIES_PER_SLICE = 2
CHUNKED_SLICES_AT_ONCE = 6.5


def loss_slice_tokens(config: TrainingConfig) -> int | None:
    """Tokens per slice when the run's loss is chunked (the trainer slices a batch only when
    it has more predictions than a slice), else None: the whole batch's logits. `auto` counts
    as the whole batch's here: `resolved_slicing` decides it first."""
    tokens = config.batch_size * config.sequences_per_row * config.model_tokens
    chunk = config.loss_chunk_tokens
    if isinstance(chunk, int) and not isinstance(chunk, bool) and 0 < chunk < tokens:
        return chunk
    return None


# With loss_chunk_tokens auto the loss is sliced only where that lowers the estimated peak by
# at least this share: with a small vocabulary the whole batch's logits are a small term,
# the layers' backward pass sets the peak, and slices would cost time for nothing.
MIN_SLICING_GAIN = 0.02


def resolved_slicing(model: ModelFacts, config: TrainingConfig, coefficients: Coefficients
                     ) -> TrainingConfig:
    """`config` with loss_chunk_tokens auto made what training uses: slices of
    DEFAULT_LOSS_CHUNK_TOKENS where they lower the estimated peak by MIN_SLICING_GAIN, else
    off. The trainer and the client decide with this same function (for one rank's batch)."""
    if config.loss_chunk_tokens != AUTO_TEXT:
        return config
    sliced = config.replace(loss_chunk_tokens=DEFAULT_LOSS_CHUNK_TOKENS)
    whole = config.replace(loss_chunk_tokens=OFF_TEXT)
    if loss_slice_tokens(sliced) is None:
        return whole

    def peak(candidate: TrainingConfig) -> float:
        return sum(combine(features(model, candidate), coefficients).values())

    return sliced if peak(sliced) < (1 - MIN_SLICING_GAIN) * peak(whole) else whole


def chunked_slices_at_once(config: TrainingConfig) -> float:
    """How many slices of the chunked loss are alive together (0 when it is not sliced)."""
    chunk = loss_slice_tokens(config)
    if chunk is None:
        return 0.0
    tokens = config.batch_size * config.sequences_per_row * config.model_tokens
    return min(-(-tokens // chunk), CHUNKED_SLICES_AT_ONCE)


def chunked_loss_bytes(model: ModelFacts, config: TrainingConfig) -> float:
    """The chunked loss's memory: the slices alive at once, and the hidden states' gradient."""
    chunk = loss_slice_tokens(config)
    if chunk is None:
        return 0.0
    tokens = config.batch_size * config.sequences_per_row * config.model_tokens
    slices = chunked_slices_at_once(config)
    s = model.compute_bytes
    return (slices * CHUNKED_COPIES_PER_SLICE * chunk * model.vocab_size * s
            + tokens * model.hidden_size * s)


def dora_copy_bytes(model: ModelFacts, config: TrainingConfig) -> int:
    """Bytes a weight element of one layer takes while DoRA's magnitudes are computed
    (mlx-lm's DoRALinear: the norm of the weight, dequantized, as float32). Measured on one
    512-wide layer: 4 for a 16-bit or float32 weight (the float32 copy, or a float32 weight's
    square); for a quantized one its dequantized copy in the compute dtype as well, and the
    float32 copy and its square both (10 for a bfloat16 4- or 8-bit layer, 8 for a float32 one)."""
    if not (model.quantized or config.quantize_base):
        return LORA_BYTES
    s = model.compute_bytes
    return s + LORA_BYTES + (LORA_BYTES if s < LORA_BYTES else 0)


def generation_bytes(model: ModelFacts, config: TrainingConfig) -> float:
    """A grpo run's sampling, a phase before the step's forward and backward: the KV cache of
    every answer of the batch at once (batch x group x (prompt + answer) tokens, keys and
    values, every layer) and the last position's logits of each (trainer/sampling.py's
    complete_batch). 0 for other objectives."""
    if config.objective != "grpo":
        return 0.0
    rows = config.batch_size * config.sequences_per_row
    cache = (2 * model.num_layers * model.num_kv_heads * model.head_dim * model.compute_bytes
             * rows * config.batch_width)
    return cache + 2 * rows * model.vocab_size * LORA_BYTES


def features(model: ModelFacts, config: TrainingConfig) -> dict[str, float]:
    """The estimate's quantities before the fitted multipliers, in bytes per unit multiplier.

    Keys are Coefficients fields plus the exact terms (multiplier 1). The calibration script
    fits the multipliers to measurements of these same quantities.
    """
    n = trained_layers(model, config)
    layers = model.layers[len(model.layers) - n:] if n else ()
    b = config.batch_size * config.sequences_per_row  # sequences per forward pass
    seq = config.model_tokens
    tokens = b * seq
    s = model.compute_bytes
    h = model.hidden_size
    mlp = model.intermediate_size
    lora = config.method is not Method.FULL
    dora = config.method is Method.DORA

    if lora:
        elements = sum(config.rank * layer.in_plus_out + (layer.outputs if dora else 0)
                       for layer in layers)
        factored = sum(layer.in_plus_out + 2 * config.rank * layer.matrices
                       + (layer.outputs if dora else 0) for layer in layers)
        param_bytes = elements * LORA_BYTES
        trained_bytes = LORA_BYTES
    else:
        elements = sum(layer.parameters for layer in layers)
        factored = sum(layer.factored_elements for layer in layers)
        param_bytes = 0  # full fine-tuning trains weights already in base_weights
        trained_bytes = s
    grad_bytes = elements * trained_bytes
    if config.grad_accumulation_steps > 1:
        grad_bytes *= 2  # the accumulated sum survives between steps beside the new gradient
    weights = model.weights_bytes
    if config.quantize_base and not model.quantized:
        weights = model.quantized_weights_bytes(*config.quantize_base)

    checkpointed = bool(config.grad_checkpoint and n)
    kept = 1 if checkpointed else n  # layers holding all their activations at once
    matrices = sum(layer.matrices for layer in layers) / max(n, 1)
    outputs = sum(layer.outputs for layer in layers) / max(n, 1)
    inputs = 3 * h + mlp
    attention = b * model.num_heads * seq * config.attention_width * s
    once = 1 if n else 0
    return {
        "base_weights": weights,
        "trainable_parameters": param_bytes,
        "gradients": grad_bytes,
        "optimizer_state": _optimizer_elements(config, elements, factored) * trained_bytes,
        "kept_hidden": kept * tokens * h * s,
        "kept_mlp": kept * tokens * mlp * s,
        "kept_attention": kept * attention,
        "kept_lora": kept * tokens * config.rank * matrices * LORA_BYTES if lora else 0,
        "kept_inputs": kept * tokens * inputs * (LORA_BYTES if lora else s),
        # 16-bit only: a float32 model's full fine-tuning keeps its inputs once (kept_inputs)
        "kept_full_inputs": kept * tokens * inputs * s if not lora and s < 4 else 0,
        "dora_outputs": kept * tokens * outputs * s if dora else 0,
        "checkpoint_hidden": n * tokens * h * s if checkpointed else 0,
        # 16-bit only, as measured (a float32 model's checkpointing adds nothing more)
        "checkpoint_mlp": (tokens * mlp * (LORA_BYTES if lora else s)
                           if checkpointed and s < 4 else 0),
        "working_hidden": once * tokens * h * s,
        "working_mlp": once * tokens * mlp * (LORA_BYTES if lora else s),
        "working_attention": once * attention,
        "checkpoint_attention": attention if checkpointed and n > 1 else 0,
        "working_outputs": once * tokens * outputs * LORA_BYTES if lora else 0,
        "dora_weights": (max(layer.matrix_elements for layer in layers)
                         * dora_copy_bytes(model, config) if dora and n else 0),
        "dora_adapted": (max(layer.matrix_elements for layer in layers) * LORA_BYTES
                         if dora and n else 0),
        "loss": (config.predicted_tokens * model.vocab_size * s
                 if loss_slice_tokens(config) is None else 0),
        "chunked_loss": chunked_loss_bytes(model, config),
        "update_lora": _rewritten_copies(config) * elements * trained_bytes if lora else 0,
        "update_full": ((_rewritten_copies(config) + 1) * max(layer.parameters for layer in layers)
                        * trained_bytes if not lora and n else 0),
        "full_gradients": (grad_bytes if not lora and config.optimizer not in ("adafactor", "sgd")
                           else 0),
        "full_gradients_sgd": grad_bytes if not lora and config.optimizer == "sgd" else 0,
        "full_gradients_adafactor": (grad_bytes if not lora and config.optimizer == "adafactor"
                                     else 0),
        "fixed_bytes": 1.0,
        "reference": model.weights_bytes if config.reference_copy else 0,
        "teacher": teacher_bytes(model, config, loss_slice_tokens(config),
                                 chunked_slices_at_once(config)),
        "generation": generation_bytes(model, config),
        # a grpo step whose prompts are computed once (not with grad checkpointing)
        "_grpo_shared": float(config.objective == "grpo" and not config.grad_checkpoint),
        "_elements": elements,
        "_trained_layers": n,
        "_checkpointed": 1.0 if checkpointed else 0.0,
        "_full": 0.0 if lora else 1.0,
    }


# What each layer keeps for the backward pass (all trained layers at once), and which
# breakdown term it adds to.
_KEPT = {
    "kept_hidden": "activations", "kept_mlp": "activations", "kept_lora": "activations",
    "kept_inputs": "activations", "kept_full_inputs": "activations",
    "dora_outputs": "activations", "checkpoint_hidden": "activations",
    "kept_attention": "attention",
}
# The working memory of the one layer being differentiated (with grad checkpointing: being
# recomputed). It exists after the loss's backward has freed the logits' copies.
_WORKING = {
    "working_hidden": "activations", "working_mlp": "activations",
    "working_outputs": "activations",
    "checkpoint_mlp": "activations", "working_attention": "attention",
    "checkpoint_attention": "attention",
}

_EXACT = ("base_weights", "trainable_parameters", "gradients", "optimizer_state")
# The attention matrices among them (batch x heads x tokens^2).
_ATTENTION_KEPT = ("kept_attention",)
_ATTENTION_WORKING = ("working_attention", "checkpoint_attention")


def alive_gradients(quantities: dict[str, float], coefficients) -> float:
    """The gradients' bytes alive at once: an adapter run's all, full fine-tuning's the share
    its multipliers give. `coefficients`: a Coefficients or a mapping of its fields (the
    calibration evaluates every config at once, with arrays)."""
    def value(name):
        return coefficients[name] if isinstance(coefficients, dict) else getattr(
            coefficients, name)
    full = quantities.get("_full", 0.0)
    return ((1 - full) * quantities["gradients"]
            + value("full_gradients") * quantities["full_gradients"]
            + value("full_gradients_adafactor") * quantities["full_gradients_adafactor"]
            + value("full_gradients_sgd") * quantities["full_gradients_sgd"])


def loss_overlap(quantities: dict[str, float], fitted: float) -> float:
    """The share of the top layer's working memory allocated while the loss's copies are
    alive: the fitted loss_overlap for the whole-batch loss, whose backward the compiled step
    interleaves with the top layer's; none for the chunked loss, whose slices take their
    gradients in the forward pass (trainer/chunked_loss.py), so they are gone before any
    layer's backward starts (counted with the overlap, the sample model's grpo run with its
    defaults was over-stated by 17% rather than 6%, and the chunked study held out by up to
    3.4% rather than 1.2%)."""
    return 0.0 if quantities.get("chunked_loss", 0.0) > 0 else fitted


def combine(quantities: dict[str, float], coefficients: Coefficients) -> dict[str, float]:
    """The breakdown in bytes: exact terms, the backward pass's terms, and the overhead.

    The backward pass has two peaks and the larger counts: first the loss's (every kept
    activation, the logits' copies, and the share of the top layer's working memory already
    allocated: loss_overlap), then each layer's (every kept activation, plus the working
    memory of the layer being differentiated; the logits' copies are gone by then). With grad
    checkpointing the loss's phase holds the loss_overlap share of the top layer's recomputed
    attention matrix and none of its backward's. So the
    breakdown's loss line is the loss's copies, and the activations and attention lines hold
    the part of the backward pass's peak above them. Likewise the
    optimizer's step comes after the backward pass has freed the activations, so only the
    part of it above the backward pass's own peak adds to the overhead, and so does DoRA's
    magnitudes' phase (before the first step, when there are neither activations nor gradients
    nor optimizer state: the base's weights, the adapters and one layer's copies). DoRA's
    forward pass is a phase too: every kept activation and one layer's adapted copies.
    """
    breakdown = dict.fromkeys(TERMS, 0.0)
    for name in _EXACT:
        breakdown[name] += quantities[name]
    breakdown["gradients"] = alive_gradients(quantities, coefficients)
    working_share = coefficients.grpo_shared_working if quantities.get("_grpo_shared") else 1.0

    def multiplier(name: str) -> float:
        return getattr(coefficients, name) * (working_share if name in _WORKING else 1.0)

    kept = 0.0  # every trained layer's kept activations
    for name, term in _KEPT.items():
        value = multiplier(name) * quantities[name]
        breakdown[term] += value
        kept += value
    loss = breakdown["loss"] = (coefficients.loss * quantities["loss"]
                                + quantities.get("chunked_loss", 0.0))
    working = {name: multiplier(name) * quantities[name] for name in _WORKING}
    layer = sum(working.values())
    overlap = loss_overlap(quantities, coefficients.loss_overlap)
    in_loss_phase = kept + overlap * layer
    if quantities.get("_checkpointed"):
        # With grad checkpointing the layer whose activations are kept is the top one being
        # recomputed, and its recomputation overlaps the loss's backward as a layer's backward
        # does without checkpointing: by loss_overlap, its attention matrix included; the
        # attention of its backward comes after. (Counted whole, the 12-layer model at
        # 2 x 2,048 tokens was over-stated by 50% with full fine-tuning and 25% with LoRA.)
        in_loss_phase -= (1 - overlap) * sum(
            multiplier(name) * quantities[name] for name in _ATTENTION_KEPT)
        in_loss_phase -= overlap * sum(
            multiplier(name) * quantities[name] for name in _ATTENTION_WORKING)
    above_loss = max(layer - loss, in_loss_phase - kept)
    if above_loss >= 0:
        if layer > 0:
            for name, value in working.items():  # split by share
                breakdown[_WORKING[name]] += value * above_loss / layer
    elif kept > 0:  # the loss's phase of a checkpointed run: less than every kept array
        for name, term in _KEPT.items():
            breakdown[term] += multiplier(name) * quantities[name] * above_loss / kept
    backward = breakdown["activations"] + breakdown["attention"] + breakdown["loss"]
    dora_forward = kept + coefficients.dora_adapted * quantities["dora_adapted"]
    if dora_forward > backward:
        breakdown["activations"] += dora_forward - backward
        backward = dora_forward
    step = (coefficients.update_lora * quantities["update_lora"]
            + coefficients.update_full * quantities["update_full"])
    magnitudes = (coefficients.dora_weights * quantities["dora_weights"]
                  - quantities["gradients"] - quantities["optimizer_state"])
    breakdown["overhead"] = coefficients.fixed_bytes + max(step - backward,
                                                           magnitudes - backward, 0.0)
    if quantities.get("reference"):  # a DPO or grpo reference's frozen copy (only then a line)
        breakdown["reference"] = quantities["reference"]
    if quantities.get("teacher"):  # a distillation's teacher (only then a line)
        breakdown["teacher"] = quantities["teacher"]
    if quantities.get("generation"):  # a grpo run's sampling phase, where above the step's
        breakdown["generation"] = max(quantities["generation"] - backward
                                      - (breakdown["overhead"] - coefficients.fixed_bytes), 0.0)
    return breakdown


def model_problems(model: ModelFacts, config: TrainingConfig
                   ) -> tuple[list[Problem], list[Problem]]:
    """The config's own problems, and those against the model (core/library/run_checks.py),
    the base counted as quantized when a suggestion would quantize it first."""
    traits = model.traits(quantized=model.quantized or bool(config.quantize_base))
    hp = config.to_hyperparameters()
    return config.problems(hp), problems_with_model(config.method, hp, traits)
