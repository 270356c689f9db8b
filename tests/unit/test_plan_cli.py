"""`zyquo-tui plan`: the JSON contract, exit statuses, bad input, --config, --data and --measure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_memory import GIB, MIB, llama_config, llama_tensors, write_model

from zyquo_tui.cli.main import main
from zyquo_tui.core.memory import budget as memory_budget
from zyquo_tui.core.memory.advisor import TIGHT_FRACTION, MemoryAdvisor
from zyquo_tui.core.memory.budget import MemoryBudget
from zyquo_tui.core.memory.estimate import TERMS, TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.history import MemoryHistory
from zyquo_tui.core.runs.settings import Method
from zyquo_tui.core.store.atomic import write_json_atomic

REPO = Path(__file__).resolve().parents[2]


def fake_machine(home: Path, limit_bytes: int) -> None:
    """A cached probe, so plan neither starts the MLX probe nor depends on this machine."""
    home.mkdir(parents=True, exist_ok=True)
    write_json_atomic(home / memory_budget.PROBE_CACHE_FILE, {
        "key": memory_budget._cache_key(),
        "probe": {"device": "Device(cpu, 0)", "memory_limit_bytes": limit_bytes,
                  "recommended_working_set_bytes": None},
    })


@pytest.fixture
def model(tmp_path) -> Path:
    return write_model(tmp_path / "llama-test")


def plan(capsys, *args, replica: bool = False) -> tuple[int, dict | str, str]:
    """`zyquo-tui plan ARGS`; by the terms alone unless `replica` (the replica's own tests)."""
    status = main(["plan", *map(str, args), *([] if replica else ["--no-replica"])])
    captured = capsys.readouterr()
    out = captured.out
    if "--json" in args and out.strip():
        out = json.loads(out)
    return status, out, captured.err


def estimate_of(model: Path, **settings) -> int:
    values = {"method": Method.LORA, "batch_size": 4, "max_seq_length": 2048, "num_layers": 4}
    values.update(settings)
    facts = ModelFacts.from_folder(model)
    return MemoryAdvisor(MemoryBudget.fixed(1 << 50), history=MemoryHistory()).estimate(
        facts, TrainingConfig(**values)).total_bytes


def test_json_has_the_estimate_budget_verdict_breakdown_and_suggestions(capsys, model,
                                                                        isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    status, data, _ = plan(capsys, "--model", model, "--num-layers", "-1", "--json")
    assert status == 0
    assert data["verdict"] == "fits"
    assert data["estimate_bytes"] == estimate_of(model)
    assert data["budget_bytes"] == min(64 * GIB, data["total_memory_bytes"])
    assert data["available_bytes"] > 0 and "used_by_others_bytes" in data
    assert set(data["breakdown"]) == set(TERMS)
    assert sum(data["breakdown"].values()) == data["estimate_bytes"]
    assert data["suggestions"] == []
    assert data["settings"]["batch_size"] == 4 and data["batch_width"] == 2048


def test_wont_fit_exits_1_with_suggestions_that_fit(capsys, model, isolated_home):
    need = estimate_of(model, max_seq_length=1024)
    halved = estimate_of(model, max_seq_length=1024, batch_size=2, grad_accumulation_steps=2)
    budget = int((need + halved / TIGHT_FRACTION) / 2)
    assert halved / TIGHT_FRACTION < budget < need
    fake_machine(isolated_home, budget)
    status, data, _ = plan(capsys, "--model", model, "--num-layers", "4", "--max-seq-length",
                           "1024", "--json")
    assert status == 1
    assert data["verdict"] == "won't fit" and "more than" in data["reason"]
    first = data["suggestions"][0]
    assert first["changes"] == {"batch_size": 2, "grad_accumulation_steps": 2}
    assert first["iters_factor"] == 2 and "2x the steps" in first["title"]
    assert first["estimate_bytes"] == halved
    for suggestion in data["suggestions"]:
        assert suggestion["verdict"] == "fits"
        assert suggestion["estimate_bytes"] <= budget * TIGHT_FRACTION


def test_tight_exits_0(capsys, model, isolated_home):
    need = estimate_of(model)
    fake_machine(isolated_home, int(need / 0.95))
    status, data, _ = plan(capsys, "--model", model, "--num-layers", "4", "--json")
    assert status == 0 and data["verdict"] == "tight"


def test_people_get_a_table_a_verdict_and_numbered_suggestions(capsys, model, isolated_home):
    need = estimate_of(model, max_seq_length=1024)
    fake_machine(isolated_home, int(need * 0.8))
    status, out, _ = plan(capsys, "--model", model, "--num-layers", "4", "--max-seq-length",
                          "1024")
    assert status == 1
    assert "estimated peak" in out and "attention" in out and "loss" in out
    assert "verdict   won't fit:" in out
    assert "Changes that fit:" in out and "  1. " in out


def test_config_yaml_sets_the_values_and_flags_override_it(capsys, model, isolated_home,
                                                           tmp_path):
    fake_machine(isolated_home, 64 * GIB)
    yaml_file = tmp_path / "lora.yaml"
    yaml_file.write_text(f"model: {model}\nfine_tune_type: dora\nbatch_size: 2\n"
                         "num_layers: 2\nmax_seq_length: 512\nlearning_rate: 1e-5\n"
                         "lora_parameters:\n  rank: 16\n  scale: 20.0\n  dropout: 0.0\n")
    status, data, _ = plan(capsys, "--config", yaml_file, "--json")
    assert status == 0
    assert data["settings"] == {**data["settings"], "method": "dora", "batch_size": 2,
                                "num_layers": 2, "max_seq_length": 512, "rank": 16}
    status, data, _ = plan(capsys, "--config", yaml_file, "--batch-size", "1", "--method",
                           "lora", "--json")
    assert data["settings"]["batch_size"] == 1 and data["settings"]["method"] == "lora"
    assert data["settings"]["rank"] == 16


def test_an_unknown_architecture_is_estimated_and_said(capsys, tmp_path, isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    folder = write_model(tmp_path / "odd", llama_config(model_type="not-a-real-arch"),
                         llama_tensors())
    status, data, _ = plan(capsys, "--model", folder, "--num-layers", "-1", "--json")
    assert status == 0
    assert any("does not know model_type 'not-a-real-arch'" in n for n in data["notes"])


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "batch_size must be at least 1, not 0."),
    (["--batch-size", "-3"], "batch_size must be at least 1, not -3."),
    (["--batch-size", "abc"], "batch_size must be a whole number, not 'abc'."),
    (["--max-seq-length", "0"], "max_seq_length must be"),
    (["--num-layers", "16"], "has only 4 layers"),
    # Not memory settings, but plan reckons checkpoints and time with them.
    (["--iters", "-5"], "iters must be at least 1, not -5."),
    (["--save-every", "0"], "save_every must be at least 1, not 0."),
    (["--steps-per-eval", "0"], "steps_per_eval must be at least 1, not 0."),
    (["--val-batches", "0"], "val_batches must be at least 1 (or -1), not 0."),
    (["--num-layers", "4", "--method", "qlora"], "qlora needs a quantized base model"),
])
def test_bad_settings_exit_2_with_one_sentence(capsys, model, isolated_home, args, message):
    fake_machine(isolated_home, 64 * GIB)
    status, out, err = plan(capsys, "--model", model, *args, "--json")
    assert status == 2
    assert message in err and err.startswith("zyquo-tui: ") and err.count("\n") == 1
    assert out == ""


