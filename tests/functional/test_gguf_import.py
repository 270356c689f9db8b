"""`zyquo-tui models import`: tiny GGUF files written as llama.cpp writes them (F32, Q8_0 and
Q4_0 kept quantized, Q5_0 dequantized) import as models mlx-lm loads and that compute what
their source computes; bad files get one sentence, exit status 2, and leave nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import zyquo_cli
from gguf_writing import (
    TINY_LLAMA,
    permute,
    random_llama_weights,
    stored,
    vocabulary,
    write_llama_gguf,
)

from zyquo_tui.core.library.gguf_files import IMPORTABLE_ARCHITECTURES
from zyquo_tui.core.library.models import READY, discover_models
from zyquo_tui.trainer.gguf_import import ARCHITECTURES, unpermute_rows

TOKENS = [5, 72, 101, 256, 257, 40, 33, 99, 258, 12, 200, 150]


def source_logits(weights: dict[str, np.ndarray], type_name: str) -> np.ndarray:
    """The logits of mlx-lm's own llama holding the weights as the file stores them."""
    import mlx.core as mx
    from mlx_lm.models.llama import Model, ModelArgs

    args = ModelArgs(model_type="llama", vocab_size=len(vocabulary()),
                     tie_word_embeddings=True, **TINY_LLAMA)
    model = Model(args)
    model.load_weights([(name, mx.array(stored(array, type_name)))
                        for name, array in weights.items()])
    return np.array(model(mx.array([TOKENS])).astype(mx.float32))


def imported_logits(folder: Path) -> np.ndarray:
    import mlx.core as mx
    from mlx_lm import load

    model, _ = load(str(folder))
    return np.array(model(mx.array([TOKENS])).astype(mx.float32))


