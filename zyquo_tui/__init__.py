"""zyquo-tui: a keyboard-driven terminal dashboard for MLX fine-tuning.

`import zyquo_tui as zq` gives a script the public API (docs/api.md): the run store, runs and
their settings, the RunDraft every run is made through, its verdicts on this machine, the
supervisor that starts and follows runs, and the step-level training client. The names stay
here when the modules behind them move. Each is imported on first use, so `import zyquo_tui`
stays fast and imports mlx only when the training client is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Each public name and the module that defines it.
_PUBLIC = {
    "RunStore": "zyquo_tui.core.store.store",
    "Run": "zyquo_tui.core.runs.run",
    "RunState": "zyquo_tui.core.runs.run",
    "Hyperparameters": "zyquo_tui.core.runs.settings",
    "Method": "zyquo_tui.core.runs.settings",
    "SETTINGS": "zyquo_tui.core.runs.settings",
    "RunDraft": "zyquo_tui.core.setup.draft",
    "plan": "zyquo_tui.core.setup.verdicts",
    "Supervisor": "zyquo_tui.core.processes.supervisor",
    "read_events": "zyquo_tui.core.events.protocol",
    "UserError": "zyquo_tui.core.errors",
    "sample_data_dir": "zyquo_tui.resources",
    "TrainingClient": "zyquo_tui.client",
    "TrainingBatch": "zyquo_tui.client",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'zyquo_tui' has no attribute {name!r}; the public "
                             f"names are {', '.join(_PUBLIC)} (docs/api.md)")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
