"""The disk: a verdict before a run starts, a floor the trainer stops at, saves that fail whole.

The small filesystem is a real tmpfs of a few MiB (mounting needs root); where mounting is
impossible the verdict is checked against a fake free space, and the trainer's tests skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import (
    SAMPLE_DATA,
    hold_trainers_at,
    release,
    run_trainer,
    wait_until_held,
    zyquo_cli,
)
from helpers import losses_by_iteration, make_run

from zyquo_tui.cli.main import main as cli_main
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.processes.supervisor import Supervisor
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.checkpoints import list_checkpoints
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system import disk_space

COMPLETIONS = SAMPLE_DATA / "completions"
MIB = 1 << 20
SETTINGS = dict(iters=120, steps_per_report=1, save_every=4, steps_per_eval=1000)


def mount_tmpfs(where: Path, size_mib: int) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700",
                           "tmpfs", str(where)], capture_output=True, check=False)
    return done.returncode == 0


@pytest.fixture
def small_store(tmp_path, isolated_home, monkeypatch, request):
    """A store on a tmpfs of `size_mib` (a parametrized fixture argument, 24 by default) with
    a 1 MiB floor; yields the store, or None where nothing can be mounted."""
    size = getattr(request, "param", 24)
    mount = tmp_path / "small-disk"
    if not mount_tmpfs(mount, size):
        yield None
        return
    try:
        home = mount / "home"
        home.mkdir(mode=0o700)
        for cached in isolated_home.glob("*.json"):  # the machine probe: no second probe
            shutil.copy(cached, home / cached.name)
        (home / "config.toml").write_text(f"[disk]\nfloor_bytes = {MIB}\n")
        monkeypatch.setenv("ZYQUO_HOME", str(home))
        yield RunStore(home).ensure()
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(store: RunStore, leave: int) -> Path:
    """A ballast file that leaves `leave` bytes free on the store's disk."""
    ballast = store.home / "ballast"
    free = disk_space.free_bytes(store.home)
    with open(ballast, "wb") as handle:
        handle.write(b"\0" * max(free - leave, 0))
    return ballast


def wait_state(supervisor: Supervisor, run_id: str, timeout: float = 300):
    return asyncio.run(supervisor.wait(run_id, timeout=timeout))


def plan_json(capsys, *args) -> tuple[int, dict]:
    status = cli_main(["plan", *args, "--json", "--no-replica"])
    return status, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("small_store", [4], indirect=True)
def test_plan_on_a_small_disk_says_a_full_fine_tune_wont_fit(small_store, tiny_model, capsys,
                                                             monkeypatch, isolated_home):
    if small_store is None:  # no mount here: the same question against a fake free space
        (isolated_home / "config.toml").write_text(f"[disk]\nfloor_bytes = {MIB}\n")
        monkeypatch.setattr(disk_space.os, "statvfs", lambda path: os.statvfs_result(
            (4096, 4096, 1024, 700, 700, 0, 0, 0, 0, 255)))
    common = ["--model", str(tiny_model), "--num-layers", "-1", "--iters", "40",
              "--save-every", "10"]

    lora_status, lora = plan_json(capsys, *common, "--method", "lora")
    full_status, full = plan_json(capsys, *common, "--method", "full")

    for data in (lora, full):
        assert {"disk_bytes", "disk_free_bytes", "disk_verdict"} <= set(data)
        assert 0 < data["disk_free_bytes"] < 4 * MIB and data["disk_floor_bytes"] == MIB
        assert data["checkpoints"] == 4
    assert lora["disk_verdict"] == "fits" and lora_status == 0
    assert full["disk_verdict"] == "won't fit" and full_status == 1
    assert full["disk_bytes"] > full["disk_free_bytes"] - MIB
    # A full fine-tune's checkpoint holds the trained weights and Adam's two moments.
    assert full["checkpoint_bytes"] > 3 * lora["checkpoint_bytes"] / 2


@pytest.mark.parametrize("small_store", [4], indirect=True)
def test_the_start_gate_refuses_a_run_that_wont_fit_on_disk_unless_overridden(small_store,
                                                                              tiny_model):
    if small_store is None:
        pytest.skip("needs a tmpfs (root)")
    store, run = make_run(tiny_model, COMPLETIONS, method="full", store=small_store,
                          iters=40, save_every=10)

    refused = zyquo_cli("runs", "start", run.id)

    assert refused.returncode == 1
    assert "won't fit on disk" in refused.stderr and "--override-disk" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert store.get(run.id).state is RunState.CONFIGURED
    started = zyquo_cli("runs", "start", run.id, "--override-disk")
    assert started.returncode == 0, started.stderr
    record = store.get(run.id)
    assert record.disk["disk_verdict"] == "won't fit" and record.disk["override"] is True
    wait_state(Supervisor(store), run.id)  # whatever the floor makes of it, it ends


