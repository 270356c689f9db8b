"""Which settings differ between runs: the comparison's first question ("what did I change?").

A run's settings are its method, model and dataset, every setting of the one definition
(core/runs/settings.py SETTINGS, by key) and the mlx-lm keys it passes through unchanged. A
setting the method does not use (LoRA's rank in a full fine-tune) has no value (None).
"""

from __future__ import annotations

from typing import Any

from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import SETTINGS


def run_settings(run: Run) -> dict[str, Any]:
    """Every setting of the run by key, in the definition's order."""
    values: dict[str, Any] = {"method": run.method.value, "model": run.model, "data": run.data}
    for key, setting in SETTINGS.items():
        values[key] = setting.get(run.hyperparameters) if setting.applies_to(run.method) \
            else None
    for key, value in run.extra_config.items():
        values.setdefault(key, value)
    return values


def setting_differences(runs: list[Run]) -> dict[str, list[Any]]:
    """The settings whose values are not the same in every run: {key: [value of each run]}."""
    each = [run_settings(run) for run in runs]
    keys: list[str] = []
    for values in each:
        keys += [key for key in values if key not in keys]
    found = {}
    for key in keys:
        column = [values.get(key) for values in each]
        if any(value != column[0] for value in column[1:]):
            found[key] = column
    return found
