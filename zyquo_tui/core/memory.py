"""The memory advisor: how much memory a training config needs, whether it fits, what would.

`MemoryAdvisor.estimate` predicts the peak MLX memory of a run (what `mx.get_peak_memory()`
reports after a few steps) without importing mlx, as a sum of terms:

  base_weights        every tensor of the model, exact bytes from the safetensors headers
                      (any dtype; quantized weights with their scales and biases)
  trainable_parameters  the LoRA/DoRA adapters (float32, as mlx-lm makes them); for full
                      fine-tuning the trained weights are already in base_weights
  gradients           one gradient per trainable parameter, plus the accumulation buffer
                      that grad_accumulation_steps > 1 keeps between steps
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
  loss                the logits and the cross-entropy, batch x tokens x vocabulary
  overhead            a fixed amount, and what the optimizer's step needs beyond the backward
                      pass (it writes new moments while the old ones are alive, after the
                      activations are freed: the peak is the larger of the two phases)

The multipliers of the activation, attention, loss and overhead terms were fitted to real
mlx-lm training (bench/calibrate_memory.py; the table is in docs/memory.md), one table per
device. When this machine has measured runs (memory_history.jsonl in
$ZYQUO_HOME, from `zyquo-tui plan --measure` and from finished runs), the estimate is scaled by
the median measured/estimated ratio, and the breakdown says so.

Nothing here imports mlx; an estimate takes well under a millisecond once the model's headers
are read (they are cached per folder), so the run setup can recompute it on every keystroke.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import re
import socket
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from .child_process import run_child
from .errors import EXIT_PROBLEMS, EXIT_USAGE, UserError
from .memory_budget import CPU, GPU, MemoryBudget, machine_budget
from .models import mlx_lm_supports, mlx_module_for, mlx_weight_files, quantization_of
from .paths import zyquo_home
from .runs import OPTIMIZERS, Hyperparameters, Method, Run
from .safetensors_header import SafetensorsHeaderError, TensorInfo, TensorTable, read_headers

MIB = 1024 * 1024
GIB = 1024 * MIB

# mlx-lm pads each batch to one plus a multiple of 32 tokens, then cuts it to max_seq_length
# (trainer/batches.py); the model sees all but the last token of each row.
PAD_TO = 32
DEFAULT_MAX_SEQ_LENGTH = 2048

# Verdict thresholds (docs/memory.md). Within TIGHT_FRACTION of the budget the estimate's own
# error (within 15% when calibrated) could cross it.
TIGHT_FRACTION = 0.85

HISTORY_FILE = "memory_history.jsonl"
HISTORY_WINDOW = 10  # the most recent measurements the correction looks at
HISTORY_MIN_EFFECT = 0.02  # ratios closer to 1 than this leave the estimate alone
HISTORY_CLAMP = (0.5, 2.0)

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "F32": 4, "F16": 2, "BF16": 2,
               "F64": 8, "float64": 8}
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
LORA_BYTES = 4  # mlx-lm creates lora_a, lora_b (and DoRA's m) in float32


class Verdict(str, enum.Enum):
    """Whether a config fits this machine's memory budget."""

    FITS = "fits"
    TIGHT = "tight"
    WONT_FIT = "won't fit"


# --- calibrated multipliers ---------------------------------------------------------------


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
    kept_attention: float  # x heads x tokens: the attention matrix (0: none kept)
    kept_lora: float  # x rank per adapted matrix, float32: x @ A
    # A 16-bit model's inputs to the adapted matrices are promoted to float32 (A is float32)
    # and kept for A's gradient: (3 x hidden + intermediate) float32 values, the attention's
    # input and output, the MLP's input and the down projection's.
    kept_lora_inputs: float
    kept_full_inputs: float  # the same inputs in the model's dtype, for full fine-tuning
    dora_outputs: float  # x output widths of the adapted matrices (DoRA rescales them)
    # With grad checkpointing each layer keeps only its input, and the layer being
    # recomputed holds its forward and its backward at once:
    checkpoint_hidden: float  # x hidden size, per checkpointed layer
    checkpoint_mlp: float  # x intermediate size, once
    # Once:
    working_hidden: float  # x hidden size
    working_mlp: float  # x intermediate size
    working_attention: float  # x heads x tokens
    working_outputs: float  # x output widths of the adapted matrices, float32: (x @ A) @ B
    dora_weights: float  # x one layer's matrices, float32: DoRA's adapted weights
    loss: float  # x vocabulary: logits, softmax and their gradient
    # The optimizer's step writes new moments while the old ones are alive: x the bytes of
    # the state the step rewrites (adam's m and v, muon's and sgd-with-momentum's v,
    # adafactor's temporaries), for adapters (float32) and for full fine-tuning. It happens
    # after the backward pass, so the peak is the larger of the backward pass and the step.
    update_lora: float
    update_full: float
    fixed_bytes: float
    calibrated: bool = True


# Fitted on CPU with bench/calibrate_memory.py --fit (mlx 0.32.4, mlx-lm 0.32.2): the table
# and the method are in docs/memory.md.
CPU_COEFFICIENTS = Coefficients(
    kept_hidden=9.34, kept_mlp=2.61, kept_attention=1.15, kept_lora=1.0, kept_lora_inputs=1.0,
    kept_full_inputs=1.21, dora_outputs=0.59, checkpoint_hidden=1.0, checkpoint_mlp=7.72,
    working_hidden=10.56, working_mlp=8.44, working_attention=1.39, working_outputs=0.39,
    dora_weights=0.92, loss=2.81, update_lora=1.02, update_full=1.65, fixed_bytes=0.0,
)

# Metal: not measured here (no Mac in CI). Since mlx PR 2054 (April 2025) MLX computes attention
# unfused whenever it is differentiated, on Metal as on the CPU, so every trained layer keeps its
# attention matrix there too, and the CPU fit is the best prior. A fused attention backward
# (mlx PR 3241, open) would keep none: set kept_attention to 0 here when an MLX with it is
# pinned. Until a Mac's measurements calibrate this table, the machine's history corrects it.
GPU_COEFFICIENTS = dataclasses.replace(CPU_COEFFICIENTS, calibrated=False)

COEFFICIENTS = {CPU: CPU_COEFFICIENTS, GPU: GPU_COEFFICIENTS}


