"""Each run setting is defined once: what the definition says is what the CLI, the form, the
mlx-lm YAML, presets and the memory estimate use."""

from __future__ import annotations

import pytest
from conftest import SAMPLE_DATA
from test_run_settings import changed_defaults  # noqa: F401  (a fixture the tests here take)
from textual.app import App, ComposeResult
from textual.widgets import Input

from zyquo_tui.cli.main import main
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.widgets.hyperparameter_form import (
    HyperparameterForm,
    default_values,
)


def test_a_default_changed_in_the_definition_is_the_cli_default(changed_defaults, tiny_model,
                                                                capsys):
    assert main(["runs", "new", "--model", str(tiny_model), "--data",
                 str(SAMPLE_DATA / "completions"), "--num-layers", "-1"]) == 0
    run = RunStore().get(capsys.readouterr().out.strip())
    assert run.hyperparameters.batch_size == 2
    assert run.hyperparameters.lora_parameters["scale"] == 12.0
    with pytest.raises(SystemExit):
        main(["runs", "new", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(mlx-lm's batch_size; default 2)" in shown
    assert "(mlx-lm's lora_parameters.scale; default 12; LoRA and DoRA only)" in shown
    # every value a setting takes is in its placeholder: auto is loss_chunk_tokens' default
    assert "--loss-chunk-tokens auto|N|off" in shown


class FormOnly(App):
    """The hyperparameter form alone, its advanced group opened."""

    def compose(self) -> ComposeResult:
        yield HyperparameterForm()


async def test_a_default_changed_in_the_definition_is_the_forms_default_and_placeholder(
        changed_defaults):
    assert default_values()["batch_size"] == "2" and default_values()["lora_scale"] == "12"
    app = FormOnly()
    async with app.run_test(size=(120, 40)) as pilot:
        form = app.query_one(HyperparameterForm)
        await form.reveal("lora_scale")
        await pilot.pause()
        assert form.values["max_seq_length"] == "512"
        assert app.query_one("#hp-batch_size", Input).placeholder == "2"
        assert form.row("lora_scale").help_text.endswith("(mlx-lm: 12)")
        assert form.hyperparameters().batch_size == 2
