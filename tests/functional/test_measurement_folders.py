"""A measurement (trainer/measure.py, in a subprocess) leaves no folder behind, even killed.

Its replica model and its checkpoints go into temporary folders; a process killed with SIGKILL
removes none of its own, so they live in a folder the caller (core/memory/measure.py) owns and
removes. The measuring subprocess is made to stop inside its training loop, its folders
written, until it is killed: a wrapper around the interpreter replaces the loop's `run` with
a wait, so the kill lands there on any machine.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.memory.estimate import TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.measure import measure_peak, measure_replica
from zyquo_tui.core.memory.replica import plan_replica
from zyquo_tui.core.runs.settings import Method

# `python -m zyquo_tui.trainer.measure -` as it is, but its training loop, once reached, says
# so (a file) and waits to be killed.
STALLING_PYTHON = """#!{python}
import os, runpy, sys, time
from zyquo_tui.trainer import loop

def stall(self):
    open(os.environ["ZYQUO_TEST_STALLED"], "w").close()
    time.sleep(600)

loop.TrainingLoop.run = stall
assert sys.argv[1] == "-m"
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.fixture
def temp_root(tmp_path, monkeypatch) -> Path:
    """The system's temporary folder, for this process and its children: an empty one."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.fixture
def stalling_python(tmp_path, monkeypatch) -> tuple[str, Path]:
    """The wrapper interpreter, and the file it makes once the loop is reached."""
    python = tmp_path / "stalling-python"
    python.write_text(STALLING_PYTHON.format(python=sys.executable))
    python.chmod(0o755)
    stalled = tmp_path / "stalled"
    monkeypatch.setenv("ZYQUO_TEST_STALLED", str(stalled))
    return str(python), stalled


def measuring_child() -> psutil.Process:
    children = [c for c in psutil.Process().children(recursive=True)
                if "zyquo_tui.trainer.measure" in " ".join(c.cmdline())]
    assert len(children) == 1, children
    return children[0]


def folders_under(root: Path, prefix: str) -> list[Path]:
    return [p for p in root.rglob(f"{prefix}*") if p.is_dir()]


def ours_left(root: Path) -> list[Path]:
    """What a measurement of ours left in the temporary folder (an installed wandb, imported by
    mlx-lm in every process, leaves folders of its own there, which are not ours to remove)."""
    return [p for p in root.iterdir() if p.name.startswith("zyquo-")]


def test_a_replica_measurement_killed_with_sigkill_leaves_no_folder(tiny_model, temp_root,
                                                                    stalling_python):
    python, stalled = stalling_python
    facts = ModelFacts.from_folder(tiny_model)
    config = TrainingConfig(method=Method.LORA, batch_size=2, max_seq_length=128, num_layers=2,
                            rank=8, longest_row_tokens=128, loss_chunk_tokens="off")
    replica = plan_replica(json.loads((tiny_model / "config.json").read_text()), config)
    assert replica is not None
    seen = {}

    def kill_once_stalled() -> bool:
        """Polled by the wait for the subprocess: SIGKILL it once its folders are there."""
        if stalled.exists() and not seen:
            seen["replicas"] = [(folder / "model.safetensors").is_file()
                                for folder in folders_under(temp_root, "zyquo-replica-")]
            os.kill(measuring_child().pid, signal.SIGKILL)
        return False

    with pytest.raises(UserError, match=f"exit status -{int(signal.SIGKILL)}"):
        measure_replica(str(tiny_model), facts, config, replica, python=python,
                        timeout=300, cancelled=kill_once_stalled)

    assert seen["replicas"] == [True], "the replica was written when the kill came"
    assert ours_left(temp_root) == []


def test_a_measurement_cancelled_while_training_leaves_no_folder(tiny_model, temp_root,
                                                                 stalling_python):
    python, stalled = stalling_python
    config = TrainingConfig(method=Method.LORA, batch_size=2, max_seq_length=64, num_layers=2,
                            rank=8, longest_row_tokens=64, loss_chunk_tokens="off")
    seen = []

    def cancel_once_stalled() -> bool:
        """A screen closing (the dashboard's cancel): the subprocess is killed."""
        if stalled.exists():
            seen.extend(folders_under(temp_root, "zyquo-measure-"))
            return True
        return False

    with pytest.raises(UserError, match="cancelled"):
        measure_peak(str(tiny_model), config, python=python, timeout=300,
                     cancelled=cancel_once_stalled)

    assert seen, "its checkpoints' folder was there when it was cancelled"
    assert ours_left(temp_root) == []
