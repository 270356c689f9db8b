"""Tiny GGUF files written as llama.cpp's converter writes them (its `gguf` package's
GGUFWriter), for the import and listing tests: a llama of random weights, in F32 or a quantized
type, with a byte-level BPE vocabulary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize, quantize

# A 2-layer llama, 64 wide: 4 heads of 16, 2 KV heads.
TINY_LLAMA = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "max_position_embeddings": 256}
SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>"]
MERGES = ["t h", "h e"]
# llama.cpp's names for the Hugging Face ones.
GGUF_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm",
              "lm_head": "output", "input_layernorm": "attn_norm",
              "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate",
              "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet (bytes_to_unicode), in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def vocabulary() -> list[str]:
    return byte_tokens() + [m.replace(" ", "") for m in MERGES] + SPECIAL_TOKENS


def permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py `permute`: each head's rotary halves interleaved."""
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def gguf_name(hf_name: str) -> str:
    base, _, suffix = hf_name.rpartition(".")
    if base.startswith("model.layers."):
        _, _, layer, part = base.split(".", 3)
        return f"blk.{layer}.{GGUF_NAMES[part]}.{suffix}"
    return f"{GGUF_NAMES[base]}.{suffix}"


def stored(array: np.ndarray, type_name: str) -> np.ndarray:
    """What a reader dequantizes from `array` stored as `type_name` (F32: itself)."""
    if type_name == "F32" or array.ndim == 1:
        return array
    qtype = GGMLQuantizationType[type_name]
    return dequantize(quantize(array, qtype), qtype).reshape(array.shape)


def write_llama_gguf(path: Path, weights: dict[str, np.ndarray], type_name: str = "F32",
                     config: dict | None = None, architecture: str = "llama",
                     raw: dict[str, np.ndarray] | None = None) -> Path:
    """`weights` (Hugging Face names, float32) as llama.cpp's converter writes a llama: q and
    k rows permuted, matrices in `type_name` (norms stay F32), the hyperparameters and the
    tokenizer in the metadata; `raw` tensors (llama.cpp's names) written as they are, in the
    type their numpy dtype makes."""
    config = {**TINY_LLAMA, **(config or {})}
    tokens = vocabulary()
    writer = GGUFWriter(str(path), architecture)
    arch = architecture
    writer.add_name("tiny test llama")
    writer.add_uint32(f"{arch}.block_count", config["num_hidden_layers"])
    writer.add_uint32(f"{arch}.context_length", config["max_position_embeddings"])
    writer.add_uint32(f"{arch}.embedding_length", config["hidden_size"])
    writer.add_uint32(f"{arch}.feed_forward_length", config["intermediate_size"])
    writer.add_uint32(f"{arch}.attention.head_count", config["num_attention_heads"])
    writer.add_uint32(f"{arch}.attention.head_count_kv", config["num_key_value_heads"])
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    writer.add_float32(f"{arch}.rope.freq_base", config["rope_theta"])
    writer.add_uint32(f"{arch}.vocab_size", len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (len(tokens) - len(SPECIAL_TOKENS))
                           + [3] * len(SPECIAL_TOKENS))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    for name, array in weights.items():
        array = np.ascontiguousarray(array, dtype=np.float32)
        if name.endswith("self_attn.q_proj.weight"):
            array = permute(array, config["num_attention_heads"])
        elif name.endswith("self_attn.k_proj.weight"):
            array = permute(array, config["num_key_value_heads"])
        if type_name == "F32" or array.ndim == 1:
            writer.add_tensor(gguf_name(name), array)
        else:
            qtype = GGMLQuantizationType[type_name]
            writer.add_tensor(gguf_name(name), quantize(array, qtype), raw_dtype=qtype)
    for name, array in (raw or {}).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def random_llama_weights(seed: int = 0, config: dict | None = None) -> dict[str, np.ndarray]:
    """Random float32 weights of a tied-embedding llama, by Hugging Face's names."""
    config = {**TINY_LLAMA, **(config or {})}
    rng = np.random.default_rng(seed)
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    head_dim = hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    vocab = len(vocabulary())

    def matrix(rows: int, columns: int) -> np.ndarray:
        return (rng.standard_normal((rows, columns)) / np.sqrt(columns)).astype(np.float32)

    weights = {"model.embed_tokens.weight": matrix(vocab, hidden),
               "model.norm.weight": (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)}
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        for name, shape in (("self_attn.q_proj", (hidden, hidden)),
                            ("self_attn.k_proj", (kv, hidden)),
                            ("self_attn.v_proj", (kv, hidden)),
                            ("self_attn.o_proj", (hidden, hidden)),
                            ("mlp.gate_proj", (inner, hidden)),
                            ("mlp.up_proj", (inner, hidden)),
                            ("mlp.down_proj", (hidden, inner))):
            weights[f"{prefix}{name}.weight"] = matrix(*shape)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            weights[f"{prefix}{norm}.weight"] = (
                1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
    return weights