# --- the model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerShape:
    """What one transformer block contributes to the estimate, summed over its matrices."""

    matrices: int  # Linear matrices (what LoRA adapts), experts counted
    in_plus_out: int  # sum of (input + output width) over them: LoRA parameters per rank
    outputs: int  # sum of output widths (what DoRA rescales)
    parameters: int  # every parameter of the block (what full fine-tuning trains)
    parameter_bytes: int  # their bytes as stored
    factored_elements: int  # adafactor's state for those parameters (rows + cols per matrix)
    matrix_elements: int  # elements of the Linear weights (DoRA's adapted copies)


@dataclass
class ModelFacts:
    """What the estimate needs from a model: its shape and the exact bytes of its tensors."""

    path: str
    model_type: str | None
    architecture_known: bool
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    compute_dtype: str  # float32, bfloat16 or float16: activations and logits use it
    weights_bytes: int
    layers: tuple[LayerShape, ...]
    quantization_bits: int | None = None
    quantization_group_size: int | None = None
    # Bytes of the 2-D weights a quantization would pack (mlx_lm convert -q), and their count.
    quantizable_elements: int = 0
    quantizable_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def quantized(self) -> bool:
        return self.quantization_bits is not None

    @property
    def compute_bytes(self) -> int:
        return DTYPE_BYTES.get(self.compute_dtype, 2)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> "ModelFacts":
        """Read config.json and the safetensors headers; UserError when the folder is no model."""
        path = Path(folder).expanduser()
        key = str(path.resolve()) if path.exists() else str(path)
        stamp = _folder_stamp(path)
        cached = _FACTS_CACHE.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        facts = cls._read_folder(path)
        _FACTS_CACHE[key] = (stamp, facts)
        return facts

    @classmethod
    def _read_folder(cls, path: Path) -> "ModelFacts":
        if not path.is_dir():
            raise UserError(f"{path}: no such model folder; give the folder that holds "
                            "config.json and model*.safetensors.")
        config_path = path / "config.json"
        if not config_path.is_file():
            raise UserError(f"{path} has no config.json, so it is not a model folder; give the "
                            "folder that holds config.json and model*.safetensors.")
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise UserError(f"{config_path}: not valid JSON ({error}); repair or re-download "
                            "the model.") from None
        if not isinstance(config, dict):
            raise UserError(f"{config_path}: not a JSON object; repair or re-download the model.")
        weights = mlx_weight_files(path)
        if not weights:
            raise UserError(f"{path} has no model*.safetensors weights; convert the model with "
                            "`mlx_lm convert` first.")
        try:
            table = read_headers(weights)
        except SafetensorsHeaderError as error:
            raise UserError(f"{error} Re-download or re-convert the model.") from None
        return cls.from_tables(config, table, path=str(path))

    @classmethod
    def from_record(cls, record: dict[str, Any], path: str = "") -> "ModelFacts":
        """From a stored {"config": ..., "tensors": [[name, dtype, shape, nbytes], ...]}."""
        tensors = tuple(
            TensorInfo(name=name, dtype=dtype, shape=tuple(shape), nbytes=nbytes,
                       file=Path("model.safetensors"))
            for name, dtype, shape, nbytes in record["tensors"]
        )
        return cls.from_tables(record["config"], TensorTable(tensors=tensors, metadata={}),
                               path=path)

    @classmethod
    def from_tables(cls, config: dict[str, Any], table: TensorTable,
                    path: str = "") -> "ModelFacts":
        notes: list[str] = []
        model_type = _config_value(config, "model_type")
        module = mlx_module_for(config)
        known = mlx_lm_supports(module)
        if not known:
            notes.append(
                f"mlx-lm does not know model_type {model_type!r}: estimated from config.json "
                "alone, as a llama-style decoder.")
        quantization = quantization_of(config)
        bits = quantization.bits if quantization else None
        group = quantization.group_size if quantization else None

        layer_tensors: dict[int, list[TensorInfo]] = {}
        for tensor in table:
            match = _LAYER_INDEX.search(tensor.name)
            if match:
                layer_tensors.setdefault(int(match.group(1)), []).append(tensor)

        hidden = _int(config, "hidden_size", "n_embd", "d_model")
        num_layers = _int(config, "num_hidden_layers", "n_layer", "num_layers")
        if num_layers is None and layer_tensors:
            num_layers = max(layer_tensors) + 1
        heads = _int(config, "num_attention_heads", "n_head", "num_heads")
        kv_heads = _int(config, "num_key_value_heads", "num_kv_heads") or heads
        vocab = _int(config, "vocab_size")
        intermediate = _int(config, "intermediate_size", "ffn_dim", "n_inner")
        embed = next((t for t in table if "embed" in t.name and t.name.endswith(".weight")),
                     None)
        if vocab is None and embed is not None:
            vocab = embed.shape[0]
        if hidden is None and embed is not None and not quantization:
            hidden = embed.shape[-1]
        missing = [name for name, value in (("hidden_size", hidden),
                                            ("num_hidden_layers", num_layers),
                                            ("num_attention_heads", heads),
                                            ("vocab_size", vocab)) if not value]
        if missing:
            where = f"{path}/config.json" if path else "config.json"
            raise UserError(f"{where} lacks {', '.join(missing)}, which the memory estimate "
                            "needs; is this a language model?")
        head_dim = _int(config, "head_dim") or hidden // heads
        if intermediate is None:
            intermediate = 4 * hidden
            notes.append("config.json has no intermediate_size: assumed 4 x hidden_size.")

        weight_tensors = [t for t in table.tensors if _is_matrix_weight(t, table)]
        compute_dtype = _compute_dtype(config, table)
        layers = []
        for index in range(num_layers):
            tensors = layer_tensors.get(index)
            if tensors:
                layers.append(_layer_shape(tensors, table, bits))
            else:
                layers.append(_llama_layer(hidden, heads, kv_heads, head_dim, intermediate,
                                           DTYPE_BYTES.get(compute_dtype, 2)))
        if not layer_tensors:
            notes.append("the weights name no layers (model.layers.N...): the layers' shapes "
                         "come from config.json.")
        quantizable = [t for t in weight_tensors if t.dtype in FLOAT_DTYPES]
        return cls(
            path=path, model_type=model_type, architecture_known=known, hidden_size=hidden,
            num_layers=num_layers, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
            intermediate_size=intermediate, vocab_size=vocab, compute_dtype=compute_dtype,
            weights_bytes=table.total_bytes, layers=tuple(layers), quantization_bits=bits,
            quantization_group_size=group,
            quantizable_elements=sum(t.elements for t in quantizable),
            quantizable_bytes=sum(t.nbytes for t in quantizable), notes=notes,
        )

    def quantized_weights_bytes(self, bits: int, group_size: int) -> int:
        """The weights after `mlx_lm convert -q --q-bits bits --q-group-size group_size`.

        Each matrix packs bits/8 bytes per weight plus a scale and a bias (compute dtype) per
        group; everything else (norms, biases) is unchanged.
        """
        per_weight = bits / 8 + 2 * self.compute_bytes / group_size
        return int(self.weights_bytes - self.quantizable_bytes
                   + self.quantizable_elements * per_weight)


