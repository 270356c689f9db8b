"""Model discovery and inspection: safetensors headers, parameter counts, the places models live."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest

from zyquo_tui.cli.main import main
from zyquo_tui.core.library.models import (
    INCOMPLETE,
    NEEDS_CONVERSION,
    READY,
    UNSUPPORTED,
    count_parameters,
    discover_models,
    inspect_model,
    mlx_lm_remappings,
    mlx_module_for,
)
from zyquo_tui.core.library.safetensors_header import (
    SafetensorsHeaderError,
    read_header,
    read_headers,
)

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4, "U8": 1}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]],
                      metadata: dict[str, str] | None = None) -> Path:
    """A real safetensors file of zero-filled tensors, written by hand."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = DTYPE_BYTES[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + bytes(offset))
    return path


def write_config(folder: Path, **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture
def machine(tmp_path, monkeypatch) -> Path:
    """A home folder of our own: no real Hugging Face cache or LM Studio folder is searched."""
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for variable in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    return home


def hub_cache_copy(model: Path, cache: Path, repo: str, revision: str = "a" * 40) -> Path:
    """The hub cache layout: snapshot files are relative symlinks to content-addressed blobs."""
    repo_folder = cache / ("models--" + repo.replace("/", "--"))
    snapshot = repo_folder / "snapshots" / revision
    (repo_folder / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in model.iterdir():
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, repo_folder / "blobs" / digest)
        (snapshot / file.name).symlink_to(Path("../../blobs") / digest)
    (repo_folder / "refs").mkdir()
    (repo_folder / "refs" / "main").write_text(revision)
    return snapshot


def test_header_gives_each_tensors_dtype_shape_and_bytes_and_the_totals(tmp_path):
    path = write_safetensors(tmp_path / "model.safetensors", {
        "embed.weight": ("BF16", [10, 4]),
        "norm.weight": ("F32", [4]),
        "proj.weight": ("U32", [4, 2]),
    }, metadata={"format": "mlx"})
    table = read_header(path)
    assert [(t.name, t.dtype, t.shape, t.nbytes) for t in table] == [
        ("embed.weight", "BF16", (10, 4), 80),
        ("norm.weight", "F32", (4,), 16),
        ("proj.weight", "U32", (4, 2), 32),
    ]
    assert table.total_bytes == 128
    assert table.total_elements == 40 + 4 + 8
    assert table.bytes_by_dtype() == {"BF16": 80, "F32": 16, "U32": 32}
    assert table.metadata == {"format": "mlx"}
    assert "norm.weight" in table and table["norm.weight"].elements == 4


def test_shards_read_as_one_table(tmp_path):
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": ("F16", [3])})
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"b": ("F16", [5])})
    table = read_headers(sorted(tmp_path.glob("model-*.safetensors"), reverse=True))
    assert [t.name for t in table] == ["a", "b"]
    assert table.total_bytes == 16


@pytest.mark.parametrize("damage, expected", [
    (lambda data: data[:5], "too short"),
    (lambda data: data[:-4], "outside the file"),
    (lambda data: struct.pack("<Q", 10**9) + data[8:], "does not fit the file"),
    (lambda data: data[:8] + b"[" + data[9:], "not valid JSON"),
])
def test_a_damaged_file_raises_a_sentence_naming_it(tmp_path, damage, expected):
    path = write_safetensors(tmp_path / "model.safetensors", {"w": ("F32", [4, 4])})
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(SafetensorsHeaderError, match=expected) as raised:
        read_header(path)
    assert str(path) in str(raised.value)


def test_packed_weights_count_what_they_pack_and_scales_and_biases_count_nothing(tmp_path):
    path = write_safetensors(tmp_path / "model.safetensors", {
        # 4-bit: a uint32 holds 8 weights, so [64, 8] packs 64 x 64.
        "layers.0.proj.weight": ("U32", [64, 8]),
        "layers.0.proj.scales": ("F16", [64, 1]),
        "layers.0.proj.biases": ("F16", [64, 1]),
        "layers.0.proj.bias": ("F16", [64]),  # a Linear's own bias is a parameter
        # this layer was kept at 8 bits: [64, 16] packs 64 x 64 too.
        "layers.1.proj.weight": ("U32", [64, 16]),
        "layers.1.proj.scales": ("F16", [64, 1]),
        "layers.1.proj.biases": ("F16", [64, 1]),
        "norm.weight": ("F16", [64]),
    })
    config = {"quantization": {"bits": 4, "group_size": 64,
                               "layers.1.proj": {"bits": 8, "group_size": 64}}}
    assert count_parameters(read_header(path), config) == 64 * 64 + 64 + 64 * 64 + 64


