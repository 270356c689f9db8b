"""Build tiny, deterministic, random-initialised models offline, for the sample and for tests.

    python -m zyquo_tui.trainer.sample_model OUT_MODELS_DIR [--json]

writes OUT_MODELS_DIR/zyquo-tiny (a float llama model), OUT_MODELS_DIR/zyquo-tiny-4bit (its
4-bit affine-quantized copy, for QLoRA) and OUT_MODELS_DIR/zyquo-tiny-teacher (a wider, deeper
model with the same tokenizer, trained on the sample completions: a teacher for distillation
runs), all loadable with ``mlx_lm.load``. Nothing is downloaded: the byte-level BPE tokenizer is
trained on the text of the sample datasets and the weights come from mlx-lm's own llama
classes with a fixed seed (the teacher's training draws its batches from a fixed seed too).
Same inputs, same bytes on one machine.

Other shapes (for memory calibration) come from :func:`build_model`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from zyquo_tui.core.system.entry_points import SAMPLE_BUILDER, usage
from zyquo_tui.resources import sample_data_dir

TINY = "zyquo-tiny"
TINY_4BIT = "zyquo-tiny-4bit"
TEACHER = "zyquo-tiny-teacher"
# Twice as wide and deep as zyquo-tiny, so it learns the sample facts better than the student
# it teaches (the same tokenizer, which distillation needs).
TEACHER_SHAPE = {"hidden_size": 128, "intermediate_size": 256, "num_layers": 4}
# Full fine-tuning steps on the sample completions (a few seconds on two CPU cores).
TEACHER_STEPS = 80
TEACHER_BATCH = 8
TEACHER_LEARNING_RATE = 3e-3

# float32. On CPU (mlx 0.32.4) a bfloat16 tiny model trains as fast and its loss falls the same,
# but LoRA on a 4-bit copy with bfloat16 scales ran about 6x slower than with float32 scales.
DEFAULT_DTYPE = "float32"
DEFAULT_TOKENIZER_VOCAB = 512
DTYPES = ("float32", "bfloat16", "float16")

PAD = "<|pad|>"
BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Their ids are their positions: pad 0, bos 1, eos 2, im_start 3, im_end 4.
SPECIAL_TOKENS = [PAD, BOS, EOS, IM_START, IM_END]

# ChatML with a leading bos. The prompt of a conversation renders as an exact prefix of the
# whole conversation (each turn ends with "<|im_end|>\n"; the generation prompt is the opening
# of an assistant turn), which is what mlx-lm's mask_prompt relies on.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}"
    "{{- message['content'] }}"
    "{%- else %}"
    "{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_DATA_FORMATS = ("completions", "chat", "text", "preference")
_SPLITS = ("train", "valid", "test")


class SampleModelError(Exception):
    """A problem worth one sentence to the user (bad folder, missing sample data, bad shape)."""


# --------------------------------------------------------------------------------------------
# Tokenizer


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key in sorted(value):
            if key != "role":
                yield from _strings(value[key])
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def sample_corpus(sample_dir: Path | None = None) -> list[str]:
    """Every string of every sample dataset row, in a fixed order."""
    sample_dir = Path(sample_dir) if sample_dir is not None else sample_data_dir()
    texts: list[str] = []
    for fmt in _DATA_FORMATS:
        for split in _SPLITS:
            path = sample_dir / fmt / f"{split}.jsonl"
            if not path.is_file():
                raise SampleModelError(f"The sample dataset file {path} is missing.")
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    texts.extend(_strings(json.loads(line)))
    # The role names and the turn markup are what the chat template adds around the content.
    texts.extend(["system\n", "user\n", "assistant\n"])
    return texts


def build_tokenizer(
    out_dir: str | os.PathLike,
    *,
    vocab_size: int = DEFAULT_TOKENIZER_VOCAB,
    sample_dir: str | os.PathLike | None = None,
) -> Path:
    """Train a byte-level BPE tokenizer on the sample data; write tokenizer.json and
    tokenizer_config.json into out_dir (created if needed). Returns out_dir."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus = sample_corpus(Path(sample_dir) if sample_dir is not None else None)

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    bos_id = tokenizer.token_to_id(BOS)
    # Plain encode (mlx-lm's text datasets) starts with bos, like the chat template does.
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A",
                pair=f"{BOS} $A {BOS} $B",
                special_tokens=[(BOS, bos_id)],
            ),
        ]
    )
    tokenizer.save(str(out / "tokenizer.json"), pretty=True)

    config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": BOS,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "model_max_length": 2048,
        "pad_token": PAD,
        "padding_side": "right",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {
            str(tokenizer.token_to_id(tok)): {
                "content": tok,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for tok in SPECIAL_TOKENS
        },
    }
    _write_json(out / "tokenizer_config.json", config)
    return out