_FACTS_CACHE: dict[str, tuple[tuple, ModelFacts]] = {}
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|block)\.(\d+)\.")


def _folder_stamp(path: Path) -> tuple:
    try:
        files = sorted(path.glob("model*.safetensors")) + [path / "config.json"]
        return tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files
                     if f.exists())
    except OSError:
        return ()


def _config_value(config: dict[str, Any], *keys: str) -> Any:
    # Multimodal checkpoints keep the language model's shape in text_config.
    text = config.get("text_config")
    for source in (config, text if isinstance(text, dict) else {}):
        for key in keys:
            if source.get(key) is not None:
                return source[key]
    return None


def _int(config: dict[str, Any], *keys: str) -> int | None:
    value = _config_value(config, *keys)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def _compute_dtype(config: dict[str, Any], table: TensorTable) -> str:
    """The dtype activations take: the scales' for a quantized model, else the weights'."""
    by_dtype: dict[str, int] = {}
    for tensor in table:
        if tensor.dtype in FLOAT_DTYPES:
            by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + tensor.nbytes
    if by_dtype:
        dominant = max(by_dtype, key=by_dtype.get)
        return {"F32": "float32", "F16": "float16", "BF16": "bfloat16",
                "F64": "float32"}[dominant]
    named = _config_value(config, "torch_dtype", "dtype")
    return named if named in ("float32", "float16", "bfloat16") else "bfloat16"


def _is_matrix_weight(tensor: TensorInfo, table: TensorTable) -> bool:
    """A Linear (or embedding) weight: 2-D or more, named .weight, not a norm."""
    if not tensor.name.endswith(".weight") or len(tensor.shape) < 2:
        return False
    return "norm" not in tensor.name.rsplit(".", 2)[-2]


def _layer_shape(tensors: list[TensorInfo], table: TensorTable, bits: int | None) -> LayerShape:
    matrices = in_plus_out = outputs = parameters = parameter_bytes = 0
    factored = matrix_elements = 0
    auxiliary = {t.name for t in tensors if t.name.endswith((".scales", ".biases"))
                 and f"{t.name.rsplit('.', 1)[0]}.weight" in table}
    for tensor in tensors:
        if tensor.name in auxiliary:
            parameter_bytes += tensor.nbytes
            continue
        shape = list(tensor.shape)
        packed = tensor.dtype in ("U32", "I32") and f"{tensor.name[:-7]}.scales" in table
        if packed and bits:
            shape[-1] = shape[-1] * 32 // bits
        elements = math.prod(shape)
        parameters += elements
        parameter_bytes += tensor.nbytes
        if _is_matrix_weight(tensor, table):
            experts = math.prod(shape[:-2]) if len(shape) > 2 else 1
            out_dims, in_dims = shape[-2], shape[-1]
            matrices += experts
            in_plus_out += experts * (in_dims + out_dims)
            outputs += experts * out_dims
            matrix_elements += elements
            factored += experts * (in_dims + out_dims)
        else:
            factored += elements
    return LayerShape(matrices=matrices, in_plus_out=in_plus_out, outputs=outputs,
                      parameters=parameters, parameter_bytes=parameter_bytes,
                      factored_elements=factored, matrix_elements=matrix_elements)


def _llama_layer(hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int,
                 dtype_bytes: int) -> LayerShape:
    """A llama-style block from config.json alone: q, k, v, o, gate, up, down, two norms."""
    q, kv = heads * head_dim, kv_heads * head_dim
    shapes = [(q, hidden), (kv, hidden), (kv, hidden), (hidden, q),
              (intermediate, hidden), (intermediate, hidden), (hidden, intermediate)]
    matrix_elements = sum(o * i for o, i in shapes)
    parameters = matrix_elements + 2 * hidden
    return LayerShape(
        matrices=len(shapes), in_plus_out=sum(o + i for o, i in shapes),
        outputs=sum(o for o, _ in shapes), parameters=parameters,
        parameter_bytes=parameters * dtype_bytes,
        factored_elements=sum(o + i for o, i in shapes) + 2 * hidden,
        matrix_elements=matrix_elements,
    )


