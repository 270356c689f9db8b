"""`runs new`, `runs import-config` and `runs start`: the checks the new-run form makes, the flag
of every setting, model names, default names, and bad input refused in one sentence with
nothing stored."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import REPO, SAMPLE_DATA

from zyquo_tui.cli.main import main
from zyquo_tui.core.library.datasets import validate_dataset
from zyquo_tui.core.library.run_checks import DataTraits
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.runs.mlx_config import dump_mlx_yaml, run_to_mlx_config
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method
from zyquo_tui.core.setup.draft import Base, RunDraft
from zyquo_tui.core.store.store import RunStore

COMPLETIONS = str(SAMPLE_DATA / "completions")


def cli(capsys, *args) -> tuple[int, str, str]:
    status = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def refused(capsys, *args) -> str:
    """Run a command that must refuse: exit 2, one sentence on stderr, no run stored."""
    status, out, err = cli(capsys, *args)
    assert status == 2, (out, err)
    assert out == "" and err.startswith("zyquo-tui: ") and err.count("\n") == 1, err
    assert RunStore().list() == []
    return err.removeprefix("zyquo-tui: ").strip()


def made(capsys, *args):
    status, out, err = cli(capsys, *args)
    assert status == 0, err
    return RunStore().get(out.strip()), err


@pytest.fixture
def on(tiny_model):
    """The flags that make a good run on the sample model."""
    return ("--model", tiny_model, "--data", COMPLETIONS, "--num-layers", "-1")


@pytest.mark.parametrize("args, sentence", [
    (["--model", "{tiny}", "--method", "qlora", "--num-layers", "-1"],
     "The run was not created: qlora needs a quantized base model, and zyquo-tiny is not "
     "quantized; use lora, or quantize it first (`mlx_lm convert -q`)."),
    (["--model", "{tiny4}", "--method", "full", "--num-layers", "-1"],
     "The run was not created: full fine-tuning needs an unquantized model, and "
     "zyquo-tiny-4bit is quantized; use qlora (or lora) on it."),
    (["--model", "{tiny}", "--num-layers", "16"],
     "The run was not created: num_layers is 16, but zyquo-tiny has only 2 layers; use -1 to "
     "train all of them, or fewer."),
    (["--model", "{tiny}", "--num-layers", "3"],
     "The run was not created: num_layers is 3, but zyquo-tiny has only 2 layers; use -1 to "
     "train all of them, or fewer."),
    (["--model", "{tiny}", "--num-layers", "-1", "--optimizer", "lion"],
     "The run was not created: optimizer 'lion' is unknown; choose one of adam, adamw, muon, "
     "sgd, adafactor."),
    (["--model", "nowhere/model", "--num-layers", "-1"],
     "No model 'nowhere/model': give a model folder, or a name that `zyquo-tui models` lists."),
    (["--model", "{tiny4}", "--num-layers", "-1", "--lora-keys", "attn.q,attn.v"],
     "The run was not created: lora_parameters.keys names no matrix of zyquo-tiny-4bit's "
     "layers (attn.q, attn.v); its layers have mlp.down_proj, mlp.gate_proj, mlp.up_proj, "
     "self_attn.k_proj, self_attn.o_proj, self_attn.q_proj, self_attn.v_proj."),
])
def test_runs_new_refuses_a_model_or_method_that_cannot_train(capsys, sample_models, args,
                                                              sentence):
    names = {"{tiny}": str(sample_models["zyquo-tiny"]),
             "{tiny4}": str(sample_models["zyquo-tiny-4bit"])}
    args = [names.get(arg, arg) for arg in args]
    assert refused(capsys, "runs", "new", *args, "--data", COMPLETIONS) == sentence


def test_a_num_layers_nobody_chose_trains_every_layer_of_a_smaller_model(capsys, tiny_model,
                                                                         isolated_home):
    status, out, _ = cli(capsys, "runs", "new", "--model", tiny_model, "--data", COMPLETIONS)
    assert status == 0
    record = json.loads((isolated_home / "runs" / out.strip() / "run.json").read_text())
    assert record["hyperparameters"]["num_layers"] == -1


def test_runs_new_refuses_a_dataset_folder_without_train_jsonl(capsys, tiny_model, tmp_path):
    empty = tmp_path / "no-train"
    empty.mkdir()
    (empty / "valid.jsonl").write_text('{"text": "a"}\n')
    assert refused(capsys, "runs", "new", "--model", tiny_model, "--num-layers", "-1",
                   "--data", empty) == (f"The run was not created: {empty} has no train.jsonl, "
                                        "which training needs; give the folder that holds it.")
    assert refused(capsys, "runs", "new", "--model", tiny_model, "--num-layers", "-1",
                   "--data", tmp_path / "gone") == (
        f"The run was not created: {tmp_path / 'gone'}: no such dataset folder; give the "
        "folder that holds train.jsonl.")


@pytest.mark.parametrize("config, line, sentence", [
    ("fine_tune_type: full\nmodel: {tiny4}\nnum_layers: -1\n", 1,
     "full fine-tuning needs an unquantized model, and zyquo-tiny-4bit is quantized; use qlora "
     "(or lora) on it."),
    ("model: {tiny}\nnum_layers: 8\n", 2,
     "num_layers is 8, but zyquo-tiny has only 2 layers; use -1 to train all of them, or "
     "fewer."),
    ("model: {tiny}\nnum_layers: -1\noptimizer: lion\n", 3,
     "optimizer 'lion' is unknown; choose one of adam, adamw, muon, sgd, adafactor."),
    ("model: {tiny}\nnum_layers: -1\nlora_parameters: {{dropout: 1.5}}\n", 3,
     "lora_parameters.dropout must be from 0 up to (not including) 1, not 1.5."),
])
def test_import_config_refuses_what_runs_new_refuses(capsys, sample_models, tmp_path, config,
                                                     line, sentence):
    """The same sentence as `runs new`, at the file and line of the key."""
    path = tmp_path / "config.yaml"
    path.write_text(config.format(tiny=sample_models["zyquo-tiny"],
                                  tiny4=sample_models["zyquo-tiny-4bit"])
                    + f"data: {COMPLETIONS}\n")
    assert refused(capsys, "runs", "import-config", path) == f"{path}:{line}: {sentence}"


def test_import_config_refuses_a_dataset_without_train_jsonl(capsys, tiny_model, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(f"model: {tiny_model}\ndata: {SAMPLE_DATA}\nnum_layers: -1\n")
    assert refused(capsys, "runs", "import-config", path) == (
        f"{path}:2: {SAMPLE_DATA} has no train.jsonl, which training needs; give the folder "
        "that holds it.")


def form_sentence(data, **settings) -> list[tuple[str, str, str]]:
    """What the new-run form says of these settings on the sample model and this dataset: its
    checks with the dataset report and the model facts it holds."""
    hp = Hyperparameters.from_dict({"num_layers": -1, **settings})
    folder = RunStore().home / "models" / "zyquo-tiny"
    draft = RunDraft(base=Base(str(folder), ModelFacts.from_folder(folder).traits()),
                     chosen_method=Method.LORA, hyperparameters=hp, chosen=frozenset(SETTINGS),
                     data=DataTraits.from_report(validate_dataset(data)))
    return [(p.key, p.sentence, p.severity) for p in draft.problems()]


@pytest.mark.parametrize("data, flags, settings", [
    ("completions", ["--batch-size", "300"], {"batch_size": 300}),
    ("text", ["--mask-prompt"], {"mask_prompt": True}),
    ("preference", ["--objective", "sft"], {}),
])
def test_the_forms_data_checks_refuse_in_the_cli_with_the_same_sentence(capsys, models, data,
                                                                        flags, settings):
    folder = SAMPLE_DATA / data
    (key, sentence, severity), = form_sentence(folder, **settings)
    assert severity == "error"
    message = refused(capsys, "runs", "new", "--model", "zyquo-tiny", "--num-layers", "-1",
                      "--data", folder, *flags)
    assert message == f"The run was not created: {sentence}"


def test_an_empty_train_jsonl_is_refused_by_the_form_and_the_cli_alike(capsys, models,
                                                                       tmp_path):
    """No rows to train on (a file emptied, or blank lines only): refused before any run is
    made, not left for the trainer to fail on."""
    data = tmp_path / "empty"
    data.mkdir()
    (data / "train.jsonl").write_text("\n\n")
    (data / "valid.jsonl").write_text((SAMPLE_DATA / "completions" / "valid.jsonl").read_text())
    sentence = "empty: train.jsonl has no rows; add the rows to train on."
    assert ("dataset", sentence, "error") in form_sentence(data)
    message = refused(capsys, "runs", "new", "--model", "zyquo-tiny", "--num-layers", "-1",
                      "--data", data)
    assert message == f"The run was not created: {sentence}"
    assert not list((RunStore().home / "runs").glob("*/run.json"))


@pytest.mark.parametrize("command", ["new", "import-config"])
def test_a_row_that_would_stop_the_run_is_refused_at_its_file_and_line(capsys, models,
                                                                       tmp_path, command):
    """A row the trainer cannot read (broken JSON on line 3): the form refuses to start the
    run, and `runs new` and `import-config` refuse to make it, naming the line, rather than
    storing a run that fails when it starts."""
    data = tmp_path / "broken"
    data.mkdir()
    rows = (SAMPLE_DATA / "completions" / "train.jsonl").read_text().splitlines()
    rows[2] = '{"prompt": "cut short'
    (data / "train.jsonl").write_text("\n".join(rows) + "\n")
    (data / "valid.jsonl").write_text((SAMPLE_DATA / "completions" / "valid.jsonl").read_text())
    assert not validate_dataset(data).ok  # the form's report, which blocks its start
    if command == "new":
        args = ("runs", "new", "--model", "zyquo-tiny", "--num-layers", "-1", "--data", data)
    else:
        config = tmp_path / "config.yaml"
        config.write_text(f"model: {RunStore().home / 'models' / 'zyquo-tiny'}\n"
                          f"data: {data}\nnum_layers: -1\n")
        args = ("runs", "import-config", config)
    message = refused(capsys, *args)
    assert message.startswith("The run was not created: the dataset has 1 error that would "
                              f"stop the run (the first: {data / 'train.jsonl'}:3: invalid JSON")
    assert message.endswith(f"`zyquo-tui data check {data}` lists them all.")


def test_the_forms_data_warning_is_the_clis_warning(capsys, models):
    (key, sentence, severity), = form_sentence(SAMPLE_DATA / "chat", batch_size=64)
    assert (key, severity) == ("batch_size", "warning")
    run, err = made(capsys, "runs", "new", "--model", "zyquo-tiny", "--num-layers", "-1",
                    "--data", SAMPLE_DATA / "chat", "--batch-size", "64")
    assert err == f"warning: {sentence}\n" and run.hyperparameters.batch_size == 64


def test_a_model_named_as_the_model_list_names_it_becomes_its_folder(capsys, models, tmp_path,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder called zyquo-tiny here: the name is looked up
    run, _ = made(capsys, "runs", "new", "--model", "zyquo-tiny", "--data", COMPLETIONS,
                  "--num-layers", "-1")
    assert run.model == str(models["zyquo-tiny"].resolve())
    assert run.name == "zyquo-tiny lora" and run.method is Method.LORA


@pytest.mark.parametrize("model, method, name", [
    ("zyquo-tiny-4bit", None, "zyquo-tiny-4bit qlora"),
    ("zyquo-tiny-4bit", "qlora", "zyquo-tiny-4bit qlora"),
    ("zyquo-tiny-4bit", "lora", "zyquo-tiny-4bit qlora"),
    ("zyquo-tiny-4bit", "dora", "zyquo-tiny-4bit dora"),
    ("zyquo-tiny", "full", "zyquo-tiny full"),
])
def test_the_default_name_says_the_runs_method(capsys, models, model, method, name):
    chosen = ["--method", method] if method else []
    run, _ = made(capsys, "runs", "new", "--model", model, "--data", COMPLETIONS,
                  "--num-layers", "-1", *chosen)
    assert run.name == name and run.method.value == name.split()[-1]


def test_every_setting_has_a_flag_and_the_new_ones_reach_the_config(capsys, on, tmp_path):
    run, _ = made(capsys, "runs", "new", *on, "--optimizer", "adamw", "--weight-decay", "0.05",
                  "--lora-scale", "10", "--lora-dropout", "0.1",
                  "--lora-keys", "self_attn.q_proj,self_attn.v_proj",
                  "--lr-schedule", "cosine_decay", "--lr-schedule-arguments", "1e-4, 500, 0",
                  "--warmup", "20", "--warmup-init", "1e-7", "--grad-checkpoint")
    hp = run.hyperparameters
    assert hp.optimizer_config == {"adamw": {"weight_decay": 0.05}}
    assert hp.lora_parameters == {"rank": 8, "scale": 10.0, "dropout": 0.1,
                                  "keys": ["self_attn.q_proj", "self_attn.v_proj"]}
    assert hp.lr_schedule == {"name": "cosine_decay", "arguments": [1e-4, 500, 0],
                              "warmup": 20, "warmup_init": 1e-7}
    assert hp.grad_checkpoint is True
    exported = yaml.safe_load(dump_mlx_yaml(run_to_mlx_config(run)))
    assert exported["optimizer_config"]["adamw"]["weight_decay"] == 0.05
    assert exported["lora_parameters"]["keys"] == ["self_attn.q_proj", "self_attn.v_proj"]


def test_flags_override_a_config_and_none_removes_its_schedule(capsys, tiny_model, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(f"model: {tiny_model}\ndata: {COMPLETIONS}\nnum_layers: -1\n"
                    "grad_checkpoint: true\nlr_schedule: {name: cosine_decay, arguments: "
                    "[1.0e-5, 100, 0]}\n")
    run, _ = made(capsys, "runs", "new", "--config", path, "--lr-schedule", "none",
                  "--no-grad-checkpoint", "--iters", "50", "--save-every", "25",
                  "--steps-per-eval", "25")
    assert run.hyperparameters.lr_schedule is None
    assert run.hyperparameters.grad_checkpoint is False and run.hyperparameters.iters == 50


@pytest.mark.parametrize("flags, sentence", [
    (["--batch-size", "abc"], "batch_size must be a whole number, not 'abc'."),
    (["--lora-dropout", "1"],
     "lora_parameters.dropout must be from 0 up to (not including) 1, not 1.0."),
    (["--lora-scale", "big"], "lora_parameters.scale must be a number, not 'big'."),
    (["--weight-decay", "0.1"],
     "weight_decay needs an optimizer that has it (adamw, muon, sgd, adafactor), and adam has "
     "none; choose adamw for adam with weight decay."),
    (["--optimizer", "sgd", "--weight-decay", "-1"],
     "weight_decay must be a number of 0 or more, not -1.0."),
    (["--lr-schedule", "cosine_decay", "--lr-schedule-arguments", "1e-5, lots"],
     "lr_schedule.arguments must be numbers separated by commas, not 'lots'."),
    (["--lr-schedule", "wobbly", "--lr-schedule-arguments", "1e-5"],
     "lr_schedule 'wobbly' is unknown; choose one of cosine_decay, linear_schedule, "
     "exponential_decay, step_decay."),
])
def test_a_bad_flag_value_is_refused_with_the_definitions_sentence(capsys, on, flags, sentence):
    assert refused(capsys, "runs", "new", *on, *flags) == f"The run was not created: {sentence}"


@pytest.mark.parametrize("flags, named", [
    (["--warmup", "5"], "--warmup is"),
    (["--lr-schedule", "none", "--warmup", "5", "--warmup-init", "1e-7"],
     "--warmup and --warmup-init are"),
])
def test_a_schedule_part_without_a_schedule_names_the_flag_to_add(capsys, on, flags, named,
                                                                  tmp_path):
    assert refused(capsys, "runs", "new", *on, *flags) == (
        f"The run was not created: {named} part of a learning-rate schedule, and none is set; "
        "add --lr-schedule (cosine_decay, linear_schedule, exponential_decay, step_decay) with "
        "its --lr-schedule-arguments.")
    # A config without a name keeps mlx-lm's words, at the line of its lr_schedule.
    path = tmp_path / "config.yaml"
    path.write_text("iters: 10\nlr_schedule: {warmup: 5}\n")
    sentence = refused(capsys, "runs", "new", *on, "--config", path)
    assert sentence == (f"The run was not created: {path}:2: lr_schedule needs a name and "
                        "arguments, as in mlx-lm's config.")
    # A config's schedule, or the flag, gives the warmup its schedule.
    made(capsys, "runs", "new", *on, "--warmup", "5", "--lr-schedule", "cosine_decay",
         "--lr-schedule-arguments", "1e-5,100")
    path.write_text("lr_schedule: {name: cosine_decay, arguments: [1.0e-5, 100]}\n")
    made(capsys, "runs", "new", *on, "--config", path, "--warmup", "5")


def test_runs_start_makes_the_same_checks_on_a_run_made_before(capsys, tiny_model, tmp_path):
    """A run whose dataset lost rows since it was made: start refuses it with the form's
    sentence, and the run stays configured."""
    data = tmp_path / "shrinking"
    data.mkdir()
    rows = (SAMPLE_DATA / "completions" / "train.jsonl").read_text().splitlines()
    (data / "train.jsonl").write_text("\n".join(rows) + "\n")
    store = RunStore().ensure()
    run = store.create(Run.new(model=str(tiny_model), data=str(data), hyperparameters=
                               Hyperparameters(num_layers=-1, batch_size=8)))
    (data / "train.jsonl").write_text("\n".join(rows[:5]) + "\n")
    status, _, err = cli(capsys, "runs", "start", run.id)
    assert status == 2 and err == (f"zyquo-tui: Run {run.id} cannot start: batch_size 8 is more "
                                   "than the 5 rows of train.jsonl: mlx-lm refuses to train; "
                                   "lower it or add rows.\n")
    assert store.get(run.id).state is RunState.CONFIGURED


def test_the_docs_name_every_settings_flag():
    readme = (REPO / "README.md").read_text()
    cli_doc = (REPO / "docs" / "CLI.md").read_text()
    for setting in SETTINGS.values():
        flag = setting.flag if setting.kind != "bool" else f"--[no-]{setting.flag[2:]}"
        assert f"`{flag}`" in cli_doc, flag
        assert flag in " ".join(readme.split()), flag


def test_a_lora_key_the_model_has_not_is_a_warning_beside_ones_it_has(capsys, on):
    run, err = made(capsys, "runs", "new", *on, "--lora-keys", "self_attn.q_proj,self_attn.qproj")
    assert run.hyperparameters.to_dict()["lora_parameters"]["keys"] == [
        "self_attn.q_proj", "self_attn.qproj"]
    assert "lora_parameters.keys self_attn.qproj is not in zyquo-tiny's layers, so only the " \
        "others get adapters" in err


def test_runs_new_by_epochs_makes_the_iterations_from_the_rows_and_the_batch(capsys, on):
    """225 rows at batch 5 are 45 batches an epoch: --epochs 3 is 135 iterations, stored with
    the epochs, and exported as both (mlx-lm trains the iterations)."""
    run, err = made(capsys, "runs", "new", *on, "--epochs", "3", "--batch-size", "5",
                    "--steps-per-eval", "45")
    assert run.hyperparameters.iters == 135
    assert SETTINGS["epochs"].get(run.hyperparameters) == 3
    assert err == ""  # 225 divides by 5: no row left over, no warning
    exported = yaml.safe_load(dump_mlx_yaml(run_to_mlx_config(run)))
    assert exported["iters"] == 135 and exported["zyquo_tui"]["epochs"] == 3


def test_epochs_that_leave_rows_over_warn_which_batch_sizes_leave_none(capsys, on):
    run, err = made(capsys, "runs", "new", *on, "--epochs", "2", "--steps-per-eval", "56")
    assert run.hyperparameters.iters == 2 * 56
    assert err == ("warning: completions: train.jsonl's 225 rows make 56 whole batches of 4 and "
                   "leave 1 row over (the last in mlx-lm's order): mlx-lm trains whole batches "
                   "only, so it is never trained, in any epoch; a batch_size that divides 225 "
                   "(1, 3, 5, 9) trains every row.\n")


def test_iters_and_epochs_together_are_refused_in_one_sentence(capsys, on):
    assert refused(capsys, "runs", "new", *on, "--epochs", "2", "--iters", "100") == (
        "The run was not created: --iters and --epochs were both given; give one of them "
        "(--epochs N trains N passes over train.jsonl, made into iterations from its rows and "
        "--batch-size).")


@pytest.mark.parametrize("epochs, sentence", [
    ("0", "epochs must be at least 1, not 0."),
    ("two", "epochs must be a whole number, not 'two'."),
])
def test_a_bad_epochs_value_is_refused_with_the_definitions_sentence(capsys, on, epochs,
                                                                     sentence):
    assert refused(capsys, "runs", "new", *on, "--epochs", epochs) == \
        f"The run was not created: {sentence}"


def test_iters_over_a_config_with_epochs_unsets_them(capsys, tiny_model, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(f"model: {tiny_model}\ndata: {COMPLETIONS}\nnum_layers: -1\n"
                    "batch_size: 5\nzyquo_tui:\n  epochs: 2\n")
    by_epochs, _ = made(capsys, "runs", "new", "--config", path)
    assert by_epochs.hyperparameters.iters == 90
    by_iters, _ = made(capsys, "runs", "new", "--config", path, "--iters", "30",
                       "--save-every", "10", "--steps-per-eval", "10")
    assert by_iters.hyperparameters.iters == 30
    assert SETTINGS["epochs"].get(by_iters.hyperparameters) is None
    assert "zyquo_tui" not in run_to_mlx_config(by_iters)


def fp8_model(tiny_model, folder):
    """The sample model's folder with an fp8 quantization_config (as a DeepSeek or Qwen FP8
    release has), a quantization no run trains."""
    import shutil

    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                     "activation_scheme": "dynamic",
                                     "weight_block_size": [128, 128]}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("method", [[], ["--method", "full"], ["--method", "qlora"]],
                         ids=["default", "full", "qlora"])
def test_a_model_quantized_as_fp8_is_refused_at_create(capsys, tiny_model, tmp_path, method):
    model = fp8_model(tiny_model, tmp_path / "tiny-fp8")
    sentence = refused(capsys, "runs", "new", "--model", model, "--data", COMPLETIONS,
                       "--num-layers", "-1", *method)
    assert sentence == (
        "The run was not created: tiny-fp8 is quantized as fp8 (config.json's "
        "quantization_config), which neither QLoRA nor full or LoRA fine-tuning can train "
        "here; use an unquantized copy of the model, or quantize that with `mlx_lm convert "
        "-q`.")


def test_the_draft_and_the_trainer_share_one_quantization_rule(tiny_model, tiny_model_4bit,
                                                               tmp_path):
    """What the draft calls quantized (QLoRA, never full) the trainer calls quantized, and
    what the draft refuses the trainer refuses with the same words: a run made around the
    draft (as an older version stored one) fails at its start, cause config."""
    from conftest import run_trainer
    from helpers import make_run

    from zyquo_tui.core.events.protocol import read_events
    from zyquo_tui.core.library.models import inspect_model, is_quantized
    from zyquo_tui.trainer.loading import check_model_folder

    for folder in (tiny_model, tiny_model_4bit):
        config = json.loads((folder / "config.json").read_text())
        assert is_quantized(config) == (inspect_model(folder).quantization is not None)
        method = Method.QLORA if is_quantized(config) else Method.FULL
        assert check_model_folder(Run.new(model=str(folder), data=COMPLETIONS,
                                          method=method)) == config
    model = fp8_model(tiny_model, tmp_path / "tiny-fp8")
    assert inspect_model(model).untrainable_quantization == "fp8"
    store, run = make_run(model, SAMPLE_DATA / "completions", method="full")
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 1
    failed = read_events(store.run_dir(run.id) / "events.jsonl")[-1]
    assert failed["type"] == "failed" and failed["cause"] == "config", failed
    assert failed["message"] == ("tiny-fp8 is quantized as fp8 (config.json's "
                                 "quantization_config), which neither QLoRA nor full or LoRA "
                                 "fine-tuning can train here.")