def test_shape_of_a_multimodal_checkpoint_is_read_from_its_text_config(tmp_path):
    folder = write_config(tmp_path / "vlm", model_type="mistral3", text_config={
        "hidden_size": 128, "num_hidden_layers": 3, "num_attention_heads": 8,
        "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 4096})
    write_safetensors(folder / "model.safetensors", {"w": ("F16", [2])})
    info = inspect_model(folder)
    assert (info.hidden_size, info.num_layers, info.num_heads, info.num_kv_heads,
            info.vocab_size, info.context_length) == (128, 3, 8, 4, 1000, 4096)


def test_without_the_config_key_a_stored_lm_head_means_untied_embeddings(tmp_path):
    folder = write_config(tmp_path / "m", model_type="llama")
    write_safetensors(folder / "model.safetensors", {"model.embed_tokens.weight": ("F16", [8, 2]),
                                                      "lm_head.weight": ("F16", [8, 2])})
    assert inspect_model(folder).tied_embeddings is False


def test_chat_template_may_live_in_a_jinja_file(tmp_path):
    folder = write_config(tmp_path / "m", model_type="llama")
    write_safetensors(folder / "model.safetensors", {"w": ("F16", [2])})
    (folder / "tokenizer_config.json").write_text("{}")
    assert inspect_model(folder).chat_template is False
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    assert inspect_model(folder).chat_template is True


def test_remappings_are_read_from_the_installed_mlx_lm_source():
    remapping, by_architecture = mlx_lm_remappings()
    assert remapping["mistral"] == "llama"
    assert by_architecture[("bailing_hybrid", "BailingMoeV3ForCausalLM")] == "bailing_moe_v3"


@pytest.mark.parametrize("config, module, status", [
    ({"model_type": "llama"}, "llama", READY),
    ({"model_type": "mistral"}, "llama", READY),  # MODEL_REMAPPING
    ({"model_type": "bailing_hybrid", "architectures": ["BailingMoeV3ForCausalLM"]},
     "bailing_moe_v3", READY),  # MODEL_ARCHITECTURE_REMAPPING
    ({"model_type": "not_a_real_architecture"}, "not_a_real_architecture", UNSUPPORTED),
    ({"model_type": "llama", "model_file": "custom.py"}, "llama", UNSUPPORTED),
])
def test_support_follows_mlx_lm_module_lookup(tmp_path, config, module, status):
    folder = write_config(tmp_path / "m", **config)
    write_safetensors(folder / "model.safetensors", {"w": ("F16", [2])})
    info = inspect_model(folder)
    assert mlx_module_for(config) == module
    assert info.status == status
    if status == UNSUPPORTED:
        assert info.status_detail


def test_pytorch_only_weights_are_listed_as_needing_conversion(tmp_path):
    folder = write_config(tmp_path / "torch-model", model_type="llama")
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 16)
    info = inspect_model(folder)
    assert info.status == NEEDS_CONVERSION
    assert "PyTorch" in info.status_detail and "mlx_lm convert" in info.status_detail
    assert info.parameters is None


def test_a_folder_without_weights_or_with_a_broken_header_is_incomplete(tmp_path):
    empty = write_config(tmp_path / "empty", model_type="llama")
    assert inspect_model(empty).status == INCOMPLETE
    broken = write_config(tmp_path / "broken", model_type="llama")
    (broken / "model.safetensors").write_bytes(b"\x01\x02")
    info = inspect_model(broken)
    assert info.status == INCOMPLETE and "too short" in info.status_detail


def test_a_pytorch_repo_in_the_hub_cache_says_how_to_fetch_safetensors(machine, tmp_path,
                                                                        monkeypatch):
    source = write_config(tmp_path / "torch", model_type="llama")
    (source / "pytorch_model.bin").write_bytes(b"\0" * 16)
    hub_cache_copy(source, tmp_path / "hub", "meta/old-model")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (info,) = discover_models()
    assert info.status == NEEDS_CONVERSION
    assert "--hf-path meta/old-model" in info.status_detail


def test_no_models_found_says_where_it_looked_and_what_to_do(machine, capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No models found.") and "zyquo-tui sample" in out


def test_an_adapter_folder_is_not_taken_for_a_model(machine, isolated_home):
    adapter = isolated_home / "models" / "my-adapter"
    write_safetensors(adapter / "adapters.safetensors", {"lora_a": ("F32", [2, 2])})
    (adapter / "adapter_config.json").write_text("{}")
    assert discover_models() == []
