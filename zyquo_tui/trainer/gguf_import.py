"""Import a GGUF file (llama.cpp's format, as LM Studio and Ollama keep models) as an MLX model.

    python -m zyquo_tui.trainer.gguf_import FILE.gguf OUT_DIR [--dtype DTYPE] [--json]

writes OUT_DIR with model.safetensors, config.json and the tokenizer files, a folder
``mlx_lm.load`` loads and zyquo-tui trains. Q4_0, Q4_1 and Q8_0 weights stay quantized (MLX's
own GGUF reader gives them in MLX's affine layout, group size 32: a QLoRA base as it is); a file
with any other quantized type is dequantized to bfloat16 whole (MLX's reader cannot read those
types, so llama.cpp's own `gguf` package dequantizes them); a file of plain floats keeps its
dtype. The config comes from the file's metadata and the tokenizer from its vocabulary, through
transformers' GGUF tokenizer builder. `zyquo-tui models import` runs it (core/library/
model_import.py); the dtype rule is `mlx_weights`'s.

A file it cannot import raises GGUFImportError with one sentence; the command prints it on
stderr and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path
from dataclasses import dataclass
from typing import Any

from zyquo_tui.core.library.gguf_files import GGUFHeaderError, read_gguf_summary
from zyquo_tui.core.system.entry_points import GGUF_IMPORTER, usage

# The architectures this importer knows, as general.architecture names them, with the
# mlx-lm model_type they become and whether llama.cpp's converter permuted q and k for
# interleaved rope (it does for llama; mlx-lm's llama rotates halves, as Hugging Face does).
# The listing (core/library/gguf_files.py) offers exactly these (a test checks).
ARCHITECTURES = {
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "permute_qk": True},
}

# Types MLX's GGUF reader keeps quantized; anything else in the file (K-quants, IQ types)
# needs the whole file dequantized.
KEPT_QUANTIZED = {"Q4_0", "Q4_1", "Q8_0"}
PLAIN_FLOATS = {"F32", "F16", "BF16"}
GROUP_SIZE = 32
DTYPE_CHOICES = ("auto", "float32", "float16", "bfloat16")

# llama.cpp tensor names -> Hugging Face / mlx-lm names.
GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# Llama 3's rope scaling, stored by llama.cpp as a per-frequency factor tensor rather than as
# parameters: these are the published settings the factors are matched against.
LLAMA3_ROPE_CANDIDATES = [
    {"factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    for factor in (8.0, 16.0, 32.0)
]


class GGUFImportError(Exception):
    """A GGUF file this importer cannot turn into an MLX model; the message is one sentence."""


@dataclass
class GGUFTensor:
    name: str
    type_name: str  # GGML's type name: F16, Q4_1, Q6_K...


@dataclass
class GGUFHeader:
    """What a GGUF file says of itself: architecture, metadata (plain Python values), tensors."""

    path: Path
    architecture: str
    metadata: dict[str, Any]
    tensors: list[GGUFTensor]

    @property
    def vocab_size(self) -> int:
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        declared = self.metadata.get(f"{self.architecture}.vocab_size")
        return int(declared) if declared is not None else len(tokens or ())


def read_gguf_header(path: Path) -> GGUFHeader:
    """The file's header through llama.cpp's `gguf` reader, or GGUFImportError in one sentence.

    The architecture is checked from the file's first bytes before the reader parses the rest
    (a vocabulary of 150,000 tokens takes seconds), so a file of another kind fails at once.
    """
    from gguf import GGUFReader

    try:
        summary = read_gguf_summary(path)
    except GGUFHeaderError as error:
        raise GGUFImportError(str(error)) from None
    if summary.architecture is None:
        raise GGUFImportError(f"{path}: the header names no architecture "
                              "(general.architecture); it is not a model file.")
    if summary.architecture not in ARCHITECTURES:
        raise GGUFImportError(
            f"{path}: architecture {summary.architecture!r} cannot be imported yet (this "
            f"importer knows {', '.join(sorted(ARCHITECTURES))}); convert the original model "
            "with `mlx_lm convert`.")
    size = path.stat().st_size
    try:
        reader = GGUFReader(str(path))
    except (ValueError, IndexError, KeyError, OverflowError, EOFError):
        raise GGUFImportError(
            f"{path} is truncated or damaged ({size:,} bytes, and its header describes more "
            "than they hold); download it again.") from None
    # numpy's memmap gives a slice past the end as a short array: a file cut inside its
    # tensor data can read without error, so its end is checked against the last tensor's.
    end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    if end > size:
        raise GGUFImportError(
            f"{path} is truncated ({size:,} bytes; its tensors end at byte {end:,}); "
            "download it again.")
    metadata = {name: field.contents() for name, field in reader.fields.items()
                if not name.startswith("GGUF.")}
    tensors = [GGUFTensor(t.name, t.tensor_type.name) for t in reader.tensors]
    return GGUFHeader(path, summary.architecture, metadata, tensors)


def hf_name(gguf_name: str) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`."""
    base, _, suffix = gguf_name.rpartition(".")
    if base.startswith("blk."):
        _, layer, part = base.split(".", 2)
        if part in LAYER_NAMES:
            return f"model.layers.{layer}.{LAYER_NAMES[part]}.{suffix}"
    elif base in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[base]}.{suffix}"
    raise KeyError(gguf_name)