# --- the training config ------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingConfig:
    """The settings that decide a run's memory, with mlx-lm's names and defaults.

    longest_row_tokens is the dataset's longest tokenized row when known: batches are padded
    to their longest row, so it, not max_seq_length, sets the activations. Unknown, every
    batch is assumed to reach max_seq_length.
    """

    method: Method = Method.LORA
    batch_size: int = 4
    max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH
    num_layers: int = 16
    rank: int = 8
    grad_checkpoint: bool = False
    optimizer: str = "adam"
    grad_accumulation_steps: int = 1
    longest_row_tokens: int | None = None
    adafactor_first_moment: bool = False  # optimizer_config.adafactor.beta_1 is set
    sgd_momentum: bool = False  # optimizer_config.sgd.momentum is above 0
    # Estimate as if the base were quantized first (a QLoRA suggestion): (bits, group size).
    quantize_base: tuple[int, int] | None = None

    @property
    def batch_width(self) -> int:
        """Tokens per row of the widest batch, as trainer/batches.py pads and cuts it."""
        if self.longest_row_tokens is None:
            return self.max_seq_length
        padded = 1 + PAD_TO * math.ceil(max(self.longest_row_tokens, 1) / PAD_TO)
        return min(padded, self.max_seq_length)

    @property
    def model_tokens(self) -> int:
        """Tokens per row the model runs on (inputs are the row without its last token)."""
        return max(self.batch_width - 1, 1)

    def replace(self, **changes: Any) -> "TrainingConfig":
        return dataclasses.replace(self, **changes)

    def settings(self) -> dict[str, Any]:
        """The settings as mlx-lm names them (what suggestions change)."""
        data = {
            "method": self.method.value, "batch_size": self.batch_size,
            "grad_accumulation_steps": self.grad_accumulation_steps,
            "max_seq_length": self.max_seq_length, "num_layers": self.num_layers,
            "grad_checkpoint": self.grad_checkpoint, "optimizer": self.optimizer,
        }
        if self.method is not Method.FULL:
            data["rank"] = self.rank
        if self.quantize_base:
            data["quantize_base"] = {"bits": self.quantize_base[0],
                                     "group_size": self.quantize_base[1]}
        return data

    def problems(self) -> list[str]:
        """Values no run can train with, one sentence each."""
        found = []
        for name in ("batch_size", "max_seq_length", "grad_accumulation_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                found.append(f"{name} must be a whole number of at least 1, not {value!r}.")
        if (isinstance(self.num_layers, bool) or not isinstance(self.num_layers, int)
                or (self.num_layers < 1 and self.num_layers != -1)):
            found.append(f"num_layers must be at least 1 (or -1 for all), not "
                         f"{self.num_layers!r}.")
        if self.method is not Method.FULL and (
                isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1):
            found.append(f"rank must be a whole number of at least 1, not {self.rank!r}.")
        if self.optimizer not in OPTIMIZERS:
            found.append(f"optimizer {self.optimizer!r} is unknown; choose one of "
                         f"{', '.join(OPTIMIZERS)}.")
        if self.longest_row_tokens is not None and self.longest_row_tokens < 0:
            found.append("the longest row cannot have a negative number of tokens.")
        return found

    @classmethod
    def from_hyperparameters(cls, method: Method | str, hp: Hyperparameters | dict[str, Any],
                             longest_row_tokens: int | None = None) -> "TrainingConfig":
        if isinstance(hp, dict):
            hp = Hyperparameters.from_dict(hp)
        adafactor = (hp.optimizer_config or {}).get("adafactor") or {}
        sgd = (hp.optimizer_config or {}).get("sgd") or {}
        return cls(
            method=Method(method), batch_size=hp.batch_size, max_seq_length=hp.max_seq_length,
            num_layers=hp.num_layers, rank=hp.rank, grad_checkpoint=bool(hp.grad_checkpoint),
            optimizer=hp.optimizer, grad_accumulation_steps=hp.grad_accumulation_steps,
            longest_row_tokens=longest_row_tokens,
            adafactor_first_moment=adafactor.get("beta_1") is not None,
            sgd_momentum=bool(sgd.get("momentum")),
        )

    @classmethod
    def from_run(cls, run: Run, longest_row_tokens: int | None = None) -> "TrainingConfig":
        return cls.from_hyperparameters(run.method, run.hyperparameters, longest_row_tokens)

    def to_hyperparameters(self, base: Hyperparameters | None = None) -> Hyperparameters:
        """Hyperparameters with this config's settings (the rest from `base` or defaults)."""
        hp = Hyperparameters.from_dict((base or Hyperparameters()).to_dict())
        hp.batch_size = self.batch_size
        hp.max_seq_length = self.max_seq_length
        hp.num_layers = self.num_layers
        hp.grad_checkpoint = self.grad_checkpoint
        hp.optimizer = self.optimizer
        hp.grad_accumulation_steps = self.grad_accumulation_steps
        hp.lora_parameters = {**hp.lora_parameters, "rank": self.rank}
        return hp


# --- the estimate -----------------------------------------------------------------------------

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
    problems: list[str] = field(default_factory=list)  # settings training would reject
    correction: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "estimate_bytes": self.total_bytes, "model_estimate_bytes": self.model_bytes,
            "breakdown": dict(self.breakdown), "device": self.device,
            "trained_layers": self.trained_layers,
            "trainable_parameters": self.trainable_parameters,
            "batch_width": self.batch_width, "settings": self.config.settings(),
            "history_correction": self.correction, "notes": list(self.notes),
            "problems": list(self.problems),
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


def features(model: ModelFacts, config: TrainingConfig) -> dict[str, float]:
    """The estimate's quantities before the fitted multipliers, in bytes per unit multiplier.

    Keys are Coefficients fields plus the exact terms (multiplier 1). The calibration script
    fits the multipliers to measurements of these same quantities.
    """
    n = trained_layers(model, config)
    layers = model.layers[len(model.layers) - n:] if n else ()
    b = config.batch_size
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
    attention = b * model.num_heads * seq * seq * s
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
        "kept_lora_inputs": kept * tokens * inputs * LORA_BYTES if lora and s < 4 else 0,
        "kept_full_inputs": kept * tokens * inputs * s if not lora else 0,
        "dora_outputs": kept * tokens * outputs * s if dora else 0,
        "checkpoint_hidden": n * tokens * h * s if checkpointed else 0,
        "checkpoint_mlp": tokens * mlp * s if checkpointed else 0,
        "working_hidden": once * tokens * h * s,
        "working_mlp": once * tokens * mlp * s,
        "working_attention": once * attention,
        "working_outputs": once * tokens * outputs * LORA_BYTES if lora else 0,
        "dora_weights": (max(layer.matrix_elements for layer in layers) * LORA_BYTES
                         if dora and n else 0),
        "loss": tokens * model.vocab_size * s,
        "update_lora": _rewritten_copies(config) * elements * trained_bytes if lora else 0,
        "update_full": _rewritten_copies(config) * elements * trained_bytes if not lora else 0,
        "fixed_bytes": 1.0,
        "_elements": elements,
        "_trained_layers": n,
    }


# Which breakdown term each fitted quantity of the backward pass adds to.
_TERM_OF = {
    "kept_hidden": "activations", "kept_mlp": "activations", "kept_lora": "activations",
    "kept_lora_inputs": "activations", "kept_full_inputs": "activations",
    "dora_outputs": "activations", "checkpoint_hidden": "activations",
    "checkpoint_mlp": "activations", "working_hidden": "activations",
    "working_mlp": "activations", "working_outputs": "activations",
    "dora_weights": "activations", "kept_attention": "attention",
    "working_attention": "attention", "loss": "loss",
}
_EXACT = ("base_weights", "trainable_parameters", "gradients", "optimizer_state")


