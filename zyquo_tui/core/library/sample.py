"""The sample: a tiny model (and its 4-bit copy) built offline, and the shipped datasets.

The model is built by `python -m zyquo_tui.trainer.sample_model` in a subprocess, since it
needs mlx; this module only starts it and reads what it made.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError
from zyquo_tui.core.store.paths import ensure_dir, models_dir, zyquo_home
from zyquo_tui.core.system.entry_points import SAMPLE_BUILDER, python_command
from zyquo_tui.resources import sample_data_dir

SAMPLE_MODEL = "zyquo-tiny"
SAMPLE_MODEL_4BIT = "zyquo-tiny-4bit"

# A run on the sample that completes in seconds with a visibly falling loss.
SAMPLE_RUN_SETTINGS = {
    "iters": 60,
    "batch_size": 4,
    "learning_rate": 5e-4,
    "num_layers": -1,
    "steps_per_report": 5,
    "steps_per_eval": 20,
    "save_every": 20,
    "val_batches": 5,
}


def sample_model_path(home: Path | None = None, quantized: bool = False) -> Path:
    return models_dir(home) / (SAMPLE_MODEL_4BIT if quantized else SAMPLE_MODEL)


def sample_dataset(kind: str = "completions") -> Path:
    return sample_data_dir() / kind


def sample_exists(home: Path | None = None) -> bool:
    return all((sample_model_path(home, q) / "config.json").is_file() for q in (False, True))


def build_sample(home: Path | None = None, timeout: float = 600.0) -> dict:
    """Build the sample models into $ZYQUO_HOME/models; returns the paths made."""
    target = ensure_dir(models_dir(home or zyquo_home()), "models")
    try:
        done = subprocess.run(
            python_command(SAMPLE_BUILDER, str(target), "--json"),
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"Building the sample model took over {timeout:.0f} s and was stopped.",
                        EXIT_PROBLEMS) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"Building the sample model failed: {last}", done.returncode
                        if done.returncode in (1, 2) else EXIT_PROBLEMS)
    return json.loads(done.stdout)
