"""Model discovery and inspection: safetensors headers, parameter counts, the places models live."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from test_models import hub_cache_copy, write_config
from test_models import machine  # noqa: F401  (a fixture the tests here take)

from zyquo_tui.cli.main import main
from zyquo_tui.core.library.gguf_files import discover_gguf_files
from zyquo_tui.core.library.models import (
    NEEDS_CONVERSION,
    READY,
    SOURCE_CONFIG,
    SOURCE_HF_CACHE,
    SOURCE_LM_STUDIO,
    SOURCE_ZYQUO,
    UNSUPPORTED,
    discover_models,
    find_model,
    inspect_model,
)
from zyquo_tui.core.library.safetensors_header import (
    read_header,
)

# The sample model: vocabulary 512 x hidden 64 embeddings (tied), 2 layers of attention
# (q, o 64x64; k, v 32x64), MLP (3 x 128x64) and two norms, and a final norm.
TINY_PARAMETERS = 512 * 64 + 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64 + 2 * 64) + 64


def test_sample_model_bytes_are_the_tensor_data_in_the_file(sample_models):
    path = sample_models["zyquo-tiny"] / "model.safetensors"
    data = path.read_bytes()
    (header_length,) = struct.unpack("<Q", data[:8])
    assert read_header(path).total_bytes == len(data) - 8 - header_length


def test_sample_model_and_its_4bit_copy_have_the_same_exact_parameter_count(sample_models):
    plain = inspect_model(sample_models["zyquo-tiny"])
    quantized = inspect_model(sample_models["zyquo-tiny-4bit"])
    assert plain.parameters == quantized.parameters == TINY_PARAMETERS
    assert quantized.weight_bytes < plain.weight_bytes / 4
    assert plain.quantization is None
    assert (quantized.quantization.bits, quantized.quantization.group_size) == (4, 64)


def test_parameter_counts_are_those_of_mlx_lm_get_total_parameters(sample_models):
    code = ("import sys\nfrom mlx_lm.utils import get_total_parameters, load\n"
            "print([get_total_parameters(load(p)[0]) for p in sys.argv[1:]])")
    paths = [str(sample_models[name]) for name in ("zyquo-tiny", "zyquo-tiny-4bit")]
    done = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [inspect_model(p).parameters for p in paths]


def test_sample_model_shape_comes_from_its_config(sample_models):
    info = inspect_model(sample_models["zyquo-tiny"])
    assert info.status == READY and info.supported
    assert (info.architecture, info.mlx_module) == ("llama", "llama")
    assert (info.hidden_size, info.num_layers, info.num_heads, info.num_kv_heads) == (64, 2, 4, 2)
    assert (info.vocab_size, info.context_length) == (512, 2048)
    assert info.tied_embeddings is True
    assert info.chat_template is True
    assert info.weight_dtypes == {"F32": info.weight_bytes}


def test_a_hub_cache_model_is_found_through_its_snapshot_symlinks(machine, sample_models,
                                                                  tmp_path, monkeypatch):
    cache = tmp_path / "hf" / "hub"
    snapshot = hub_cache_copy(sample_models["zyquo-tiny-4bit"], cache, "zyquo/tiny-4bit")
    assert (snapshot / "model.safetensors").is_symlink()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    (info,) = discover_models()
    assert (info.name, info.source, info.path) == ("zyquo/tiny-4bit", SOURCE_HF_CACHE, snapshot)
    assert info.status == READY
    assert info.parameters == TINY_PARAMETERS
    assert info.quantization.bits == 4


def test_hf_home_locates_the_hub_cache_when_hf_hub_cache_is_unset(machine, sample_models,
                                                                  tmp_path, monkeypatch):
    hub_cache_copy(sample_models["zyquo-tiny"], tmp_path / "hf-home" / "hub", "org/tiny")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert [m.name for m in discover_models()] == ["org/tiny"]


def test_the_default_hub_cache_is_under_the_home_folder(machine, sample_models):
    hub_cache_copy(sample_models["zyquo-tiny"], machine / ".cache" / "huggingface" / "hub",
                   "org/tiny")
    assert [m.name for m in discover_models()] == ["org/tiny"]


def test_lm_studio_models_are_named_publisher_slash_model(machine, sample_models):
    for root in (machine / ".lmstudio" / "models", machine / ".cache" / "lm-studio" / "models"):
        root.mkdir(parents=True)
    shutil.copytree(sample_models["zyquo-tiny-4bit"],
                    machine / ".lmstudio" / "models" / "mlx-community" / "tiny-4bit")
    gguf = machine / ".cache" / "lm-studio" / "models" / "bartowski" / "tiny-GGUF"
    gguf.mkdir(parents=True)
    (gguf / "tiny-Q4_K_M.gguf").write_bytes(b"GGUF")
    found = {m.name: m for m in discover_models()}
    # A folder of GGUF files is no model: its files are listed as importable instead
    # (tests/unit/test_gguf_listing.py).
    assert set(found) == {"mlx-community/tiny-4bit"}
    assert found["mlx-community/tiny-4bit"].source == SOURCE_LM_STUDIO
    assert found["mlx-community/tiny-4bit"].status == READY
    (listed,) = [f for f in discover_gguf_files() if f.source == SOURCE_LM_STUDIO]
    assert listed.name == "bartowski/tiny-GGUF/tiny-Q4_K_M.gguf"
    assert "is truncated" in listed.status_detail  # four bytes: the signature and no more


def test_a_gguf_only_folder_elsewhere_says_how_to_import_its_files(machine, isolated_home):
    folder = isolated_home / "models" / "downloaded"
    folder.mkdir(parents=True)
    (folder / "model.Q4_0.gguf").write_bytes(b"GGUF")
    (model,) = discover_models()
    assert model.status == UNSUPPORTED
    assert "`zyquo-tui models import FILE.gguf`" in model.status_detail


def test_zyquo_models_and_config_toml_folders_are_searched(machine, isolated_home, sample_models,
                                                           tmp_path):
    shutil.copytree(sample_models["zyquo-tiny"], isolated_home / "models" / "zyquo-tiny")
    extra = tmp_path / "my-models"
    shutil.copytree(sample_models["zyquo-tiny-4bit"], extra / "team" / "tiny-q4")
    (isolated_home / "config.toml").write_text(f'[models]\nfolders = ["{extra}"]\n')
    found = {m.name: m.source for m in discover_models()}
    assert found == {"zyquo-tiny": SOURCE_ZYQUO, "team/tiny-q4": SOURCE_CONFIG}


def test_a_model_reachable_two_ways_is_listed_once(machine, isolated_home, sample_models):
    shutil.copytree(sample_models["zyquo-tiny"], isolated_home / "models" / "zyquo-tiny")
    (isolated_home / "config.toml").write_text(
        f'[models]\nfolders = ["{isolated_home / "models"}"]\n')
    assert [m.source for m in discover_models()] == [SOURCE_ZYQUO]


def test_find_model_takes_a_path_or_a_listed_name(machine, isolated_home, sample_models):
    shutil.copytree(sample_models["zyquo-tiny"], isolated_home / "models" / "zyquo-tiny")
    assert find_model("zyquo-tiny").path == isolated_home / "models" / "zyquo-tiny"
    assert find_model(str(sample_models["zyquo-tiny-4bit"])).quantization.bits == 4
    assert find_model("no-such-model") is None


def test_models_command_prints_a_table_and_explains_what_is_not_ready(machine, isolated_home,
                                                                      sample_models, capsys):
    shutil.copytree(sample_models["zyquo-tiny-4bit"], isolated_home / "models" / "tiny-4bit")
    torch = write_config(isolated_home / "models" / "old", model_type="llama")
    (torch / "model.pt").write_bytes(b"\0")
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ARCH", "PARAMS", "WEIGHTS", "QUANT",
                                "CONTEXT", "CHAT", "SOURCE"]
    assert lines[1].split()[:4] == ["old", NEEDS_CONVERSION, "llama", "no"]
    assert lines[2].split()[:6] == ["tiny-4bit", READY, "llama", "107K", "66.2", "KiB"]
    assert "4-bit g64" in lines[2]
    assert lines[4].startswith(f"old ({torch}): PyTorch weights only")


def test_models_command_json_lists_every_field_and_the_searched_folders(machine, isolated_home,
                                                                        sample_models, capsys):
    shutil.copytree(sample_models["zyquo-tiny"], isolated_home / "models" / "zyquo-tiny")
    assert main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1
    (model,) = data["models"]
    assert model["parameters"] == TINY_PARAMETERS
    assert model["path"] == str(isolated_home / "models" / "zyquo-tiny")
    assert {"name", "status", "architecture", "supported", "weight_bytes", "quantization",
            "hidden_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size",
            "context_length", "tied_embeddings", "chat_template"} <= set(model)
    assert [r["source"] for r in data["searched"]] == ["zyquo", "huggingface", "lm-studio",
                                                      "lm-studio"]


def test_model_and_dataset_core_modules_import_no_mlx_textual_or_transformers(sample_models):
    code = (
        "import sys\n"
        "from zyquo_tui.core.library import datasets, models, safetensors_header, token_stats\n"
        f"models.inspect_model({str(sample_models['zyquo-tiny'])!r})\n"
        "datasets.validate_dataset(datasets.sample_data_dir() / 'chat')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('mlx', 'mlx_lm', 'textual', 'transformers')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