def combine(quantities: dict[str, float], coefficients: Coefficients) -> dict[str, float]:
    """The breakdown in bytes: exact terms, the backward pass's terms, and the overhead.

    The optimizer's step comes after the backward pass has freed the activations, so only
    the part of it above the backward pass's own peak adds to the overhead.
    """
    breakdown = dict.fromkeys(TERMS, 0.0)
    for name in _EXACT:
        breakdown[name] += quantities[name]
    for name, term in _TERM_OF.items():
        breakdown[term] += getattr(coefficients, name) * quantities[name]
    backward = breakdown["activations"] + breakdown["attention"] + breakdown["loss"]
    step = (coefficients.update_lora * quantities["update_lora"]
            + coefficients.update_full * quantities["update_full"])
    breakdown["overhead"] = coefficients.fixed_bytes + max(step - backward, 0.0)
    return breakdown


def _model_problems(model: ModelFacts, config: TrainingConfig) -> list[str]:
    found = config.problems()
    name = Path(model.path).name or "the model"
    if isinstance(config.num_layers, int) and config.num_layers > model.num_layers:
        found.append(f"num_layers is {config.num_layers}, but {name} has only "
                     f"{model.num_layers} layers; use -1 to train all of them, or fewer.")
    quantized = model.quantized or bool(config.quantize_base)
    if config.method is Method.FULL and quantized:
        found.append(f"full fine-tuning needs an unquantized model, and {name} is quantized; "
                     "use qlora (or lora) on it.")
    if config.method is Method.QLORA and not quantized:
        found.append(f"qlora needs a quantized base model, and {name} is not quantized; use "
                     "lora, or quantize it first (`mlx_lm convert -q`).")
    return found


# --- history of measurements ------------------------------------------------------------------


@dataclass
class HistoryCorrection:
    """A factor from this machine's measured peaks against their estimates."""

    factor: float
    measurements: int
    same_model: bool

    def sentence(self) -> str:
        which = "this model's" if self.same_model else "this machine's"
        return (f"scaled by {self.factor:.2f}: the median measured/estimated ratio of "
                f"{which} last {self.measurements} measured run(s) ({HISTORY_FILE}).")


class MemoryHistory:
    """This machine's measured peaks beside their estimates: memory_history.jsonl.

    One JSON object per line: time, host, device, model, method, settings, estimate_bytes (the
    uncorrected model estimate), measured_peak_bytes, source ("measure" or "run") and run_id.
    `plan --measure` appends; finished runs are added by `record_run` (the supervisor calls it
    when a run ends) or `import_runs` (a scan of the store).
    """

    def __init__(self, path: Path | None = None, records: list[dict[str, Any]] | None = None
                 ) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = list(records or [])

    @classmethod
    def load(cls, home: Path | None = None) -> "MemoryHistory":
        path = (home or zyquo_home()) / HISTORY_FILE
        records = []
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # a partial last line, or a line damaged by hand
                    if (isinstance(record, dict)
                            and isinstance(record.get("estimate_bytes"), (int, float))
                            and isinstance(record.get("measured_peak_bytes"), (int, float))
                            and record["estimate_bytes"] > 0):
                        records.append(record)
        except OSError:
            pass
        return cls(path, records)

    def append(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time()), "host": socket.gethostname(), **record}
        self.records.append(record)
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def correction(self, device: str, model_path: str | None = None) -> HistoryCorrection | None:
        host = socket.gethostname()
        mine = [r for r in self.records if r.get("host") == host and r.get("device") == device]
        same = [r for r in mine if model_path and r.get("model") == model_path]
        chosen = (same or mine)[-HISTORY_WINDOW:]
        if not chosen:
            return None
        factor = statistics.median(r["measured_peak_bytes"] / r["estimate_bytes"]
                                   for r in chosen)
        factor = min(max(factor, HISTORY_CLAMP[0]), HISTORY_CLAMP[1])
        if abs(factor - 1) < HISTORY_MIN_EFFECT:
            return None
        return HistoryCorrection(factor=factor, measurements=len(chosen), same_model=bool(same))

    def record_run(self, run: Run) -> bool:
        """Add a finished run's measured peak beside the estimate its gate recorded.

        Only runs whose estimate used the dataset's real longest row count: with the row
        length unknown the estimate assumed max_seq_length, which is no fair comparison.
        Returns whether a record was added.
        """
        memory = run.memory or {}
        peak = (run.summary or {}).get("peak_memory_bytes")
        estimate = memory.get("model_estimate_bytes")
        if not peak or not estimate or not memory.get("exact_sequence"):
            return False
        if any(r.get("run_id") == run.id for r in self.records):
            return False
        host = (run.process or {}).get("host")
        if host and host != socket.gethostname():
            return False
        self.append({"device": memory.get("device", CPU), "model": run.model,
                     "method": run.method.value, "settings": memory.get("settings"),
                     "estimate_bytes": int(estimate), "measured_peak_bytes": int(peak),
                     "source": "run", "run_id": run.id})
        return True

    def import_runs(self, runs: Iterable[Any]) -> int:
        """record_run for every finished run (others and damaged records are skipped)."""
        added = 0
        for run in runs:
            if isinstance(run, Run) and run.state.is_terminal and self.record_run(run):
                added += 1
        return added


# --- verdicts and suggestions -----------------------------------------------------------------


@dataclass
class Assessment:
    """A verdict on an estimate against the budget, with its one-line reason."""

    verdict: Verdict
    reason: str
    estimate: Estimate
    budget: MemoryBudget

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "reason": self.reason,
                "estimate_bytes": self.estimate.total_bytes,
                "budget_bytes": self.budget.budget_bytes,
                "available_bytes": self.budget.available_bytes}


@dataclass
class Suggestion:
    """A changed config the model says fits, what changed, and its estimate."""

    title: str
    changes: dict[str, Any]
    config: TrainingConfig
    estimate: Estimate
    verdict: Verdict
    truncated_rows: int | None = None  # rows the new max_seq_length cuts, when known

    def to_json(self) -> dict[str, Any]:
        data = {"title": self.title, "changes": dict(self.changes),
                "estimate_bytes": self.estimate.total_bytes, "verdict": self.verdict.value}
        if "max_seq_length" in self.changes:
            data["truncated_rows"] = self.truncated_rows
        return data


