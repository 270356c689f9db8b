"""Every door a run's config comes through refuses a wrong value with one sentence, never a
traceback, and stores nothing.

The oracle below (`VALID`) is written from mlx-lm's own config schema (mlx_lm/lora.py
CONFIG_DEFAULTS and how its trainer reads each key), not from our settings definition, so a
key the definition forgets or checks too loosely shows up here as a failure.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from zyquo_tui.cli.main import main
from zyquo_tui.resources import sample_data_dir

# The wrong (and a few right) values every key is tried with.
VALUES: tuple[Any, ...] = (5, "x", [1], {"a": 1}, None, 1.5, True, -1)


def _int(low: int, *allowed: int) -> Callable[[Any], bool]:
    return lambda v: type(v) is int and (v >= low or v in allowed)


def _number(check: Callable[[float], bool]) -> Callable[[Any], bool]:
    return lambda v: type(v) in (int, float) and math.isfinite(v) and check(v)


def _bool(v: Any) -> bool:
    return type(v) is bool


def _text(v: Any) -> bool:
    return type(v) is str and bool(v)


def _choice(*choices: str) -> Callable[[Any], bool]:
    return lambda v: type(v) is str and v in choices


# What each key accepts. `None` (YAML null) means "the default" for every key that has one;
# model and data have none. The tiny sample model has 2 layers and 2,048 positions, and the
# sample data 225 training rows.
VALID: dict[str, Callable[[Any], bool]] = {
    "model": lambda v: False,  # only the real folder is valid: every value tried is wrong
    "data": lambda v: False,
    "train": _bool,
    "test": _bool,
    "fine_tune_type": _choice("lora", "dora", "full"),
    "optimizer": _choice("adam", "adamw", "muon", "sgd", "adafactor"),
    "optimizer_config": lambda v: False,  # a mapping of optimizer names: none tried is one
    "seed": _int(0),
    "num_layers": lambda v: type(v) is int and (1 <= v <= 2 or v == -1),
    "batch_size": _int(1),
    "iters": _int(1),
    "val_batches": _int(1, -1),
    "test_batches": _int(1, -1),
    "learning_rate": _number(lambda v: v > 0),
    "steps_per_report": _int(1),
    "steps_per_eval": _int(1),
    "save_every": _int(1),
    "max_seq_length": _int(1),
    "grad_checkpoint": _bool,
    "grad_accumulation_steps": _int(1),
    "mask_prompt": _bool,
    "clear_cache_threshold": _number(lambda v: v >= 0),
    "lr_schedule": lambda v: False,  # a mapping with a name: none tried is one
    "lora_parameters": lambda v: False,  # a mapping of known keys: none tried is one
    "resume_adapter_file": lambda v: False,  # an existing file: none tried is one
    "adapter_path": _text,
    "config": _text,
    "report_to": _choice("wandb", "swanlab"),
    "project_name": _text,
    "trust_remote_code": _bool,
    "lora_parameters.rank": _int(1),
    "lora_parameters.scale": _number(lambda v: True),
    "lora_parameters.dropout": _number(lambda v: 0 <= v < 1),
    "lora_parameters.keys": lambda v: False,  # a list of layer names: none tried is one
    "lr_schedule.name": _choice("cosine_decay", "linear_schedule", "exponential_decay",
                                "step_decay"),
    "lr_schedule.arguments": lambda v: type(v) is list and bool(v) and all(
        type(a) in (int, float) for a in v),
    "lr_schedule.warmup": _int(0),
    "lr_schedule.warmup_init": _number(lambda v: v >= 0),
}
# Keys that have no default: model and data, and a schedule's name and arguments (the fuzz
# gives a schedule, and one without either is refused).
REQUIRED = {"model", "data", "lr_schedule.name", "lr_schedule.arguments"}


def _accepts(key: str, value: Any) -> bool:
    if value is None:
        return key not in REQUIRED
    return VALID[key](value)


@pytest.fixture(scope="module")
def base_config(sample_models) -> dict[str, Any]:
    return {"model": str(sample_models["zyquo-tiny"]),
            "data": str(sample_data_dir() / "completions"), "iters": 10}


def _with(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    changed = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    if "." in key:
        outer, inner = key.split(".")
        nested = {"name": "cosine_decay", "arguments": [1e-5, 10, 0.0]} \
            if outer == "lr_schedule" else {}
        nested[inner] = value
        changed[outer] = nested
    else:
        changed[key] = value
    return changed


def _call(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        return int(exit_.code or 0)


def _stored_runs(home: Path) -> int:
    runs = home / "runs"
    return sum(1 for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else 0


def test_the_oracle_covers_every_mlx_lm_config_key():
    from mlx_lm.lora import CONFIG_DEFAULTS

    assert set(CONFIG_DEFAULTS) <= set(VALID)


def test_every_key_with_every_wrong_type_through_import_config(base_config, isolated_home,
                                                                tmp_path, capsys):
    assert _call(["runs", "import-config", _write(tmp_path, base_config)]) == 0, \
        capsys.readouterr().err
    capsys.readouterr()
    wrong: list[str] = []
    for key in VALID:
        for value in VALUES:
            before = _stored_runs(isolated_home)
            status = _call(["runs", "import-config", _write(tmp_path, _with(base_config, key,
                                                                            value))])
            err = capsys.readouterr().err
            expected = 0 if _accepts(key, value) else 2
            stored = _stored_runs(isolated_home) - before
            if status != expected or stored != (1 if status == 0 else 0):
                wrong.append(f"{key}={value!r}: exit {status}, stored {stored} "
                             f"(expected {expected}): {err.strip()[:200]}")
            elif status == 2:
                refusal = err.strip()
                if "\n" in refusal or not any(part in refusal for part in key.split(".")):
                    wrong.append(f"{key}={value!r}: the refusal is not one sentence naming "
                                 f"the key: {refusal[:300]!r}")
    assert not wrong, "\n".join(wrong)


def _write(folder: Path, config: dict[str, Any]) -> str:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return str(path)


# Flags take text; each is tried with text that is not of its type or range.
FLAG_VALUES = ("x", "1.5", "-1", "0", "", "nan", "1e400")


def _runs_new_parser():
    from zyquo_tui.cli.main import build_parser

    def subparser(parser, name):
        action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        return action.choices[name]
    return subparser(subparser(build_parser("runs"), "runs"), "new")


def _must_refuse(metavar: str, text: str) -> bool:
    """Text no whole number (N) or no finite number (X) can be: refused whatever the bounds."""
    if text in ("x", "nan", "1e400"):
        return metavar in ("N", "X")
    return metavar == "N" and text == "1.5"


def test_every_runs_new_flag_with_wrong_text(base_config, isolated_home, capsys):
    flags = {a.option_strings[0]: a.metavar for a in _runs_new_parser()._actions
             if a.option_strings and a.type is not None}
    assert {"--batch-size", "--learning-rate", "--rank", "--lora-scale",
            "--lora-dropout", "--weight-decay"} <= set(flags)
    wrong: list[str] = []
    for flag, metavar in flags.items():
        for text in FLAG_VALUES:
            before = _stored_runs(isolated_home)
            status = _call(["runs", "new", "--model", base_config["model"], "--data",
                            base_config["data"], flag, text])
            err = capsys.readouterr().err.strip()
            stored = _stored_runs(isolated_home) - before
            if status not in (0, 2) or (status == 2 and (stored or "\n" in err)) \
                    or (_must_refuse(metavar, text) and status != 2):
                wrong.append(f"{flag} {text!r}: exit {status}, stored {stored}: {err[:200]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("argv, says", [
    (["--model", "/etc"], "/etc has no config.json, so it is not a model folder."),
    (["--model", "{weightless}"], "has no weights (*.safetensors); give a complete MLX model "
                                  "folder."),
    (["--data", "/etc/passwd"], "/etc/passwd is a file, not a dataset folder; give the folder "
                                "that holds train.jsonl."),
])
def test_paths_that_are_not_a_model_or_a_dataset_are_refused(argv, says, base_config,
                                                              isolated_home, tmp_path, capsys):
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    shutil.copy(Path(base_config["model"]) / "config.json", weightless)
    args = {"--model": base_config["model"], "--data": base_config["data"]}
    args[argv[0]] = argv[1].replace("{weightless}", str(weightless))
    status = _call(["runs", "new", *[x for pair in args.items() for x in pair]])
    err = capsys.readouterr().err.strip()
    assert status == 2 and says in err and "\n" not in err
    assert _stored_runs(isolated_home) == 0


def test_a_max_seq_length_beyond_the_model_positions_is_a_warning(base_config, isolated_home,
                                                                   capsys):
    status = _call(["runs", "new", "--model", base_config["model"], "--data",
                    base_config["data"], "--max-seq-length", "4096"])
    err = capsys.readouterr().err
    assert status == 0 and "max_position_embeddings" in err and "2048" in err


def test_a_refused_yaml_value_is_told_at_its_file_and_line(base_config, isolated_home,
                                                            tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(f"model: {base_config['model']}\ndata: {base_config['data']}\n"
                    "iters: 10\nlora_parameters:\n  rank: 4\n  alpha: 16\n", encoding="utf-8")
    assert _call(["runs", "import-config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"zyquo-tui: {path}:4: lora_parameters has no alpha")
    assert "rank, scale, dropout, keys" in err and _stored_runs(isolated_home) == 0
    path.write_text(path.read_text().replace("  alpha: 16\n", "grad_checkpoint: 'x'\n"))
    assert _call(["runs", "import-config", str(path)]) == 2
    assert f"{path}:6: grad_checkpoint must be true or false, not 'x'." in \
        capsys.readouterr().err


def test_null_means_the_default_and_a_decimal_may_be_written_as_text(base_config, isolated_home,
                                                                      tmp_path, capsys):
    import json

    path = tmp_path / "run.yaml"
    path.write_text(f"model: {base_config['model']}\ndata: {base_config['data']}\n"
                    "iters: 10\nbatch_size: null\nlearning_rate: '2e-4'\n"
                    "lora_parameters: {rank: null, scale: 10}\n", encoding="utf-8")
    assert _call(["runs", "import-config", str(path), "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["id"]
    record = json.loads((isolated_home / "runs" / run_id / "run.json").read_text())
    hp = record["hyperparameters"]
    assert hp["batch_size"] == 4 and hp["learning_rate"] == 2e-4
    assert hp["lora_parameters"]["rank"] == 8 and hp["lora_parameters"]["scale"] == 10


def test_a_preset_with_a_wrong_shape_is_refused_in_one_sentence(isolated_home):
    from zyquo_tui.core.errors import UserError
    from zyquo_tui.core.store.presets import load_preset, preset_path

    path = preset_path("broken")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('name = "broken"\nmethod = "lora"\n[hyperparameters]\nlora_parameters = 5\n')
    with pytest.raises(UserError) as refused:
        load_preset("broken")
    assert refused.value.message == (f"{path}: lora_parameters must map rank, scale, dropout, "
                                     "keys to their values, as in mlx-lm's config, not 5.")


def test_the_optimizer_arguments_are_the_installed_mlx_classes_own():
    """The keys optimizer_config.NAME may hold are what MLX's class takes (beside
    learning_rate, which mlx-lm passes): a newer MLX that adds or drops one fails here."""
    import inspect

    import mlx.optimizers as optimizers

    from zyquo_tui.core.runs.config_keys import OPTIMIZER_ARGUMENTS

    classes = {"adam": optimizers.Adam, "adamw": optimizers.AdamW, "sgd": optimizers.SGD,
               "muon": optimizers.Muon, "adafactor": optimizers.Adafactor}
    for name, cls in classes.items():
        taken = set(inspect.signature(cls.__init__).parameters) - {"self", "learning_rate"}
        assert set(OPTIMIZER_ARGUMENTS[name]) == taken, name


@pytest.mark.parametrize("optimizer, settings, sentence", [
    ("adam", "{bogus: 1}", "optimizer_config.adam has no bogus; its keys are betas, eps, "
                           "bias_correction."),
    ("adam", "{betas: 3}", "optimizer_config.adam.betas must be two numbers ([a, b]), not 3."),
    ("sgd", "{nesterov: 'yes'}", "optimizer_config.sgd.nesterov must be true or false, not "
                                 "'yes'."),
    ("adamw", "{learning_rate: 0.1}", "optimizer_config.adamw.learning_rate is set by "
                                      "learning_rate (or lr_schedule); move it there."),
])
def test_an_optimizer_setting_its_class_would_refuse_is_refused_when_the_run_is_made(
        base_config, isolated_home, tmp_path, capsys, optimizer, settings, sentence):
    """It used to be stored and fail at start ("unexpected keyword argument")."""
    path = tmp_path / "run.yaml"
    path.write_text(f"model: {base_config['model']}\ndata: {base_config['data']}\n"
                    f"iters: 10\noptimizer: {optimizer}\noptimizer_config:\n"
                    f"  {optimizer}: {settings}\n", encoding="utf-8")
    assert _call(["runs", "import-config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"zyquo-tui: {path}:") and err.endswith(sentence), err
    assert _stored_runs(isolated_home) == 0
