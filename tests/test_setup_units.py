"""The setup screens' parts: form values to hyperparameters and back, problems at their
fields, the breakdown bar, and that setting up a run never imports mlx."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from zyquo_tui.core.memory.estimate import TERMS
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.dashboard.widgets.breakdown_bar import legend, segment_widths, short_bytes
from zyquo_tui.dashboard.widgets.hyperparameter_form import (
    FIELDS,
    default_values,
    field_of,
    form_values,
    hyperparameters_from,
    schedule_guess,
)

REPO = Path(__file__).resolve().parent.parent


def test_the_form_starts_at_mlx_lm_defaults():
    hp, local = hyperparameters_from(default_values())
    assert hp == Hyperparameters() and local == {}


@pytest.mark.parametrize("settings", [
    {"iters": 77, "batch_size": 2, "learning_rate": 3e-4, "num_layers": -1,
     "grad_checkpoint": True, "mask_prompt": True, "optimizer": "adamw",
     "grad_accumulation_steps": 8, "seed": 3, "val_batches": -1,
     "lora_parameters": {"rank": 16, "scale": 10.0, "dropout": 0.05}},
    {"lr_schedule": {"name": "cosine_decay", "arguments": [1e-5, 1000, 1e-7], "warmup": 100,
                     "warmup_init": 1e-7}},
    {"optimizer": "adafactor", "optimizer_config": {"adafactor": {"beta_1": 0.9}}},
])
def test_hyperparameters_survive_the_form(settings):
    hp = Hyperparameters.from_dict(settings)
    again, local = hyperparameters_from(form_values(hp), base=hp)
    assert again == hp and local == {}


def test_an_empty_field_means_mlx_lm_default():
    values = default_values() | {"batch_size": "", "learning_rate": "  ", "rank": ""}
    hp, _ = hyperparameters_from(values)
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
def test_a_bad_value_is_marked_at_its_field_with_the_problems_sentence(field, text, sentence):
    hp, _ = hyperparameters_from(default_values() | {field: text})
    errors, _ = hp.problems(Method.LORA)
    assert sentence in errors
    assert field_of(sentence) == field


def test_warnings_and_model_problems_find_their_fields_too():
    hp, _ = hyperparameters_from(default_values() | {"iters": "50"})
    _, warnings = hp.problems(Method.LORA)
    assert {field_of(w) for w in warnings} == {"save_every", "steps_per_eval"}
    assert field_of("num_layers is 16, but zyquo-tiny has only 2 layers; use -1 ...") == \
        "num_layers"
    assert field_of("full fine-tuning needs an unquantized model, and x is quantized") == \
        "method"
    assert field_of("qlora needs a quantized base model, and x is not quantized") == "method"


def test_schedule_arguments_that_are_not_numbers_are_the_forms_own_problem():
    values = default_values() | {"schedule": "cosine_decay", "schedule_arguments": "1e-5, lots"}
    _, local = hyperparameters_from(values)
    assert local == {"schedule_arguments": "lr_schedule.arguments must be numbers separated "
                                           "by commas, not 'lots'."}


def test_picking_a_schedule_guesses_its_arguments_from_lr_and_iters():
    assert schedule_guess("cosine_decay", 2e-4, 600) == "0.0002, 600, 0"
    assert schedule_guess("linear_schedule", 2e-4, 600) == "0.0002, 0, 600"
    assert schedule_guess("step_decay", 1e-5, 1000) == "1e-05, 0.5, 250"


def test_every_field_has_a_label_and_a_line_of_help():
    assert all(spec.label and spec.help and "\n" not in spec.help for spec in FIELDS)
    assert len({spec.key for spec in FIELDS}) == len(FIELDS)


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


SESSION = r"""
import asyncio, sys
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.notify import NotificationSettings
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen

async def main():
    app = ZyquoApp(notifications=NotificationSettings(desktop="off", bell=False))
    async with app.run_test(size=(100, 30)) as pilot:
        for keys in (["n"], ["escape", "M"], ["escape", "D"], ["escape", "m"], ["escape"]):
            await pilot.press(*keys)
            await pilot.pause(0.5)
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("mlx", "mlx_lm")))

asyncio.run(main())
"""


def test_setting_up_a_run_never_imports_mlx(isolated_home):
    done = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