def test_a_folder_without_config_json_exits_2(capsys, model, isolated_home):
    (model / "config.json").unlink()
    status, _, err = plan(capsys, "--model", model)
    assert status == 2 and "has no config.json" in err


def test_a_folder_without_safetensors_exits_2(capsys, model, isolated_home):
    (model / "model.safetensors").unlink()
    status, _, err = plan(capsys, "--model", model)
    assert status == 2 and "has no weights (*.safetensors)" in err


def test_a_missing_model_exits_2_with_the_sentence_runs_new_says(capsys, tmp_path,
                                                                  isolated_home):
    status, _, err = plan(capsys, "--model", tmp_path / "nowhere")
    assert status == 2
    assert "give a model folder, or a name that `zyquo-tui models` lists" in err


def test_a_layer_count_nobody_chose_trains_every_layer_as_runs_new_does(capsys, model,
                                                                        isolated_home):
    # mlx-lm's default of 16 on this 4-layer model: planned as all layers, not refused.
    fake_machine(isolated_home, 64 * GIB)
    status, data, _ = plan(capsys, "--model", model, "--json")
    assert status == 0 and data["settings"]["num_layers"] == -1


def test_a_config_that_is_not_yaml_exits_2(capsys, model, isolated_home, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\nbatch_size: 4\n")
    status, _, err = plan(capsys, "--config", broken)
    assert status == 2 and "broken.yaml:" in err
    listed = tmp_path / "list.yaml"
    listed.write_text("- just\n- a list\n")
    status, _, err = plan(capsys, "--config", listed)
    assert status == 2 and "must be a YAML mapping" in err


def test_an_unknown_method_or_optimizer_exits_2(capsys, model, isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    with pytest.raises(SystemExit) as caught:
        main(["plan", "--model", str(model), "--method", "ia3"])
    assert caught.value.code == 2
    status, _, err = plan(capsys, "--model", model, "--optimizer", "lion")
    assert status == 2 and "optimizer 'lion' is unknown" in err  # as `runs new` says it


def test_a_missing_dataset_exits_2(capsys, model, isolated_home, tmp_path):
    fake_machine(isolated_home, 64 * GIB)
    status, _, err = plan(capsys, "--model", model, "--data", tmp_path / "no-data")
    assert status == 2 and "no such dataset folder" in err


def test_a_file_given_as_the_dataset_is_refused_with_runs_new_s_sentence(capsys, model,
                                                                          isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    train = REPO / "sample_data" / "completions" / "train.jsonl"
    status, _, err = plan(capsys, "--model", model, "--data", train)
    assert status == 2
    assert err == (f"zyquo-tui: {train} is a file, not a dataset folder; give the folder that "
                   "holds train.jsonl.\n")
    assert main(["runs", "new", "--model", str(model), "--data", str(train)]) == 2
    assert capsys.readouterr().err.endswith(err.removeprefix("zyquo-tui: "))


def test_measure_refuses_a_config_that_wont_fit(capsys, model, isolated_home):
    fake_machine(isolated_home, MIB)
    status, out, _ = plan(capsys, "--model", model, "--num-layers", "4", "--measure", "--json")
    assert status == 1
    assert out["measured_peak_bytes"] is None and "won't fit" in out["measure_skipped"]


def _flags(*command: str) -> set[str]:
    """Every option string of a zyquo-tui command's parser."""
    import argparse

    from zyquo_tui.cli.main import build_parser

    parser = build_parser()
    for word in command:
        sub = next(action for action in parser._actions
                   if isinstance(action, argparse._SubParsersAction))
        parser = sub.choices[word]
    return {flag for action in parser._actions for flag in action.option_strings}


def test_plan_takes_every_flag_runs_new_takes():
    """A `runs new` line becomes a plan by its first words: no flag is refused."""
    assert _flags("runs", "new") - _flags("plan") == set()


def test_flags_that_cost_no_memory_leave_the_figure_as_it_was(capsys, model, isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    common = ("--model", model, "--num-layers", "-1", "--json")
    status, bare, _ = plan(capsys, *common)
    status_with, given, err = plan(capsys, *common, "--name", "a name", "--beta", "0.3",
                                   "--early-stopping-patience", "3", "--seed", "7",
                                   "--steps-per-report", "5", "--sample-max-tokens", "40")
    assert status == status_with == 0, err
    assert given["estimate_bytes"] == bare["estimate_bytes"]
    assert given["verdict"] == bare["verdict"]


def test_a_packed_run_s_plan_says_so_and_counts_the_wider_attention(capsys, tiny_model,
                                                                    isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    chat = REPO / "sample_data" / "chat"
    runs = {pack: plan(capsys, "--model", tiny_model, "--data", chat, "--num-layers", "-1",
                       f"--{pack}", "--json")[1] for pack in ("pack", "no-pack")}
    packed, unpacked = runs["pack"], runs["no-pack"]
    assert unpacked["packed_width"] is None
    # batch 4 of rows up to the longest: their positions together, padded to a multiple of 32
    assert packed["packed_width"] == 32 * -(-4 * packed["longest_row_tokens"] // 32)
    assert packed["breakdown"]["attention"] > unpacked["breakdown"]["attention"]
    _, text, _ = plan(capsys, "--model", tiny_model, "--data", chat, "--num-layers", "-1", "--pack")
    assert (f"rows packed into sequences of up to {packed['packed_width']} tokens, attention "
            "kept inside each row") in text
