"""Presets saved as TOML and loaded back equal; a new run like an existing one."""

from __future__ import annotations

import pytest

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.presets import (
    Preset,
    delete_preset,
    list_presets,
    load_preset,
    preset_path,
    save_preset,
)


def test_a_preset_saved_and_reloaded_is_equal(isolated_home):
    hp = Hyperparameters(iters=123, learning_rate=2e-4, grad_checkpoint=True,
                         optimizer="adamw", optimizer_config={"adamw": {"weight_decay": 0.01}},
                         lora_parameters={"rank": 16, "scale": 10.0, "dropout": 0.05,
                                          "keys": ["self_attn.q_proj"]},
                         lr_schedule={"name": "cosine_decay", "arguments": [2e-4, 123, 1e-7],
                                      "warmup": 10})
    preset = Preset("long context", Method.DORA, hp, model="/m", data="/d",
                    extra_config={"prompt_feature": "question", "wandb": "my-project"})
    path = save_preset(preset)
    assert path == isolated_home / "presets" / "long context.toml"
    assert 'learning_rate = 0.0002' in path.read_text()
    assert '[extra_config]' in path.read_text()
    assert load_preset("long context") == preset
    assert list_presets() == ["long context"]
    plain = Preset("plain")  # no lr_schedule (None) and no paths: TOML has no null
    save_preset(plain)
    assert load_preset("plain") == plain
    delete_preset("plain")
    assert list_presets() == ["long context"]


def test_bad_preset_names_and_files_are_clear_errors(isolated_home):
    with pytest.raises(UserError, match="cannot be a preset name"):
        preset_path("../escape")
    with pytest.raises(UserError, match="There is no preset"):
        load_preset("missing")
    save_preset(Preset("broken"))
    (isolated_home / "presets" / "broken.toml").write_text("method = [")
    with pytest.raises(UserError, match="not valid TOML"):
        load_preset("broken")


def test_a_preset_keeps_epochs_and_a_run_from_it_counts_its_own_dataset(isolated_home,
                                                                         tmp_path):
    """The preset holds the epochs, not just the iterations they made: a draft from it on
    another dataset makes that dataset's iterations (its rows at the preset's batch size)."""
    import json

    from zyquo_tui.core.runs.settings import SETTINGS
    from zyquo_tui.core.setup.draft import RunDraft
    from zyquo_tui.resources import sample_data_dir

    made = RunDraft.from_choices(data=str(sample_data_dir() / "completions"),
                                 settings={"epochs": 2, "batch_size": 5})
    assert made.hyperparameters.iters == 90
    save_preset(Preset("two passes", Method.LORA, made.hyperparameters))
    text = (isolated_home / "presets" / "two passes.toml").read_text()
    assert "[hyperparameters.zyquo_tui]\nepochs = 2" in text

    loaded = load_preset("two passes")
    assert SETTINGS["epochs"].get(loaded.hyperparameters) == 2
    small = tmp_path / "small"
    small.mkdir()
    (small / "train.jsonl").write_text("".join(
        json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n" for i in range(30)))
    again = RunDraft.from_choices(data=str(small), hyperparameters=loaded.hyperparameters)
    assert again.hyperparameters.iters == 2 * 6
    assert SETTINGS["epochs"].get(again.hyperparameters) == 2
