"""Shared fixtures: an isolated store per test, and the sample model built once per session."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE_DATA = REPO / "sample_data"


@pytest.fixture(scope="session")
def machine_probe(tmp_path_factory) -> Path:
    """This machine's real MLX probe, run once: the cache file the memory budget keeps."""
    from zyquo_tui.core.memory.budget import PROBE_CACHE_FILE, machine_budget

    home = tmp_path_factory.mktemp("probe-home")
    machine_budget(home)
    return home / PROBE_CACHE_FILE


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch, machine_probe) -> Path:
    """Every test gets its own $ZYQUO_HOME; the user's own store is never touched.

    The machine probe's cache is copied in, as a second run on the same machine would find it.
    """
    home = tmp_path / "zyquo-home"
    home.mkdir(mode=0o700)
    if machine_probe.exists():
        shutil.copy(machine_probe, home / machine_probe.name)
    monkeypatch.setenv("ZYQUO_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hf-cache"))
    monkeypatch.setenv("NO_COLOR", "1")
    return home


@pytest.fixture(scope="session")
def sample_models(tmp_path_factory) -> dict[str, Path]:
    """The tiny sample model and its 4-bit copy, built once for the whole session."""
    target = tmp_path_factory.mktemp("models")
    done = subprocess.run(
        [sys.executable, "-m", "zyquo_tui.trainer.sample_model", str(target), "--json"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, check=True,
    )
    made = json.loads(done.stdout)
    return {name: Path(path) for name, path in made["models"].items()}


@pytest.fixture
def tiny_model(sample_models) -> Path:
    return sample_models["zyquo-tiny"]


@pytest.fixture
def tiny_model_4bit(sample_models) -> Path:
    return sample_models["zyquo-tiny-4bit"]


def run_trainer(run_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real trainer subprocess, to the end."""
    return subprocess.run(
        [sys.executable, "-m", "zyquo_tui.trainer", str(run_dir)],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def start_trainer(run_dir: Path) -> subprocess.Popen:
    log = open(run_dir / "trainer.log", "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "zyquo_tui.trainer", str(run_dir)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def wait_for_event(run_dir: Path, predicate, timeout: float = 120.0) -> dict:
    """Poll events.jsonl until an event satisfies `predicate`; return it."""
    from zyquo_tui.core.events.protocol import EventReader

    reader = EventReader(run_dir / "events.jsonl")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in reader.read_new():
            if predicate(event):
                return event
        time.sleep(0.02)
    raise AssertionError(f"no matching event in {run_dir} within {timeout} s")


def kill_quietly(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def our_processes(marker: str) -> list:
    """Trainer and runner processes whose command line mentions `marker` (a temp path)."""
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if marker in cmdline and ("zyquo_tui.trainer" in cmdline
                                  or "zyquo_tui.core.processes.runner" in cmdline):
            found.append(process)
    return found


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind(tmp_path_factory):
    """After the whole suite, no trainer or runner started by a test may still be running."""
    base = str(tmp_path_factory.getbasetemp())
    yield
    deadline = time.monotonic() + 30
    while our_processes(base) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = our_processes(base)
    for process in left:
        process.kill()
    assert not left, f"processes left running after the tests: {[p.pid for p in left]}"


def zyquo_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real `zyquo-tui` command line, as a subprocess."""
    return subprocess.run([sys.executable, "-m", "zyquo_tui", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def models(isolated_home, sample_models):
    """The sample models copied into the test's $ZYQUO_HOME/models, where discovery finds
    them (the setup screens' tests)."""
    from test_setup_helpers import install_models

    return install_models(isolated_home, sample_models)


@pytest.fixture
def fixed_paths_turn():
    """Snapshot tests draw a store at a fixed path in /tmp (the path is on screen). Two test
    runs at once on one machine take turns at it, instead of clearing each other's files."""
    with open("/tmp/zyquo-tui-snapshots.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory, sample_models) -> dict[str, Path]:
    """A LoRA run of the float sample and a QLoRA run of the 4-bit one, trained once for the
    session (40 steps, checkpoints at 10, 20, 30 and 40): their run folders, in a store of
    their own. Copy one into a test's store with `copy_run` (helpers.py)."""
    from helpers import make_run

    from zyquo_tui.core.store.store import RunStore

    home = tmp_path_factory.mktemp("trained-home")
    folders = {}
    for key, model, method in (("float", sample_models["zyquo-tiny"], "lora"),
                               ("4bit", sample_models["zyquo-tiny-4bit"], "qlora")):
        store, run = make_run(model, SAMPLE_DATA / "completions", method=method,
                              store=RunStore(home))
        done = run_trainer(store.run_dir(run.id))
        assert done.returncode == 0, done.stderr
        folders[key] = store.run_dir(run.id)
    return folders


def cancel_mid_run_then_resume(store, run_id: str, at_least: int, before: int) -> int:
    """Start the run's trainer, SIGTERM it once it has reported step `at_least`, check it
    saved a checkpoint short of `before`, then resume from it to the end; returns the step it
    stopped at."""
    from zyquo_tui.core.events.protocol import read_events

    run_dir = store.run_dir(run_id)
    trainer = start_trainer(run_dir)
    try:
        wait_for_event(run_dir, lambda e: e["type"] == "train" and e["iteration"] >= at_least)
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(timeout=60) == 0
    finally:
        kill_quietly(trainer)
    stopped_at = read_events(run_dir / "events.jsonl")[-1]["checkpoint"]
    assert at_least <= stopped_at < before, "the cancel must land mid-run to mean anything"
    store.update(run_id, lambda r: setattr(r, "resume_from_step", stopped_at))
    assert run_trainer(run_dir).returncode == 0
    return stopped_at