@dataclass
class Plan:
    """Everything `zyquo-tui plan` shows: estimate, verdict, budget and suggestions."""

    assessment: Assessment
    suggestions: list[Suggestion]
    token_lengths_known: bool

    @property
    def estimate(self) -> Estimate:
        return self.assessment.estimate

    def to_json(self) -> dict[str, Any]:
        budget = self.assessment.budget
        return {
            **self.estimate.to_json(),
            "verdict": self.assessment.verdict.value,
            "reason": self.assessment.reason,
            "budget_bytes": budget.budget_bytes,
            "budget_source": budget.budget_source,
            "available_bytes": budget.available_bytes,
            "used_by_others_bytes": budget.used_by_others_bytes,
            "total_memory_bytes": budget.total_bytes,
            "suggestions": [s.to_json() for s in self.suggestions],
        }


def fmt_bytes(value: float) -> str:
    if abs(value) >= GIB:
        return f"{value / GIB:.1f} GiB"
    return f"{value / MIB:.0f} MiB" if abs(value) >= 10 * MIB else f"{value / MIB:.1f} MiB"


class MemoryAdvisor:
    """Estimates a config's peak memory, judges it against this machine's budget, and
    searches for changed configs that fit."""

    MAX_SUGGESTIONS = 6

    def __init__(self, budget: MemoryBudget | None = None, *, device: str | None = None,
                 history: MemoryHistory | None = None,
                 coefficients: Coefficients | None = None) -> None:
        self._budget = budget
        self.device = device or (budget.device if budget else None)
        self.history = history if history is not None else MemoryHistory()
        self._coefficients = coefficients

    @classmethod
    def for_machine(cls, home: Path | None = None, *, refresh_probe: bool = False
                    ) -> "MemoryAdvisor":
        """This machine's budget (probed once, cached) and measured history."""
        budget = machine_budget(home, refresh=refresh_probe)
        return cls(budget, history=MemoryHistory.load(home))

    @classmethod
    def for_calibration(cls, device: str = CPU) -> "MemoryAdvisor":
        """The bare model: no history, a budget that everything fits."""
        return cls(MemoryBudget.fixed(1 << 50, device=device), history=MemoryHistory())

    @property
    def budget(self) -> MemoryBudget:
        if self._budget is None:
            self._budget = machine_budget()
            self.device = self.device or self._budget.device
        return self._budget

    @property
    def coefficients(self) -> Coefficients:
        if self._coefficients is not None:
            return self._coefficients
        return COEFFICIENTS.get(self.device or self.budget.device, CPU_COEFFICIENTS)

    # -- estimate ------------------------------------------------------------------------------

    def estimate(self, model: ModelFacts, config: TrainingConfig, *,
                 use_history: bool = True) -> Estimate:
        device = self.device or self.budget.device
        problems = _model_problems(model, config)
        if config.problems():
            breakdown = dict.fromkeys(TERMS, 0)
            return Estimate(0, breakdown, 0, config, device, 0, 0, 0, list(model.notes),
                            problems)
        coefficients = self.coefficients
        quantities = features(model, config)
        breakdown = combine(quantities, coefficients)
        rounded = {name: int(round(value)) for name, value in breakdown.items()}
        total = sum(rounded.values())
        notes = list(model.notes)
        if config.longest_row_tokens is None:
            notes.append(f"row lengths unknown: assumed every batch is {config.max_seq_length} "
                         "tokens wide (give the dataset for its real longest row).")
        if config.quantize_base and not model.quantized:
            bits, group = config.quantize_base
            notes.append(f"base weights as if quantized to {bits} bits (group {group}).")
        if not coefficients.calibrated:
            notes.append(f"the {device} terms are not calibrated on this kind of device yet; "
                         "`zyquo-tui plan --measure` measures the real peak.")
        estimate = Estimate(
            total_bytes=total, breakdown=rounded, model_bytes=total, config=config,
            device=device, trained_layers=int(quantities["_trained_layers"]),
            trainable_parameters=int(quantities["_elements"]),
            batch_width=config.batch_width, notes=notes, problems=problems,
        )
        if use_history:
            correction = self.history.correction(device, model.path or None)
            if correction is not None:
                corrected = int(round(total * correction.factor))
                estimate.breakdown["history_correction"] = corrected - total
                estimate.total_bytes = corrected
                estimate.correction = round(correction.factor, 4)
                estimate.notes.append(f"corrected by this machine's history: "
                                      f"{correction.sentence()}")
        return estimate

    # -- verdict -------------------------------------------------------------------------------

    def judge(self, estimate: Estimate) -> Assessment:
        """fits, tight or won't fit (thresholds in docs/memory.md), with the reason."""
        budget = self.budget
        need = estimate.total_bytes
        limit = budget.budget_bytes
        where = budget.budget_source
        if need > limit:
            verdict = Verdict.WONT_FIT
            reason = (f"needs about {fmt_bytes(need)}, more than the {fmt_bytes(limit)} "
                      f"training may use here ({where}).")
        elif need > TIGHT_FRACTION * limit:
            verdict = Verdict.TIGHT
            reason = (f"needs about {fmt_bytes(need)}, {need / limit:.0%} of the "
                      f"{fmt_bytes(limit)} training may use here ({where}): within the "
                      "estimate's error of the limit.")
        elif need > budget.available_bytes:
            verdict = Verdict.TIGHT
            reason = (f"needs about {fmt_bytes(need)} of the {fmt_bytes(limit)} budget, but "
                      f"other processes use {fmt_bytes(budget.used_by_others_bytes)} now and "
                      f"only {fmt_bytes(budget.available_bytes)} is free: close some or it "
                      "will swap.")
        else:
            verdict = Verdict.FITS
            reason = (f"needs about {fmt_bytes(need)} of the {fmt_bytes(limit)} training may "
                      f"use here ({need / limit:.0%}); {fmt_bytes(budget.available_bytes)} "
                      "is free now.")
        return Assessment(verdict, reason, estimate, budget)

    def assess(self, model: ModelFacts, config: TrainingConfig) -> Assessment:
        return self.judge(self.estimate(model, config))

    # -- suggestions ---------------------------------------------------------------------------

    def suggest(self, model: ModelFacts, config: TrainingConfig,
                token_lengths: Sequence[int] | None = None) -> list[Suggestion]:
        """Changed configs that the model says fit, least disruptive first.

        The search goes stage by stage: keep the effective batch (halve the batch, double
        grad accumulation), grad checkpointing, shorter sequences, fewer layers, a lower rank,
        LoRA instead of full fine-tuning, a quantized base (QLoRA). Within a stage the mildest
        option that fits is suggested. A stage none of whose options fits hands its most
        saving option on to the next stages, so later suggestions combine changes; each is
        then trimmed of the carried changes it does not need. Only configs judged `fits` are
        suggested.
        """
        if self.judge(self.estimate(model, config)).verdict is Verdict.FITS:
            return []
        lengths = sorted(token_lengths) if token_lengths else None
        suggestions: list[Suggestion] = []
        seen: set[TrainingConfig] = set()
        carried = config
        carried_bytes = self.estimate(model, config).total_bytes
        carried_stages: list[tuple[str, ...]] = []  # the fields each carried stage changed
        for stage, fields in _STAGES:
            fitting = None
            best: tuple[TrainingConfig, int] | None = None
            for candidate in stage(model, carried):
                estimate = self.estimate(model, candidate)
                if estimate.problems:
                    continue
                if best is None or estimate.total_bytes < best[1]:
                    best = (candidate, estimate.total_bytes)
                if self.judge(estimate).verdict is Verdict.FITS:
                    fitting = candidate
                    break
            if fitting is not None:
                fitting = self._trim(model, config, fitting, carried_stages)
                if fitting not in seen:
                    seen.add(fitting)
                    suggestions.append(self._suggestion(model, config, fitting, lengths))
                if len(suggestions) >= self.MAX_SUGGESTIONS:
                    break
            elif best is not None and best[1] < carried_bytes * (1 - MIN_CARRIED_SAVING):
                carried, carried_bytes = best
                carried_stages.append(fields)
        return suggestions

    def _fits(self, model: ModelFacts, config: TrainingConfig) -> bool:
        estimate = self.estimate(model, config)
        return not estimate.problems and self.judge(estimate).verdict is Verdict.FITS

    def _trim(self, model: ModelFacts, original: TrainingConfig, candidate: TrainingConfig,
              carried_stages: list[tuple[str, ...]]) -> TrainingConfig:
        """Undo carried changes the candidate fits without, the most disruptive first."""
        for fields in reversed(carried_stages):
            undone = candidate.replace(**{f: getattr(original, f) for f in fields})
            if undone != candidate and self._fits(model, undone):
                candidate = undone
        return candidate

    def _suggestion(self, model: ModelFacts, original: TrainingConfig, config: TrainingConfig,
                    lengths: Sequence[int] | None) -> Suggestion:
        changes = _changes(original, config)
        truncated = None
        if "max_seq_length" in changes and lengths is not None:
            truncated = _rows_longer(lengths, config.max_seq_length)
        estimate = self.estimate(model, config)
        title = _describe(original, config, truncated, len(lengths) if lengths else None)
        return Suggestion(title, changes, config, estimate, self.judge(estimate).verdict,
                          truncated)

    def plan(self, model: ModelFacts, config: TrainingConfig,
             token_lengths: Sequence[int] | None = None) -> Plan:
        if token_lengths and config.longest_row_tokens is None:
            config = config.replace(longest_row_tokens=max(token_lengths))
        assessment = self.assess(model, config)
        suggestions = [] if assessment.estimate.problems else self.suggest(
            model, config, token_lengths)
        return Plan(assessment, suggestions, token_lengths_known=bool(token_lengths))

    # -- measured history ------------------------------------------------------------------------

    def record_measurement(self, model: ModelFacts, estimate: Estimate, measured_peak: int,
                           source: str = "measure", run_id: str | None = None) -> None:
        self.history.append({
            "device": estimate.device, "model": model.path, "method": estimate.config.method.value,
            "settings": estimate.config.settings(), "estimate_bytes": estimate.model_bytes,
            "measured_peak_bytes": int(measured_peak), "source": source, "run_id": run_id,
        })


