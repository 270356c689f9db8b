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
from zyquo_tui.core.memory.history import HISTORY_FILE, MemoryHistory
from zyquo_tui.core.runs.settings import Method
from zyquo_tui.core.store.atomic import write_json_atomic

REPO = Path(__file__).resolve().parent.parent


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


def test_data_sets_the_width_from_the_longest_tokenized_row(capsys, tiny_model, isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    data = REPO / "sample_data" / "text"
    status, out, _ = plan(capsys, "--model", tiny_model, "--data", data, "--num-layers", "-1",
                          "--json")
    assert status == 0
    longest = out["longest_row_tokens"]
    rows = sum(1 for line in (data / "train.jsonl").read_text().splitlines() if line.strip())
    assert out["rows"] == rows and 0 < longest < 2048
    assert out["batch_width"] == 1 + 32 * -(-longest // 32)  # padded, well under the 2048 cap
    assert not any("row lengths unknown" in note for note in out["notes"])


def test_the_config_line_says_why_the_width_is_not_the_longest_row(capsys, tiny_model,
                                                                  isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    data = REPO / "sample_data" / "completions"
    _, out, _ = plan(capsys, "--model", tiny_model, "--data", data, "--json")
    longest, rows = out["longest_row_tokens"], out["rows"]
    status, text, _ = plan(capsys, "--model", tiny_model, "--data", data)
    assert status == 0
    assert (f"{1 + 32 * -(-longest // 32)} tokens per row (the longest of {rows} rows has "
            f"{longest} tokens, padded as mlx-lm pads a batch)") in text
    status, text, _ = plan(capsys, "--model", tiny_model, "--data", data,
                           "--max-seq-length", longest - 8)
    assert f"{longest - 8} tokens per row (the longest of {rows} rows has {longest} tokens, " \
           "cut to max_seq_length)" in text
    status, text, _ = plan(capsys, "--model", tiny_model, "--data", data,
                           "--max-seq-length", longest)
    assert f"{longest} tokens per row (the longest of {rows} rows has {longest} tokens)" in text


def test_preference_data_is_planned_as_the_preference_run_it_trains(capsys, tiny_model,
                                                                    isolated_home):
    """The objective follows the data unless given: dpo counts two sequences a row; an
    objective the data cannot train is refused with runs new's sentence."""
    fake_machine(isolated_home, 64 * GIB)
    preference = REPO / "sample_data" / "preference"
    # The whole-batch loss, whose term is proportional to the sequences a batch holds.
    common = ("--model", tiny_model, "--num-layers", "-1", "--loss-chunk-tokens", "off",
              "--json")
    status, sft, _ = plan(capsys, *common, "--data", REPO / "sample_data" / "completions")
    assert status == 0 and sft["objective"] == "sft"
    status, dpo, _ = plan(capsys, *common, "--data", preference)
    assert status == 0 and dpo["objective"] == "dpo"
    assert dpo["breakdown"]["loss"] == 2 * dpo["batch_width"] * sft["breakdown"]["loss"] \
        / sft["batch_width"]  # two sequences a row, each as wide as the widest
    status, orpo, _ = plan(capsys, *common, "--data", preference, "--objective", "orpo")
    assert status == 0 and orpo["objective"] == "orpo"
    status, _, err = plan(capsys, *common, "--data", preference, "--objective", "sft")
    assert status == 2 and "choose --objective dpo or orpo" in err
    status, full, _ = plan(capsys, "--model", tiny_model, "--method", "full", "--objective",
                           "dpo", "--json")
    assert status == 0 and full["breakdown"]["reference"] > 0


def test_measure_reports_the_real_peak_beside_the_estimate_and_remembers_it(
        capsys, tiny_model, isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    status, out, _ = plan(capsys, "--model", tiny_model, "--num-layers", "-1", "--batch-size",
                          "2", "--max-seq-length", "128", "--measure", "--json")
    assert status == 0
    assert out["measured_peak_bytes"] > out["breakdown"]["base_weights"]
    assert abs(out["measured_error"]) < 0.5
    history = MemoryHistory.load(isolated_home)
    assert len(history.records) == 1
    record = history.records[0]
    # MLX's peak, and the process's resident peak above its start: the history keeps the larger
    assert record["mlx_peak_bytes"] == out["measured_peak_bytes"]
    assert record["peak_rss_bytes"] == out["measured_peak_rss_bytes"]
    assert record["measured_peak_bytes"] == max(
        out["measured_peak_bytes"],
        out["measured_peak_rss_bytes"] - out["measured_start_rss_bytes"])
    assert record["estimate_bytes"] == out["model_estimate_bytes"]
    assert (isolated_home / HISTORY_FILE).is_file()


def test_a_measure_of_the_small_sample_model_does_not_scale_later_plans(
        capsys, tiny_model, isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    args = ("--model", tiny_model, "--batch-size", "2", "--max-seq-length", "128", "--json")
    status, measured, _ = plan(capsys, *args, "--measure")
    assert status == 0
    record = MemoryHistory.load(isolated_home).records[0]
    # The runtime's own resident memory puts the measure well above this small estimate...
    assert record["measured_peak_bytes"] > 1.1 * record["estimate_bytes"]
    # ...by a fixed amount, which later plans do not take for an error of scale.
    status, later, _ = plan(capsys, *args)
    assert status == 0 and "history_correction" not in later["breakdown"]
    assert later["estimate_bytes"] == later["model_estimate_bytes"]


def test_measure_refuses_a_config_that_wont_fit(capsys, model, isolated_home):
    fake_machine(isolated_home, MIB)
    status, out, _ = plan(capsys, "--model", model, "--num-layers", "4", "--measure", "--json")
    assert status == 1
    assert out["measured_peak_bytes"] is None and "won't fit" in out["measure_skipped"]


def test_the_verdict_is_judged_by_a_replicas_measured_peak(capsys, tiny_model, isolated_home):
    """Real training of the replica (a copy of the sample model with its widths divided) in a
    subprocess; the verdict judges the peak it predicts, and the breakdown says so."""
    fake_machine(isolated_home, 64 * GIB)
    args = ("--model", tiny_model, "--num-layers", "-1", "--data",
            REPO / "sample_data" / "completions")
    status, data, _ = plan(capsys, *args, "--json", replica=True)
    assert status == 0, data
    replica = data["replica"]
    assert replica["scale"] >= 2 and replica["replica_peak_bytes"] > 0
    assert data["estimate_bytes"] == replica["peak_bytes"] != data["model_estimate_bytes"]
    assert sum(data["breakdown"].values()) == data["estimate_bytes"]
    assert data["replica_skipped"] is None
    status, text, _ = plan(capsys, *args, replica=True)
    assert "replica correction" in text and "measured on a replica" in text
    status, terms, _ = plan(capsys, *args, "--json")  # --no-replica: the terms alone
    assert terms["replica"] is None and terms["estimate_bytes"] == data["model_estimate_bytes"]
    assert terms["replica_skipped"] == "not measured (--no-replica)"


def test_without_a_replica_the_terms_judge_and_the_plan_says_why(capsys, model, isolated_home):
    """A model folder of headers alone (no tokenizer, no weights): the replica cannot train,
    which costs the replica, not the plan."""
    fake_machine(isolated_home, 64 * GIB)
    status, data, _ = plan(capsys, "--model", model, "--num-layers", "-1", "--max-seq-length",
                           "512", "--json", replica=True)
    assert status == 0
    assert data["replica"] is None and data["replica_skipped"].startswith("no replica: ")
    assert data["estimate_bytes"] == estimate_of(model, max_seq_length=512)


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


def test_plan_by_epochs_counts_the_datasets_rows_and_says_the_steps(capsys, tiny_model,
                                                                   isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    data = REPO / "sample_data" / "completions"  # 225 train rows
    status, out, _ = plan(capsys, "--model", tiny_model, "--data", data, "--num-layers", "-1",
                          "--epochs", "2", "--batch-size", "5", "--json")
    assert status == 0 and (out["iters"], out["epochs"]) == (90, 2)
    status, out, _ = plan(capsys, "--model", tiny_model, "--data", data, "--num-layers", "-1",
                          "--iters", "84")
    assert "steps     84 iterations: 1.50 epochs of 56 batches of 4 from 225 rows" in out
    status, out, err = plan(capsys, "--model", tiny_model, "--num-layers", "-1", "--epochs", "2")
    assert status == 2 and err == ("zyquo-tui: --epochs needs --data: an epoch is a pass over "
                                   "train.jsonl, and its rows and the batch size make it into "
                                   "iterations.\n")
