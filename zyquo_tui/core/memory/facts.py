"""Model facts for the memory estimate: exact weight bytes and layer shapes from the
safetensors headers and config.json, without loading a tensor."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.models import (
    mlx_lm_supports,
    mlx_module_for,
    mlx_weight_files,
    quantization_of,
)
from zyquo_tui.core.library.run_checks import ModelTraits
from zyquo_tui.core.library.safetensors_header import (
    SafetensorsHeaderError,
    TensorInfo,
    TensorTable,
    read_headers,
)

MIB = 1024 * 1024
GIB = 1024 * MIB
# mlx-lm pads each batch to one plus a multiple of 32 tokens, then cuts it to max_seq_length
# (trainer/batches.py); the model sees all but the last token of each row.
PAD_TO = 32
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "F32": 4, "F16": 2, "BF16": 2,
               "F64": 8, "float64": 8}

FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
LORA_BYTES = 4  # mlx-lm creates lora_a, lora_b (and DoRA's m) in float32
_FACTS_CACHE: dict[str, tuple[tuple, ModelFacts]] = {}


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

    def traits(self, *, quantized: bool | None = None,
               positions: int | None = None) -> ModelTraits:
        """What a run's checks need of this model (core/library/run_checks.py); `quantized`
        overrides (a base to be quantized first), `positions` come from the model list (the
        memory model does not need them)."""
        return ModelTraits(Path(self.path).name or "the model",
                           self.quantized if quantized is None else quantized, self.num_layers,
                           positions)

    def quantized_weights_bytes(self, bits: int, group_size: int) -> int:
        """The weights after `mlx_lm convert -q --q-bits bits --q-group-size group_size`.

        Each matrix packs bits/8 bytes per weight plus a scale and a bias (compute dtype) per
        group; everything else (norms, biases) is unchanged.
        """
        per_weight = bits / 8 + 2 * self.compute_bytes / group_size
        return int(self.weights_bytes - self.quantizable_bytes
                   + self.quantizable_elements * per_weight)


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