def test_a_run_that_hits_the_floor_stops_with_cause_disk_and_resumes_exactly(
        small_store, tiny_model, isolated_home, monkeypatch):
    if small_store is None:
        pytest.skip("needs a tmpfs (root)")
    home = RunStore(isolated_home)  # the reference trains on the big disk
    _, reference = make_run(tiny_model, COMPLETIONS, store=home, **SETTINGS)
    done = run_trainer(home.run_dir(reference.id))
    assert done.returncode == 0, done.stderr
    store, run = make_run(tiny_model, COMPLETIONS, store=small_store, **SETTINGS)
    hold_trainers_at(monkeypatch, 9)  # the disk fills after step 9, before its checks
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    try:
        assert store.get(run.id).disk["disk_verdict"] == "fits"
        wait_until_held(store.run_dir(run.id))
        ballast = fill(store, MIB + 100_000)  # under the floor plus one checkpoint
        release(store.run_dir(run.id))
        stopped = wait_state(supervisor, run.id)
    finally:
        if supervisor.get(run.id).state.is_active:
            supervisor.cancel(run.id)
            wait_state(supervisor, run.id)

    assert stopped.state is RunState.FAILED and stopped.failure["cause"] == "disk"
    assert "floor" in stopped.failure["message"] and "resume" in stopped.failure["suggestion"]
    last = read_events(store.events_path(run.id))[-1]
    assert last["type"] == "failed" and last["cause"] == "disk"
    assert last["checkpoint"] == last["iteration"] == 9
    checkpoints = list_checkpoints(store.adapters_dir(run.id))
    assert checkpoints[-1].step == last["checkpoint"] and checkpoints[-1].resumable
    assert disk_space.free_bytes(store.home) > 0, "the floor kept space free"

    ballast.unlink()
    supervisor.resume(run.id)
    assert wait_state(supervisor, run.id).state is RunState.COMPLETED
    want = losses_by_iteration(read_events(home.events_path(reference.id)), "train",
                               "train_loss")
    have = losses_by_iteration(read_events(store.events_path(run.id)), "train", "train_loss")
    assert sorted(have) == sorted(want)
    for step in want:
        assert have[step] == pytest.approx(want[step], abs=1e-5), step


def test_a_save_that_fails_midway_leaves_no_checkpoint_that_resume_would_pick(
        small_store, tiny_model, isolated_home, monkeypatch):
    if small_store is None:
        pytest.skip("needs a tmpfs (root)")
    (small_store.home / "config.toml").write_text("[disk]\nfloor_bytes = 0\n")
    home = RunStore(isolated_home)
    _, reference = make_run(tiny_model, COMPLETIONS, store=home, **SETTINGS)
    assert run_trainer(home.run_dir(reference.id)).returncode == 0
    store, run = make_run(tiny_model, COMPLETIONS, store=small_store, **SETTINGS)
    hold_trainers_at(monkeypatch, 9)  # the disk fills after step 9, before its checkpoint
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    try:
        wait_until_held(store.run_dir(run.id))
        # Room for the step's weights (68 kB), not for its optimizer state (138 kB).
        ballast = fill(store, 100_000)
        release(store.run_dir(run.id))
        failed = wait_state(supervisor, run.id)
    finally:
        if supervisor.get(run.id).state.is_active:
            supervisor.cancel(run.id)
            wait_state(supervisor, run.id)

    assert failed.state is RunState.FAILED and failed.failure["cause"] == "disk"
    assert "could not be written" in failed.failure["message"]
    step = failed.summary["step"]
    adapters = store.adapters_dir(run.id)
    checkpoints = list_checkpoints(adapters)
    assert checkpoints and checkpoints[-1].step < step
    assert all(c.resumable for c in checkpoints), "no half-saved step is left"
    assert not [p.name for p in adapters.iterdir() if ".tmp-" in p.name]

    ballast.unlink()
    resumed = supervisor.resume(run.id)
    assert resumed.resume_from_step == checkpoints[-1].step
    assert wait_state(supervisor, run.id).state is RunState.COMPLETED
    want = losses_by_iteration(read_events(home.events_path(reference.id)), "train",
                               "train_loss")
    have = losses_by_iteration(read_events(store.events_path(run.id)), "train", "train_loss")
    for step in want:
        assert have[step] == pytest.approx(want[step], abs=1e-5), step


@pytest.mark.parametrize("need, verdict", [(84, "fits"), (86, "tight"), (100, "tight"),
                                           (101, "won't fit")])
def test_the_disk_verdict_is_tight_above_85_percent_of_the_room(need, verdict):
    """The room is the free space less the floor (docs/unattended.md)."""
    from zyquo_tui.core.memory.disk_verdict import judge_disk

    mib = 1 << 20
    judged = judge_disk(need * mib, mib, need, free=(100 + 20) * mib, floor=20 * mib)
    assert judged.verdict.value == verdict
