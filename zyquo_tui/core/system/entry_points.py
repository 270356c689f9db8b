"""Every module zyquo-tui runs in a child process (`python -m MODULE ...`), named once.

A module name spelled in two places drifts apart the day one of them moves; here each has one
entry, and `python_command` builds the argv that starts it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EntryPoint:
    """A module one zyquo-tui process starts in another with `python -m`, and what it does."""

    module: str
    does: str


TRAINER = EntryPoint("zyquo_tui.trainer", "trains one run (RUN_DIR), writing its events")
PROBE = EntryPoint("zyquo_tui.trainer.probe", "prints what MLX sees on this machine, as JSON")
MEASURE = EntryPoint("zyquo_tui.trainer.measure",
                     "measures the peak memory of a few real training steps of a config")
TOKEN_STATS = EntryPoint("zyquo_tui.trainer.token_stats",
                         "counts a dataset's tokens with a model's tokenizer")
SAMPLE_BUILDER = EntryPoint("zyquo_tui.trainer.sample_model", "builds the sample models")
RUNNER = EntryPoint("zyquo_tui.core.processes.runner",
                    "runs the queue, detached from the process that started it")
TRY_GENERATE = EntryPoint("zyquo_tui.trainer.generate",
                          "answers prompts with a run's adapter and with its base model")
EVALUATE = EntryPoint("zyquo_tui.trainer.evaluate",
                      "evaluates a run's adapter and its base model on rows with answers")
EXPORTER = EntryPoint("zyquo_tui.trainer.export",
                      "fuses a run's adapter into its model and checks the result (a job)")
GGUF_IMPORTER = EntryPoint("zyquo_tui.trainer.gguf_import",
                           "imports a GGUF file (LM Studio, Ollama) as an MLX model folder")
FILE_WORKER = EntryPoint("zyquo_tui.core.system.file_workers",
                         "works on one byte range of a file for its parent")

TINKER_SERVER = EntryPoint("zyquo_tui.server",
                           "serves the Tinker API (`zyquo-tui serve`): trains and samples for "
                           "tinker programs")

CLI = EntryPoint("zyquo_tui.__main__",
                 "the zyquo-tui command (the boot service runs `runs recover` with it)")

ENTRY_POINTS = (TRAINER, PROBE, MEASURE, TOKEN_STATS, SAMPLE_BUILDER, RUNNER, FILE_WORKER,
                TRY_GENERATE, EVALUATE, EXPORTER, TINKER_SERVER, GGUF_IMPORTER, CLI)

# The folder that holds the zyquo_tui package this process runs.
_PACKAGE_PARENT = Path(__file__).resolve().parents[3]


def python_command(entry: EntryPoint, *args: str, python: str | None = None) -> list[str]:
    """The argv that runs `entry` with `args` (by this interpreter unless `python` is given)."""
    return [python or sys.executable, "-m", entry.module, *args]


def usage(entry: EntryPoint) -> str:
    """How the entry point is invoked, for its own usage line."""
    return f"python -m {entry.module}"


def same_package_environment(**overrides: str) -> dict[str, str]:
    """This process's environment, with PYTHONPATH leading to this very zyquo_tui package
    (so a child runs the same code even from a source folder that is not installed)."""
    environment = dict(os.environ, **overrides)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(_PACKAGE_PARENT), os.environ.get("PYTHONPATH")]))
    return environment