@pytest.mark.parametrize(("type_name", "bits", "dtype", "tolerance"), [
    ("F32", None, "float32", 1e-4),
    ("Q8_0", 8, "float32", 1e-4),
    ("Q4_0", 4, "float32", 1e-4),
    # Q5_0 is not a type MLX keeps: dequantized, then computed in bfloat16 (2-3 digits).
    ("Q5_0", None, "bfloat16", 0.1),
])
def test_an_import_computes_what_its_source_computes(type_name, bits, dtype, tolerance,
                                                     tmp_path, isolated_home):
    weights = random_llama_weights(seed=3)
    gguf = write_llama_gguf(tmp_path / f"Tiny-Llama.{type_name}.gguf", weights, type_name)
    done = zyquo_cli("models", "import", str(gguf), "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    folder = isolated_home / "models" / f"tiny-llama-{type_name.lower()}"
    assert (made["name"], made["path"], made["dtype"]) == (folder.name, str(folder), dtype)
    config = json.loads((folder / "config.json").read_text())
    assert config.get("quantization", {}).get("bits") == bits
    assert config["torch_dtype"] == dtype
    # Against the same weights as the file stores them (quantized and back): a q or k row
    # left permuted, a wrong scale or a misread config would be off by far more.
    expected = source_logits(weights, type_name)
    got = imported_logits(folder)
    assert np.abs(got - expected).max() <= tolerance * np.abs(expected).max()
    # And the quantization costs what it should against the float source (4 bits: about a
    # quarter of a random tiny model's logits, on average).
    assert np.abs(got - source_logits(weights, "F32")).mean() < 0.5 * np.abs(expected).mean()
    (model,) = [m for m in discover_models() if m.name == folder.name]
    assert model.status == READY and model.chat_template


def test_an_import_unpermutes_llama_cpps_q_and_k_rows():
    rows = np.arange(4 * 16 * 3).reshape(4 * 16, 3)
    assert np.array_equal(unpermute_rows(permute(rows, 4), 4), rows)
    assert not np.array_equal(permute(rows, 4), rows)


def test_the_listing_offers_the_architectures_the_importer_knows():
    assert set(IMPORTABLE_ARCHITECTURES) == set(ARCHITECTURES)


def test_the_imported_tokenizer_and_chat_template_come_from_the_file(tmp_path, isolated_home):
    from transformers import AutoTokenizer

    gguf = write_llama_gguf(tmp_path / "tiny.gguf", random_llama_weights(), "Q8_0")
    assert zyquo_cli("models", "import", str(gguf), "--name", "tok").returncode == 0
    tokenizer = AutoTokenizer.from_pretrained(str(isolated_home / "models" / "tok"))
    # "the" is t h e: the merge "t h" comes first, so th + e (vocabulary order: 256, 257).
    assert tokenizer.encode("the", add_special_tokens=False) == [256, ord("e")]
    assert tokenizer.eos_token == "<|im_end|>"
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def bad_mamba(path: Path) -> Path:
    return write_llama_gguf(path, random_llama_weights(), "F32", architecture="mamba")


def bad_truncated(path: Path) -> Path:
    whole = write_llama_gguf(path.with_name("whole.gguf"), random_llama_weights(), "F32")
    data = whole.read_bytes()
    path.write_bytes(data[: len(data) - 4096])
    return path


def bad_integer_tensor(path: Path) -> Path:
    weights = random_llama_weights()
    norm = weights.pop("model.layers.0.input_layernorm.weight")
    return write_llama_gguf(path, weights, "F32",
                            raw={"blk.0.attn_norm.weight": norm.astype(np.int8)})


def bad_text(path: Path) -> Path:
    path.write_text("This is not a model; it is a note named .gguf.\n")
    return path


@pytest.mark.parametrize(("make", "sentence"), [
    (bad_mamba, "architecture 'mamba' cannot be imported yet"),
    (bad_truncated, "is truncated"),
    (bad_text, "is not a GGUF file"),
    (bad_integer_tensor, "tensor 'blk.0.attn_norm.weight' is stored as I8"),
])
def test_a_bad_file_gets_one_sentence_and_exit_2_and_leaves_nothing(make, sentence, tmp_path,
                                                                     isolated_home):
    gguf = make(tmp_path / "bad.gguf")
    done = zyquo_cli("models", "import", str(gguf))
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"zyquo-tui: {gguf}") and sentence in line, line
    models = isolated_home / "models"
    assert not models.exists() or list(models.iterdir()) == []


def test_an_existing_name_is_refused_and_the_model_kept(tmp_path, isolated_home):
    gguf = write_llama_gguf(tmp_path / "tiny.gguf", random_llama_weights(), "Q8_0")
    assert zyquo_cli("models", "import", str(gguf), "--name", "mine").returncode == 0
    before = (isolated_home / "models" / "mine" / "model.safetensors").read_bytes()
    done = zyquo_cli("models", "import", str(gguf), "--name", "mine")
    assert done.returncode == 2
    assert "A model named 'mine' exists already" in done.stderr
    assert (isolated_home / "models" / "mine" / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in (isolated_home / "models").iterdir()) == ["mine"]


def test_a_name_that_is_not_a_folder_name_is_refused(tmp_path, isolated_home):
    gguf = write_llama_gguf(tmp_path / "tiny.gguf", random_llama_weights(), "Q8_0")
    done = zyquo_cli("models", "import", str(gguf), "--name", "a/b")
    assert done.returncode == 2 and "cannot name a model" in done.stderr
    assert not (isolated_home / "models").exists()


def test_runs_new_on_a_gguf_file_says_to_import_it_first(tmp_path):
    gguf = write_llama_gguf(tmp_path / "tiny.gguf", random_llama_weights(), "Q8_0")
    done = zyquo_cli("runs", "new", "--model", str(gguf), "--data",
                     str(Path(__file__).parents[2] / "sample_data" / "chat"))
    assert done.returncode == 2
    assert f"zyquo-tui models import {gguf}" in done.stderr
