"""What each key of an mlx-lm config may hold, checked before a config becomes a run.

A config comes from a YAML file (`runs new --config`, `runs import-config`) or a preset, often
hand-edited or written for another mlx-lm version. The run settings' own values are checked by
their definition (core/runs/settings.py); this module checks what the definition cannot see in
a raw mapping, the same way for every door:

- `null` means the default, for every key that has one (mlx-lm's own CONFIG_DEFAULTS write
  `lr_schedule: null` and `resume_adapter_file: null` that way); it is dropped here.
- lora_parameters, lr_schedule and optimizer_config must be mappings, and a key inside them
  that mlx-lm does not know is refused with the list of known ones.
- mlx-lm's keys that are not run settings (train, test, test_batches, ...) are
  checked by type and kept, as are unknown top-level keys (a newer mlx-lm's keys keep working).
- Numbers are never read from strings, with one exception: a string that reads as a number is
  taken for a decimal setting (learning_rate: "1e-5"), since YAML 1.1 and mlx-lm's own loader
  disagree about `1e-5` and configs written by hand carry both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from zyquo_tui.core.runs.problems import ERROR, Problem
from zyquo_tui.core.runs.settings import FLOAT, OPTIMIZERS, OWN_KEY, SETTINGS
from zyquo_tui.core.runs.value_checks import (
    NumberFromZero,
    OneOf,
    TrueOrFalse,
    WholeNumber,
    number_from_text,
)

FINE_TUNE_TYPES = ("lora", "dora", "full")


def _text(called: str, value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, str) or not value.strip():
        return [(ERROR, f"{called} must be text, not {value!r}.")]
    return []


def _existing_file(called: str, value: Any) -> list[tuple[str, str]]:
    found = _text(called, value)
    if not found and not Path(value).expanduser().is_file():
        found = [(ERROR, f"{called} {value!r} is no file; give the path of an adapter file "
                         "(adapters.safetensors).")]
    return found


# mlx-lm's keys that are not run settings: what each may hold. model and data are checked as
# a model folder and a dataset folder when the run is made (core/library/run_checks.py).
OTHER_MLX_LM_KEYS: dict[str, Callable[[str, Any], list[tuple[str, str]]]] = {
    "model": _text,
    "data": _text,
    "fine_tune_type": OneOf(FINE_TUNE_TYPES),
    "train": TrueOrFalse(),
    "test": TrueOrFalse(),
    "test_batches": WholeNumber(also=(-1,)),
    "clear_cache_threshold": NumberFromZero(),
    "adapter_path": _text,
    "resume_adapter_file": _existing_file,
    "config": _text,
    "trust_remote_code": TrueOrFalse(),
}

# The keys mlx-lm knows inside its nested settings.
NESTED_KEYS = {
    top: tuple(s.name.split(".")[1] for s in SETTINGS.values()
               if s.name.split(".")[0] == top and len(s.name.split(".")) == 2)
    for top in ("lora_parameters", "lr_schedule", OWN_KEY)
}


def _drop_nulls(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if value is not None}


def _decimal_from_text(value: Any) -> Any:
    if isinstance(value, str):
        number = number_from_text(value)
        if number is not None:
            return float(number)
    return value


def normalize_config(config: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """The config with nulls dropped and decimal strings read, and the problems of its shape
    (see the module docstring). Each problem's key is the mlx-lm key it is about."""
    found: list[Problem] = []
    config = _drop_nulls(config)
    decimals = {s.name for s in SETTINGS.values() if s.kind == FLOAT}
    for key in list(config):
        if key in decimals:
            config[key] = _decimal_from_text(config[key])
        check = OTHER_MLX_LM_KEYS.get(key)
        if check is not None:
            found += [Problem(key, sentence, severity)
                      for severity, sentence in check(key, config[key])]
    for top, known in NESTED_KEYS.items():
        if top not in config:
            continue
        nested = config[top]
        if not isinstance(nested, dict):
            found.append(Problem(top, f"{top} must map {', '.join(known)} to their values, as "
                                      f"in mlx-lm's config, not {nested!r}."))
            continue
        nested = _drop_nulls(nested)
        unknown = sorted(str(key) for key in nested if key not in known)
        if unknown:
            found.append(Problem(top, f"{top} has no {', '.join(unknown)}; its keys are "
                                      f"{', '.join(known)}."))
        for key in list(nested):
            if f"{top}.{key}" in decimals:
                nested[key] = _decimal_from_text(nested[key])
        config[top] = nested
    if "optimizer_config" in config:
        found += _optimizer_config_problems(config["optimizer_config"])
        if isinstance(config["optimizer_config"], dict):  # an optimizer's null: its defaults
            config["optimizer_config"] = {name: {} if settings is None else settings
                                          for name, settings in config["optimizer_config"].items()}
    return config, found


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _two_numbers(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(map(_number, value))


# What each optimizer's MLX class takes beside learning_rate (which mlx-lm passes itself, from
# learning_rate or the schedule), and what each value must be. mlx-lm passes
# optimizer_config[optimizer] to the class as keyword arguments, so a key the class does not
# take, or a value it cannot use, would fail only when the run starts. tests/functional/test_config_fuzz.py
# checks these names against the installed MLX's signatures.
_NUMBER = ("a number", _number)
_BOOL = ("true or false", lambda v: isinstance(v, bool))
_PAIR = ("two numbers ([a, b])", _two_numbers)
OPTIMIZER_ARGUMENTS: dict[str, dict[str, tuple[str, Any]]] = {
    "adam": {"betas": _PAIR, "eps": _NUMBER, "bias_correction": _BOOL},
    "adamw": {"betas": _PAIR, "eps": _NUMBER, "weight_decay": _NUMBER, "bias_correction": _BOOL},
    "sgd": {"momentum": _NUMBER, "weight_decay": _NUMBER, "dampening": _NUMBER,
            "nesterov": _BOOL},
    "muon": {"momentum": _NUMBER, "weight_decay": _NUMBER, "nesterov": _BOOL,
             "ns_steps": ("a whole number", lambda v: isinstance(v, int)
                          and not isinstance(v, bool))},
    "adafactor": {"eps": _PAIR, "clip_threshold": _NUMBER, "decay_rate": _NUMBER,
                  "beta_1": ("a number or null", lambda v: v is None or _number(v)),
                  "weight_decay": _NUMBER, "scale_parameter": _BOOL, "relative_step": _BOOL,
                  "warmup_init": _BOOL},
}


def _optimizer_arguments_problem(name: str, settings: dict[str, Any]) -> Problem | None:
    """The first key of optimizer_config.NAME its MLX class would refuse, in one sentence."""
    taken = OPTIMIZER_ARGUMENTS[name]
    for key, value in settings.items():
        if key == "learning_rate":
            return Problem("optimizer_config", f"optimizer_config.{name}.learning_rate is "
                                               "set by learning_rate (or lr_schedule); move it "
                                               "there.")
        if key not in taken:
            return Problem("optimizer_config", f"optimizer_config.{name} has no {key}; its "
                                               f"keys are {', '.join(taken)}.")
        wanted, accepts = taken[key]
        if not accepts(value):
            return Problem("optimizer_config", f"optimizer_config.{name}.{key} must be "
                                               f"{wanted}, not {value!r}.")
    return None


def _optimizer_config_problems(value: Any) -> list[Problem]:
    if not isinstance(value, dict):
        return [Problem("optimizer_config", f"optimizer_config must map optimizer names to "
                                            f"their settings, not {value!r}.")]
    unknown = sorted(str(name) for name in value if name not in OPTIMIZERS)
    if unknown:
        return [Problem("optimizer_config", f"optimizer_config has no {', '.join(unknown)}; "
                                            f"its keys are {', '.join(OPTIMIZERS)}.")]
    for name, settings in value.items():
        if settings is not None and not (isinstance(settings, dict)
                                         and all(isinstance(k, str) for k in settings)):
            return [Problem("optimizer_config", f"optimizer_config.{name} must map {name}'s "
                                                f"settings to values, not {settings!r}.")]
        problem = _optimizer_arguments_problem(name, settings or {})
        if problem is not None:
            return [problem]
    return []