# A stage must save this share of the estimate to be carried into the next stages.
MIN_CARRIED_SAVING = 0.02


def _halve_batch(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    options = []
    batch, accumulation = config.batch_size, config.grad_accumulation_steps
    while batch > 1:
        batch //= 2
        accumulation *= 2
        options.append(config.replace(batch_size=batch, grad_accumulation_steps=accumulation))
    return options


def _checkpoint(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    return [] if config.grad_checkpoint else [config.replace(grad_checkpoint=True)]


def _shorter(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    current = min(config.max_seq_length, config.batch_width)
    return [config.replace(max_seq_length=cap)
            for cap in (4096, 3072, 2048, 1536, 1024, 768, 512, 384, 256, 128) if cap < current]


def _fewer_layers(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    options = []
    count = trained_layers(model, config)
    while count > 1:
        count //= 2
        options.append(config.replace(num_layers=count))
    return options


def _lower_rank(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    if config.method is Method.FULL:
        return []
    options = []
    rank = config.rank
    while rank > 4:
        rank //= 2
        options.append(config.replace(rank=rank))
    return options


def _lora_instead(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    return [config.replace(method=Method.LORA)] if config.method is Method.FULL else []


def _quantize(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    if model.quantized or config.quantize_base or config.method is Method.FULL:
        return []
    return [config.replace(method=Method.QLORA, quantize_base=(bits, 64)) for bits in (8, 4)]


# The search order of MemoryAdvisor.suggest, least disruptive first, with the fields each
# stage changes.
_STAGES = (
    (_halve_batch, ("batch_size", "grad_accumulation_steps")),
    (_checkpoint, ("grad_checkpoint",)),
    (_shorter, ("max_seq_length",)),
    (_fewer_layers, ("num_layers",)),
    (_lower_rank, ("rank",)),
    (_lora_instead, ("method",)),
    (_quantize, ("method", "quantize_base")),
)


def _describe(before: TrainingConfig, after: TrainingConfig, truncated: int | None,
              rows: int | None) -> str:
    """The changes from `before` to `after` in words, mildest first."""
    parts = []
    if (after.batch_size, after.grad_accumulation_steps) != (
            before.batch_size, before.grad_accumulation_steps):
        same = (after.batch_size * after.grad_accumulation_steps
                == before.batch_size * before.grad_accumulation_steps)
        parts.append(f"batch {after.batch_size} with grad accumulation "
                     f"{after.grad_accumulation_steps}"
                     + (" (same effective batch)" if same else ""))
    if after.grad_checkpoint and not before.grad_checkpoint:
        parts.append("grad checkpointing (slower steps)")
    if after.max_seq_length != before.max_seq_length:
        if truncated is not None:
            cut = f"cuts {truncated} of {rows} rows"
        else:
            cut = "row lengths unknown: give the dataset to count the rows it cuts"
        parts.append(f"max_seq_length {after.max_seq_length} ({cut})")
    if after.num_layers != before.num_layers:
        parts.append(f"train the last {after.num_layers} layers")
    if after.rank != before.rank and after.method is not Method.FULL:
        parts.append(f"LoRA rank {after.rank}")
    if before.method is Method.FULL and after.method is not Method.FULL:
        parts.append("LoRA instead of full fine-tuning")
    if after.quantize_base and not before.quantize_base:
        bits = after.quantize_base[0]
        parts.append(f"QLoRA on a {bits}-bit copy of the model (`mlx_lm convert --hf-path "
                     f"MODEL --mlx-path OUT -q --q-bits {bits}`)")
    return "; ".join(parts)


def _changes(before: TrainingConfig, after: TrainingConfig) -> dict[str, Any]:
    old, new = before.settings(), after.settings()
    return {key: value for key, value in new.items() if old.get(key) != value}


def _rows_longer(sorted_lengths: Sequence[int], cap: int) -> int:
    """Rows with more tokens than `cap` (which training cuts)."""
    import bisect

    return len(sorted_lengths) - bisect.bisect_right(sorted_lengths, cap)


# --- the gate before a run starts ---------------------------------------------------------------


def gate(run: Run, advisor: MemoryAdvisor, *, override: bool = False,
         model: ModelFacts | None = None, longest_row_tokens: int | None = None) -> Assessment:
    """Judge a run before it starts and record the verdict in run.memory.

    A run that won't fit raises UserError (exit status 1) unless `override` is given; the
    override is recorded in the run. The caller saves the run (store.update). Gives the
    dataset's longest tokenized row when known, for an exact estimate.
    """
    model = model or ModelFacts.from_folder(run.model)
    config = TrainingConfig.from_run(run, longest_row_tokens)
    estimate = advisor.estimate(model, config)
    if estimate.problems:
        raise UserError(estimate.problems[0], EXIT_USAGE)
    assessment = advisor.judge(estimate)
    run.memory = {
        "verdict": assessment.verdict.value,
        "reason": assessment.reason,
        "estimate_bytes": estimate.total_bytes,
        "model_estimate_bytes": estimate.model_bytes,
        "breakdown": dict(estimate.breakdown),
        "budget_bytes": assessment.budget.budget_bytes,
        "available_bytes": assessment.budget.available_bytes,
        "device": estimate.device,
        "settings": config.settings(),
        "exact_sequence": longest_row_tokens is not None,
        "override": bool(override and assessment.verdict is Verdict.WONT_FIT),
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if assessment.verdict is Verdict.WONT_FIT and not override:
        raise UserError(
            f"This run won't fit in memory: it {assessment.reason[:-1]}; change its settings "
            "(`zyquo-tui plan` suggests some that fit) or start it with an explicit override.",
            EXIT_PROBLEMS)
    return assessment


# --- measuring the real peak ----------------------------------------------------------------------


@dataclass
class Measurement:
    """The peak MLX memory of a few real training steps of a config."""

    peak_bytes: int
    batch_width: int
    seconds: float
    device: str
    longest_row_tokens: int | None = None


def _subprocess_json(command: list[str], spec: dict[str, Any], timeout: float,
                     cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    returncode, stdout, stderr = run_child(command, input_text=json.dumps(spec),
                                           timeout=timeout, cancelled=cancelled,
                                           timeout_hint="measure a smaller config")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"The measurement failed (exit status {returncode}): {last}",
                        EXIT_PROBLEMS)
    result = json.loads(lines[-1])
    if "error" in result:
        raise UserError(f"The measurement failed: {result['error']}", EXIT_PROBLEMS)
    return result


def measure_peak(model_path: str, config: TrainingConfig, *, data: str | None = None,
                 hyperparameters: Hyperparameters | None = None,
                 extra_config: dict[str, Any] | None = None, steps: int = 3,
                 timeout: float = 3600.0, python: str | None = None,
                 cancelled: Callable[[], bool] | None = None) -> Measurement:
    """Train `steps` real steps of the config in a subprocess (trainer/measure.py).

    With `data`, on the dataset's longest rows (its worst batch); without, on rows of
    batch_width random tokens. `hyperparameters` gives the settings the config does not hold
    (optimizer_config, LoRA scale...). Blocks until done: call it from a worker thread;
    `cancelled()` turning true kills the subprocess (a UserError).
    """
    spec: dict[str, Any] = {
        "model": model_path,
        "method": config.method.value,
        "hyperparameters": config.to_hyperparameters(hyperparameters).to_dict(),
        "steps": steps,
        "extra_config": extra_config or {},
    }
    if data:
        spec["data"] = data
    else:
        spec["synthetic_tokens"] = config.batch_width
    result = _subprocess_json([python or sys.executable, "-m", "zyquo_tui.trainer.measure", "-"],
                              spec, timeout, cancelled)
    device = GPU if "gpu" in str(result.get("device", "")).lower() else CPU
    return Measurement(peak_bytes=int(result["peak_memory_bytes"]),
                       batch_width=int(result["batch_width"]),
                       seconds=float(result.get("seconds", 0.0)), device=device,
                       longest_row_tokens=result.get("longest_row_tokens"))


def dataset_token_lengths(model_path: str, data: str, *, extra_config: dict[str, Any] | None = None,
                          mask_prompt: bool = False, timeout: float = 900.0,
                          python: str | None = None,
                          cancelled: Callable[[], bool] | None = None) -> list[int]:
    """Every train row's token count, tokenized as training will (a subprocess).

    core.token_stats reports summaries (min, median, p95, max); the suggestions need each
    row's length, to count the rows every shorter max_seq_length would cut.
    """
    spec = {"lengths": True, "model": model_path, "data": data, "method": "lora",
            "hyperparameters": {"mask_prompt": mask_prompt, "batch_size": 1},
            "extra_config": extra_config or {}}
    result = _subprocess_json([python or sys.executable, "-m", "zyquo_tui.trainer.measure", "-"],
                              spec, timeout, cancelled)
    return [int(n) for n in result["lengths"]]