def _tokenizer_info(tokenizer_dir: Path) -> dict[str, int]:
    data = json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = dict(data["model"]["vocab"])
    for added in data.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))

    def token_id(key: str) -> int | None:
        tok = config.get(key)
        if isinstance(tok, dict):
            tok = tok.get("content")
        return vocab.get(tok) if tok is not None else None

    return {
        "size": max(vocab.values()) + 1,
        "bos": token_id("bos_token"),
        "eos": token_id("eos_token"),
        "pad": token_id("pad_token"),
        "im_end": vocab.get(IM_END),
    }


# --------------------------------------------------------------------------------------------
# Model


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                    encoding="utf-8")


def _replace_dir(tmp: Path, final: Path) -> None:
    """Put tmp at final, replacing whatever folder was there, without a half-written moment."""
    if final.exists() and not final.is_dir():
        raise SampleModelError(f"{final} exists and is not a folder.")
    old = None
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
        os.replace(final, old / final.name)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def build_model(
    out_dir: str | os.PathLike,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int | None = None,
    quantize_bits: int | None = None,
    group_size: int = 64,
    dtype: str = DEFAULT_DTYPE,
    seed: int = 0,
    tokenizer_dir: str | os.PathLike | None = None,
    tie_word_embeddings: bool = True,
) -> Path:
    """Write a random-initialised llama model (mlx-lm layout) into out_dir and return it.

    out_dir is replaced as a whole (built beside it, then renamed). The tokenizer is copied from
    tokenizer_dir, or trained on the sample data when None. vocab_size defaults to the
    tokenizer's size; a larger one pads the embedding (ids past the tokenizer are never produced
    by it). quantize_bits (2, 3, 4, 5, 6 or 8) quantizes every Linear and the embedding whose
    input width group_size divides, and records it in config.json as mlx-lm does.
    tie_word_embeddings False gives the model its own output matrix (lm_head), as Llama 3 8B
    and most larger models have; tied, the embedding doubles as the output matrix.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama
    from mlx_lm.utils import quantize_model

    out = Path(out_dir)
    if dtype not in DTYPES:
        raise SampleModelError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}.")
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise SampleModelError(
            "hidden_size must divide by num_heads, and num_heads by num_kv_heads.")
    if quantize_bits is not None:
        if quantize_bits not in (2, 3, 4, 5, 6, 8):
            raise SampleModelError(f"quantize_bits must be 2, 3, 4, 5, 6 or 8, not {quantize_bits}.")
        if group_size not in (32, 64, 128) or hidden_size % group_size:
            raise SampleModelError(
                f"group_size must be 32, 64 or 128 and divide hidden_size {hidden_size}.")

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the model folder is an ordinary one
        if tokenizer_dir is None:
            build_tokenizer(tmp)
        else:
            for name in TOKENIZER_FILES:
                shutil.copyfile(Path(tokenizer_dir) / name, tmp / name)
        tok = _tokenizer_info(tmp)
        if vocab_size is None:
            vocab_size = tok["size"]
        elif vocab_size < tok["size"]:
            raise SampleModelError(
                f"vocab_size {vocab_size} is smaller than the tokenizer's {tok['size']} tokens.")

        config: dict[str, Any] = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": hidden_size,
            "num_hidden_layers": num_layers,
            "num_attention_heads": num_heads,
            "num_key_value_heads": num_kv_heads,
            "head_dim": hidden_size // num_heads,
            "intermediate_size": intermediate_size,
            "vocab_size": vocab_size,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "rope_traditional": False,
            "max_position_embeddings": 2048,
            "tie_word_embeddings": tie_word_embeddings,
            "attention_bias": False,
            "mlp_bias": False,
            "hidden_act": "silu",
            "torch_dtype": dtype,
            "bos_token_id": tok["bos"],
            "eos_token_id": [t for t in (tok["eos"], tok["im_end"]) if t is not None],
            "pad_token_id": tok["pad"],
        }
        args = llama.ModelArgs.from_dict(config)
        mx.random.seed(seed)
        model = llama.Model(args)
        model.set_dtype(getattr(mx, dtype))
        mx.eval(model.parameters())
        if quantize_bits is not None:
            # quantize_model prints a line to stdout; keep stdout for our own output.
            with contextlib.redirect_stdout(io.StringIO()):
                model, config = quantize_model(model, config, group_size, quantize_bits)
            config["quantization_config"] = config["quantization"]
        weights = dict(sorted(tree_flatten(model.parameters())))
        mx.eval(weights)
        mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
        _write_json(tmp / "config.json", config)
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def train_on_sample(model_dir: Path, steps: int = TEACHER_STEPS, seed: int = 0) -> None:
    """Fully fine-tune the model in `model_dir` on the sample completions (the responses, the
    prompts masked, as SFT with mask_prompt trains them) and write its weights back."""
    from functools import partial

    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    import numpy as np
    from mlx.utils import tree_flatten
    from mlx_lm import load

    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.encoding import encode_row

    model, tokenizer = load(str(model_dir))
    path = sample_data_dir() / "completions" / "train.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    encoded = [encode_row(tokenizer, row["prompt"], row["completion"], False) for row in rows]
    # Every batch as wide as the longest row: one compiled shape, no padding to multiples.
    width = max(len(tokens) for tokens, _ in encoded)
    tokens = np.zeros((len(encoded), width), np.int32)
    for i, (row, _offset) in enumerate(encoded):
        tokens[i, :len(row)] = row
    spans = np.array([(offset, len(row)) for row, offset in encoded], np.int32)
    mx.random.seed(seed)
    order = np.random.default_rng(seed)
    optimizer = optim.Adam(learning_rate=TEACHER_LEARNING_RATE)
    loss_and_grad = nn.value_and_grad(model, lambda m, t, n: losses.sft_objective(m, t, n)[0])
    state = [model.state, optimizer.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(batch, lengths):
        loss, grads = loss_and_grad(model, batch, lengths)
        optimizer.update(model, grads)
        return loss

    model.train()
    for _ in range(steps):
        picked = order.choice(len(encoded), TEACHER_BATCH, replace=False)
        mx.eval(state, step(mx.array(tokens[picked]), mx.array(spans[picked])))
    weights = dict(sorted(tree_flatten(model.parameters())))
    staged = model_dir / ".model.safetensors.tmp.safetensors"
    mx.save_safetensors(str(staged), weights, metadata={"format": "mlx"})
    os.replace(staged, model_dir / "model.safetensors")


def build_teacher(models_dir: str | os.PathLike, tokenizer_dir: str | os.PathLike) -> Path:
    """zyquo-tiny-teacher in models_dir, with the tokenizer of `tokenizer_dir`: built and
    trained beside its final place, then renamed, so a folder of that name always holds a
    trained teacher."""
    models = Path(models_dir)
    staged = build_model(models / f".{TEACHER}.building", tokenizer_dir=tokenizer_dir, seed=1,
                         **TEACHER_SHAPE)
    train_on_sample(staged)
    teacher = models / TEACHER
    if teacher.exists():
        shutil.rmtree(teacher)
    staged.rename(teacher)
    return teacher


def build_sample_models(models_dir: str | os.PathLike, teacher: bool = True
                        ) -> dict[str, Path]:
    """Build zyquo-tiny, zyquo-tiny-4bit and (unless `teacher` is False) zyquo-tiny-teacher
    into models_dir; return {name: path}."""
    models = Path(models_dir)
    models.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".zyquo-tokenizer-", dir=models) as tok_dir:
        build_tokenizer(tok_dir)
        made = {TINY: build_model(models / TINY, tokenizer_dir=tok_dir),
                TINY_4BIT: build_model(models / TINY_4BIT, tokenizer_dir=tok_dir,
                                       quantize_bits=4, group_size=64)}
        if teacher:
            made[TEACHER] = build_teacher(models, tok_dir)
    return made


# --------------------------------------------------------------------------------------------
# Command line


def _check_models_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise SampleModelError(f"{path} is not a folder.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise SampleModelError(
            f"Cannot write to {path}: {exc.strerror or exc}.") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=usage(SAMPLE_BUILDER),
        description="Build the tiny sample models (zyquo-tiny, zyquo-tiny-4bit and the "
                    "distillation teacher zyquo-tiny-teacher) offline.",
    )
    parser.add_argument("models_dir", help="folder to write the model folders into")
    parser.add_argument("--json", action="store_true", help="print the paths as one JSON object")
    parser.add_argument("--no-teacher", action="store_true",
                        help="leave out zyquo-tiny-teacher (its training takes the most time)")
    args = parser.parse_args(argv)

    models_dir = Path(args.models_dir).expanduser().absolute()
    try:
        _check_models_dir(models_dir)
        sample_data_dir()  # resolved now so a missing folder reports before any work
        paths = build_sample_models(models_dir, teacher=not args.no_teacher)
    except SampleModelError as exc:
        print(f"sample_model: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        print(f"sample_model: cannot write{where}: {exc.strerror or exc}.", file=sys.stderr)
        return 2

    if args.json:
        print(json.dumps({
            "models": {name: str(path) for name, path in paths.items()},
            "sample_data": str(sample_data_dir()),
        }))
    else:
        for path in paths.values():
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