def unpermute_rows(array, heads: int):
    """Undo llama.cpp's q/k row permutation (its convert script's `permute`) for `heads` heads.

    llama.cpp interleaves each head's two rotary halves so its rope can rotate adjacent pairs;
    this puts the rows back in Hugging Face's order. Quantization groups run along a row, so the
    same reordering applies to packed weights, scales and biases alike.
    """
    rows = array.shape[0]
    half = rows // heads // 2
    return (array.reshape(heads, half, 2, *array.shape[1:])
            .swapaxes(1, 2).reshape(array.shape))


def model_config(header, tensor_names: set[str]) -> dict[str, Any]:
    """config.json for mlx-lm, from the metadata (the keys llama.cpp writes for its arch)."""
    arch = header.architecture
    meta = header.metadata

    def key(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    for required in ("attention.head_count", "embedding_length", "block_count",
                     "feed_forward_length"):
        if key(required) is None:
            raise GGUFImportError(f"{header.path}: the header lacks {arch}.{required}, which a "
                                  f"{arch} model needs; the file is incomplete.")
    heads = int(key("attention.head_count"))
    hidden = int(key("embedding_length"))
    head_dim = key("attention.key_length")
    vocab = header.vocab_size
    config: dict[str, Any] = {
        "model_type": ARCHITECTURES[arch]["model_type"],
        "architectures": ARCHITECTURES[arch]["architectures"],
        "hidden_size": hidden,
        "num_hidden_layers": int(key("block_count")),
        "intermediate_size": int(key("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)),
        "head_dim": int(head_dim) if head_dim is not None else hidden // heads,
        # Stored as float32 (9.9999997e-06); written as the decimal it was meant to be.
        "rms_norm_eps": float(f"{float(key('attention.layer_norm_rms_epsilon', 1e-5)):.6g}"),
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "vocab_size": vocab,
        "max_position_embeddings": int(key("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "attention_bias": "blk.0.attn_q.bias" in tensor_names,
        "mlp_bias": "blk.0.ffn_up.bias" in tensor_names,
    }
    scaling = key("rope.scaling.type")
    if scaling == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": float(key("rope.scaling.factor"))}
    elif scaling not in (None, "none"):
        raise GGUFImportError(
            f"{header.path}: rope scaling {scaling!r} is not supported by this importer "
            "(linear, and Llama 3's frequency factors, are); convert the original model with "
            "`mlx_lm convert` instead.")
    for token in ("bos", "eos"):
        token_id = meta.get(f"tokenizer.ggml.{token}_token_id")
        if token_id is not None:
            config[f"{token}_token_id"] = int(token_id)
    return config


def llama3_rope_scaling(factors, config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The rope_scaling whose frequencies match llama.cpp's `rope_freqs` factors, or an error."""
    import numpy as np

    dims = config["head_dim"]
    base = config["rope_theta"]
    wavelens = 2 * math.pi * base ** (np.arange(0, dims, 2) / dims)
    for candidate in LLAMA3_ROPE_CANDIDATES:
        for original in (8192, config["max_position_embeddings"]):
            low = original / candidate["low_freq_factor"]
            high = original / candidate["high_freq_factor"]
            smooth = ((original / wavelens - candidate["low_freq_factor"])
                      / (candidate["high_freq_factor"] - candidate["low_freq_factor"]))
            expected = np.where(wavelens > low, candidate["factor"], 1.0)
            medium = (wavelens > high) & (wavelens < low)
            expected = np.where(medium, 1 / ((1 - smooth) / candidate["factor"] + smooth),
                                expected)
            if np.allclose(expected, factors, rtol=1e-3):
                return {"rope_type": "llama3", **candidate,
                        "original_max_position_embeddings": original}
    raise GGUFImportError(
        f"{path}: its rope frequency factors match none of Llama 3's "
        "published settings; convert the original model with `mlx_lm convert` instead.")


def read_weights(header, dequantize: bool = False) -> tuple[dict, dict[str, Any] | None]:
    """The file's tensors as MLX arrays under llama.cpp's names, and the quantization they keep.

    Returns (weights, quantization): quantization is None when every weight is a plain float
    (the file had no quantized tensor, had types MLX cannot keep, or `dequantize` was asked:
    a float model, for LoRA or full fine-tuning rather than QLoRA).
    """
    import mlx.core as mx

    types = {tensor.type_name for tensor in header.tensors}
    if not dequantize and types <= PLAIN_FLOATS | KEPT_QUANTIZED:
        try:
            weights = mx.load(str(header.path))
        except (RuntimeError, ValueError) as error:
            raise GGUFImportError(f"{header.path}: MLX cannot read its tensors ({error}); "
                                  "download it again.") from None
        quantized = {t.name for t in header.tensors if t.type_name in KEPT_QUANTIZED}
        if not quantized:
            return weights, None
        bits_of = {t.name: 8 if t.type_name == "Q8_0" else 4 for t in header.tensors
                   if t.type_name in KEPT_QUANTIZED}
        return weights, {"bits": bits_of, "group_size": GROUP_SIZE}
    return dequantized_weights(header), None


def dequantized_weights(header) -> dict:
    """Every tensor dequantized to bfloat16 by llama.cpp's `gguf` package (norms stay float32)."""
    import mlx.core as mx
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(header.path))
    weights = {}
    for tensor in reader.tensors:
        try:
            values = dequantize(tensor.data, tensor.tensor_type)
        except NotImplementedError:
            # Integer and some newer block types: llama.cpp's reader has no dequantizer for
            # them, so no weight this importer could write.
            raise GGUFImportError(
                f"{header.path}: tensor {tensor.name!r} is stored as "
                f"{tensor.tensor_type.name}, which cannot be dequantized here; convert the "
                "original model with `mlx_lm convert` instead.") from None
        shape = tuple(int(n) for n in reversed(tensor.shape))
        array = mx.array(np.ascontiguousarray(values, dtype=np.float32).reshape(shape))
        weights[tensor.name] = array if array.ndim == 1 else array.astype(mx.bfloat16)
    return weights


def mlx_weights(header, config: dict[str, Any], dtype=None,
                dequantize: bool = False) -> tuple[dict, dict[str, Any] | None]:
    """The weights under mlx-lm's names, q and k rows back in order; and config's quantization.

    Every float tensor (norms, a quantized weight's scales and biases, unquantized weights) is
    cast to `dtype`, the dtype the model computes in. Unset: a quantized file's model computes
    in float16 on Apple silicon's GPU and float32 on the CPU (on the CPU, mlx 0.32 trains
    float32 scales several times faster than half-precision ones, and float32 reproduces the
    float32 reference's greedy answers, where float16 can flip a near tie); a dequantized
    file's in bfloat16; a file of plain floats keeps the dtype most of its bytes are in.
    Up-casting the file's float16 scales loses nothing.
    """
    import mlx.core as mx
    import numpy as np

    raw, quantization = read_weights(header, dequantize)
    arch = ARCHITECTURES[header.architecture]
    weights: dict[str, Any] = {}
    for name, array in raw.items():
        if name.startswith("rope_freqs."):
            config["rope_scaling"] = llama3_rope_scaling(
                np.array(array.astype(mx.float32)), config, header.path)
            continue
        try:
            target = hf_name(name)
        except KeyError:
            raise GGUFImportError(
                f"{header.path}: tensor {name!r} has no place in a {header.architecture} "
                "model this importer knows; convert the original model with `mlx_lm convert` "
                "instead.") from None
        if arch["permute_qk"] and (".attn_q." in name or ".attn_k." in name):
            heads = (config["num_attention_heads"] if ".attn_q." in name
                     else config["num_key_value_heads"])
            array = unpermute_rows(array, heads)
        weights[target] = array
    if dtype is None and quantization is not None:
        dtype = mx.float16 if mx.default_device() == mx.gpu else mx.float32
    elif dtype is None:
        dtype = _main_float_dtype(weights.values())
    for target, array in weights.items():
        if array.dtype in (mx.float32, mx.float16, mx.bfloat16) and array.dtype != dtype:
            weights[target] = array.astype(dtype)
    config["torch_dtype"] = str(dtype).rpartition(".")[2]  # mlx.core.float16 -> float16
    if quantization is None:
        return weights, None
    return weights, quantization_config(quantization, config)


def _main_float_dtype(arrays) -> Any:
    """The float dtype most of the matrices' bytes are in (bfloat16 for dequantized files)."""
    import mlx.core as mx

    sizes: dict[Any, int] = {}
    for array in arrays:
        if array.ndim > 1:
            sizes[array.dtype] = sizes.get(array.dtype, 0) + array.nbytes
    return max(sizes, key=sizes.get, default=mx.float32)


def quantization_config(found: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """mlx-lm's `quantization` entry: the most common bits, and per-layer entries for others."""
    bits_of = {hf_name(name).rpartition(".")[0]: bits for name, bits in found["bits"].items()}
    counts: dict[int, int] = {}
    for bits in bits_of.values():
        counts[bits] = counts.get(bits, 0) + 1
    main_bits = max(counts, key=counts.get)
    entry: dict[str, Any] = {"group_size": GROUP_SIZE, "bits": main_bits, "mode": "affine"}
    for layer, bits in sorted(bits_of.items()):
        if bits != main_bits:
            entry[layer] = {"group_size": GROUP_SIZE, "bits": bits}
    return entry


def write_tokenizer(header, out: Path) -> None:
    """tokenizer.json and tokenizer_config.json (with the chat template) from the metadata."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )

    meta = header.metadata
    tokenizer_dict = {name: meta[f"tokenizer.{key}"]
                      for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
                      if f"tokenizer.{key}" in meta}
    if "tokens" not in tokenizer_dict:
        raise GGUFImportError(f"{header.path}: the file holds no tokenizer vocabulary "
                              "(tokenizer.ggml.tokens); it cannot be trained as it is.")
    backend, _ = convert_gguf_tokenizer(header.architecture, tokenizer_dict)
    tokens = tokenizer_dict["tokens"]
    special = {}
    for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"),
                      ("pad_token", "padding")):
        token_id = meta.get(f"tokenizer.ggml.{key}_token_id")
        if token_id is not None and 0 <= int(token_id) < len(tokens):
            special[name] = tokens[int(token_id)]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **special)
    template = meta.get("tokenizer.chat_template")
    if template:
        tokenizer.chat_template = template
    tokenizer.save_pretrained(str(out))


def import_gguf(path: Path, out: Path, dtype: str = "auto",
                dequantize: bool = False) -> dict[str, Any]:
    """Write the MLX model folder `out` from the GGUF file `path`; a summary of what it made."""
    import mlx.core as mx

    header = read_gguf_header(path)
    names = {tensor.name for tensor in header.tensors}
    config = model_config(header, names)
    weights, quantization = mlx_weights(
        header, config, None if dtype == "auto" else getattr(mx, dtype), dequantize)
    if quantization is not None:
        config["quantization"] = quantization
        config["quantization_config"] = quantization
    out.parent.mkdir(parents=True, exist_ok=True)
    # Built beside its destination and renamed into place: a folder that exists is whole.
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        mx.save_safetensors(str(staging / "model.safetensors"), weights,
                            metadata={"format": "mlx"})
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        write_tokenizer(header, staging)
        (staging / "gguf_source.json").write_text(json.dumps(
            {"file": str(path), "size": path.stat().st_size,
             "types": sorted({t.type_name for t in header.tensors})}, indent=2) + "\n")
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"path": str(out), "architecture": header.architecture,
            "quantization": quantization, "dtype": config["torch_dtype"],
            "layers": config["num_hidden_layers"], "vocab_size": config["vocab_size"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=usage(GGUF_IMPORTER),
                                     description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto")
    parser.add_argument("--dequantize", action="store_true",
                        help="a float model (for lora or full) even from Q4_0/Q4_1/Q8_0")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"{args.out} already exists; choose another name or delete it first.",
              file=sys.stderr)
        return 2
    try:
        summary = import_gguf(args.file, args.out, args.dtype, args.dequantize)
    except GGUFImportError as error:
        print(str(error), file=sys.stderr)
        return 2
    print(json.dumps(summary) if args.json else f"imported {args.file} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
