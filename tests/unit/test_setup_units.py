"""The setup screens' parts: form values to hyperparameters and back, problems at their
fields, the breakdown bar, and that setting up a run never imports mlx."""

from __future__ import annotations

import pytest

from zyquo_tui.core.library.run_checks import ModelTraits
from zyquo_tui.core.memory.estimate import TERMS
from zyquo_tui.core.runs.problems import Problem
from zyquo_tui.core.runs.settings import (
    SETTINGS,
    Hyperparameters,
    Method,
    form_settings,
)
from zyquo_tui.core.setup.draft import Base, RunDraft
from zyquo_tui.dashboard.widgets.breakdown_bar import (
    legend,
    segment_widths,
    short_bytes,
)
from zyquo_tui.dashboard.widgets.hyperparameter_form import (
    FIELD_KEYS,
    default_values,
    form_values,
    hyperparameters_from,
    schedule_guess,
)


def test_the_form_starts_at_mlx_lm_defaults():
    assert hyperparameters_from(default_values()) == Hyperparameters()


@pytest.mark.parametrize("settings", [
    {"iters": 77, "batch_size": 2, "learning_rate": 3e-4, "num_layers": -1,
     "grad_checkpoint": True, "mask_prompt": True, "optimizer": "adamw",
     "grad_accumulation_steps": 8, "seed": 3, "val_batches": -1,
     "lora_parameters": {"rank": 16, "scale": 10.0, "dropout": 0.05}},
    {"lr_schedule": {"name": "cosine_decay", "arguments": [1e-5, 1000, 1e-7], "warmup": 100,
                     "warmup_init": 1e-7}},
    {"optimizer": "adafactor", "optimizer_config": {"adafactor": {"beta_1": 0.9}}},
    {"lora_parameters": {"keys": ["self_attn.q_proj"]},
     "optimizer": "adamw", "optimizer_config": {"adamw": {"weight_decay": 0.05}}},
])
def test_hyperparameters_survive_the_form(settings):
    hp = Hyperparameters.from_dict(settings)
    assert hyperparameters_from(form_values(hp), base=hp) == hp


def test_an_empty_field_means_mlx_lm_default():
    values = default_values() | {"batch_size": "", "learning_rate": "  ", "rank": ""}
    hp = hyperparameters_from(values)
    assert (hp.batch_size, hp.learning_rate, hp.rank) == (4, 1e-5, 8)


@pytest.mark.parametrize("field, text, sentence", [
    ("batch_size", "abc", "batch_size must be a whole number, not 'abc'."),
    ("batch_size", "0", "batch_size must be at least 1, not 0."),
    ("num_layers", "-2", "num_layers must be at least 1 (or -1), not -2."),
    ("learning_rate", "fast", "learning_rate must be a number, not 'fast'."),
    ("learning_rate", "0", "learning_rate must be greater than 0, not 0.0."),
    ("rank", "0", "rank (lora_parameters.rank) must be at least 1, not 0."),
    ("lora_dropout", "1", "lora_parameters.dropout must be from 0 up to (not including) 1, "
                          "not 1.0."),
])
def test_a_bad_value_is_a_problem_at_its_field_with_its_sentence(field, text, sentence):
    hp = hyperparameters_from(default_values() | {field: text})
    assert hp.problems(Method.LORA) == [Problem(field, sentence)]


def test_warnings_and_model_problems_name_their_fields_too():
    hp = hyperparameters_from(default_values() | {"iters": "50"})
    warnings = hp.problems(Method.LORA)
    assert {p.key for p in warnings} == {"save_every", "steps_per_eval"}
    assert not any(p.is_error for p in warnings)
    tiny = ModelTraits("zyquo-tiny", quantized=False, num_layers=2)
    quantized = ModelTraits("zyquo-tiny-4bit", quantized=True, num_layers=2)
    for method, traits in ((Method.QLORA, tiny), (Method.FULL, quantized)):
        draft = RunDraft(base=Base(traits.name, traits), chosen_method=method,
                         hyperparameters=hp, chosen=frozenset(SETTINGS))
        assert [p.key for p in draft.problems()][-2:] == ["num_layers", "method"]


@pytest.mark.parametrize("values, problem", [
    ({"schedule_arguments": "1e-5, lots"},
     Problem("schedule_arguments", "lr_schedule.arguments must be numbers separated by commas, "
                                   "not 'lots'.")),
    ({"warmup": "-3"},
     Problem("warmup", "warmup must be a whole number of 0 or more, not -3.")),
    ({"warmup": "10", "warmup_init": "slow"},
     Problem("warmup_init", "warmup_init must be a learning rate of 0 or more, not 'slow'.")),
])
def test_a_schedule_field_that_is_wrong_is_a_problem_of_the_definition(values, problem):
    hp = hyperparameters_from(default_values() | {"schedule": "cosine_decay",
                                                  "schedule_arguments": "1e-5, 1000"} | values)
    assert hp.problems(Method.LORA) == [problem]


def test_picking_a_schedule_guesses_its_arguments_from_lr_and_iters():
    assert schedule_guess("cosine_decay", 2e-4, 600) == "0.0002, 600, 0"
    assert schedule_guess("linear_schedule", 2e-4, 600) == "0.0002, 0, 600"
    assert schedule_guess("step_decay", 1e-5, 1000) == "1e-05, 0.5, 250"


def test_every_setting_has_a_label_a_line_of_help_a_flag_and_a_valid_default():
    assert all(s.label and s.help and "\n" not in s.help for s in SETTINGS.values())
    assert len({s.flag for s in SETTINGS.values()}) == len(SETTINGS)
    assert all(s.flag.startswith("--") for s in SETTINGS.values())
    assert FIELD_KEYS == {s.key for s in form_settings()}
    for setting in SETTINGS.values():
        if setting.default is not None:
            assert setting.problems(setting.default) == [], setting.key


def test_breakdown_cells_add_up_and_small_terms_stay_visible():
    cells = segment_widths([500, 300, 150, 50, 5, 0], 1005, 40)
    assert sum(cells) == 40
    assert cells[-1] == 0 and cells[-2] == 0  # 0.5%: below a hundredth
    assert cells[3] >= 1
    assert sum(segment_widths([1, 1, 1], 3, 2)) == 2


def test_the_legend_wraps_between_terms_never_inside_one():
    breakdown = dict.fromkeys(TERMS, 3 << 20)
    text = legend(breakdown, width=26).plain
    lines = text.splitlines()
    assert all(len(line) <= 26 for line in lines)
    assert all(line.startswith("█ ") for line in lines)
    assert "weights 3.0M" in text and "other 3.0M" in text
    assert short_bytes(417 * 1024) == "417K" and short_bytes(3.8 * (1 << 20)) == "3.8M"


def test_a_setup_answer_to_an_older_question_of_its_kind_is_stale():
    """The SetupService's rule: an answer counts only if no newer question of its kind was
    asked since; questions of other kinds do not make it stale."""
    from zyquo_tui.dashboard.setup_service import DatasetValidated, LengthsCounted, SetupService

    service = SetupService(owner=None, sources=None)
    service.asked.update(validate=3, lengths=5)
    assert not service.is_current(DatasetValidated(2, "/data/a", None, "older"))
    assert service.is_current(DatasetValidated(3, "/data/b", None, None))
    assert service.is_current(LengthsCounted(5, ("m", "d"), [7], None))
    assert not service.is_current(LengthsCounted(3, ("m", "d"), [7], None))
