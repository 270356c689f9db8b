"""Each run setting is defined once: what the definition says is what the CLI, the form, the
mlx-lm YAML, presets and the memory estimate use."""

from __future__ import annotations

import dataclasses

import pytest

from zyquo_tui.cli.main import main
from zyquo_tui.core.memory.estimate import TrainingConfig
from zyquo_tui.core.runs.mlx_config import choices_from_mlx_config, run_to_mlx_config
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method
from zyquo_tui.core.store.presets import Preset, load_preset, save_preset


@pytest.fixture
def changed_defaults(monkeypatch):
    """The definition with other defaults: batch_size 2, LoRA scale 12 and Max seq length 512."""
    for key, default in (("batch_size", 2), ("lora_scale", 12.0), ("max_seq_length", 512)):
        monkeypatch.setitem(SETTINGS, key, dataclasses.replace(SETTINGS[key], default=default))


def test_a_default_changed_in_the_definition_is_in_the_yaml_and_the_presets(changed_defaults):
    config = run_to_mlx_config(Run.new(model="/models/m", data="/data/d"))
    assert config["batch_size"] == 2 and config["lora_parameters"]["scale"] == 12.0
    imported, _ = choices_from_mlx_config({"model": "/models/m", "data": "/data/d"})
    assert imported.hyperparameters.batch_size == 2
    path = save_preset(Preset("plain"))
    assert "batch_size = 2" in path.read_text()
    path.write_text('name = "plain"\nmethod = "lora"\n')  # a preset that names no settings
    assert load_preset("plain").hyperparameters.max_seq_length == 512


def test_a_default_changed_in_the_definition_is_the_memory_estimates(changed_defaults):
    assert (TrainingConfig().batch_size, TrainingConfig().max_seq_length) == (2, 512)
    config = TrainingConfig.from_hyperparameters(Method.LORA, Hyperparameters())
    assert (config.batch_size, config.max_seq_length) == (2, 512)


def test_a_check_changed_in_the_definition_checks_everywhere(monkeypatch):
    from zyquo_tui.core.runs.value_checks import WholeNumber

    monkeypatch.setitem(SETTINGS, "batch_size",
                        dataclasses.replace(SETTINGS["batch_size"], check=WholeNumber(8)))
    assert [p.sentence for p in Hyperparameters(batch_size=4).problems()] == [
        "batch_size must be at least 8, not 4."]
    assert [p.sentence for p in TrainingConfig(batch_size=4).problems()] == [
        "batch_size must be at least 8, not 4."]


def test_the_dataclasses_name_every_setting_where_mlx_lm_has_it():
    hp = Hyperparameters()
    for setting in SETTINGS.values():
        assert setting.get(hp) == setting.default, setting.key
    SETTINGS["lora_keys"].set(hp, ["self_attn.q_proj"])
    SETTINGS["warmup"].set(hp, 10)
    assert hp.lora_parameters["keys"] == ["self_attn.q_proj"]
    assert hp.lr_schedule == {"warmup": 10}
    hp.optimizer = "sgd"
    SETTINGS["weight_decay"].set(hp, 0.1)
    assert hp.optimizer_config == {"sgd": {"weight_decay": 0.1}}


def test_epochs_is_zyquo_tuis_own_setting_beside_iters_in_the_flags_and_the_form(capsys):
    keys = list(SETTINGS)
    assert keys.index("epochs") == keys.index("iters") + 1  # the flags' and the form's order
    epochs = SETTINGS["epochs"]
    assert (epochs.own, epochs.name, epochs.group, epochs.in_form) == (
        True, "zyquo_tui.epochs", "basic", True)
    with pytest.raises(SystemExit):
        main(["runs", "new", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--epochs N passes over train.jsonl, made into iterations from its rows and the " \
           "batch size; unset, iterations decide (zyquo-tui's zyquo_tui.epochs; default " \
           "unset)" in shown
