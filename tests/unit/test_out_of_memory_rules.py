"""The out-of-memory rules on their own: sizes as written, where a run's limit comes from, the
ladder's rungs and their order, and the witnesses of a kill for memory (recorded cgroup files)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.runs.failures import classify_exit
from zyquo_tui.core.runs.out_of_memory import memory_limit, next_rung, step_down
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters
from zyquo_tui.core.runs.value_checks import bytes_from_text
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.core.system.memory_deaths import (
    MemorySample,
    killed_for_memory,
    oom_kill_count,
    oom_kills_in,
)

LINUX = Path(__file__).parent.parent / "data" / "linux"
GIB = 1 << 30


@pytest.mark.parametrize("text, size", [
    ("12GB", 12 * GIB), ("12 GiB", 12 * GIB), ("12g", 12 * GIB), ("800MB", 800 << 20),
    ("1.5T", int(1.5 * (1 << 40))), ("4096", 4096), ("64k", 64 << 10), ("12 gigs", None),
    ("-1GB", None), ("", None),
])
def test_sizes_are_read_as_people_write_them(text, size):
    assert bytes_from_text(text) == size


def test_a_memory_limit_flag_and_its_refusals():
    setting = SETTINGS["memory_limit"]
    assert setting.parse("12GB") == 12 * GIB
    assert [p.sentence for p in setting.problems(setting.parse("lots"))] == [
        "memory_limit must be a size such as 12GB or 800MB, not 'lots'."]
    assert [p.sentence for p in setting.problems(100)] == [
        "memory_limit must be at least 1 MiB, not 100 bytes."]
    assert setting.problems("16GB") == []  # as a YAML file writes it


def test_the_run_limit_wins_over_the_machine_one(isolated_home):
    hp = Hyperparameters()
    assert memory_limit(hp, None) == (None, "")
    assert memory_limit(hp, 8 * GIB) == (8 * GIB, "config.toml [memory] limit")
    SETTINGS["memory_limit"].set(hp, 4 * GIB)
    assert memory_limit(hp, 8 * GIB) == (4 * GIB, "the run's memory_limit")


def test_config_toml_sets_the_machine_limit_or_names_its_line(isolated_home):
    config = isolated_home / "config.toml"
    config.write_text('[runs]\ncancel_grace_seconds = 5\n\n[memory]\nlimit = "16GB"\n')
    assert Settings.load(isolated_home).memory_limit_bytes == 16 * GIB
    config.write_text('[memory]\nlimit = "lots"\n')
    with pytest.raises(UserError) as refused:
        Settings.load(isolated_home)
    assert f"{config}:2: [memory] limit must be a size" in refused.value.message


def test_the_ladder_takes_each_rung_once_in_order():
    hp = Hyperparameters.from_dict({"batch_size": 8})
    taken, changes = [], []
    while (rung := next_rung(hp, taken, sliced="off")) is not None:
        taken.append(rung.setting)
        changes.append((rung.setting, rung.value))
        hp = step_down(hp, rung)
    assert changes == [("grad_checkpoint", True), ("micro_batches", 2),
                       ("loss_chunk_tokens", 256)]
    assert SETTINGS["micro_batches"].get(hp) == 2 and hp.batch_size == 8  # the same batch


def test_rungs_a_run_has_already_are_skipped():
    hp = Hyperparameters.from_dict({"batch_size": 1, "grad_checkpoint": True})
    # one row a batch: no micro-batch to halve; auto already slicing: no loss rung either
    assert next_rung(hp, [], sliced=256) is None
    assert next_rung(hp, [], sliced="off").setting == "loss_chunk_tokens"
    dpo = Hyperparameters.from_dict({"batch_size": 8})
    SETTINGS["objective"].set(dpo, "dpo")
    assert next_rung(dpo, ["grad_checkpoint"], sliced="off").setting == "loss_chunk_tokens"


def test_micro_batches_need_a_row_each():
    hp = Hyperparameters.from_dict({"batch_size": 4})
    SETTINGS["micro_batches"].set(hp, 8)
    assert [p.sentence for p in hp.problems(None) if p.key == "micro_batches"] == [
        "micro_batches (8) is more than the 4 rows each process trains of a batch; give at "
        "most 4."]


def test_the_kernels_oom_kill_count_is_read_from_recorded_cgroup_files():
    v1 = (LINUX / "memory.oom_control").read_text()
    v2 = (LINUX / "memory.events").read_text()
    assert oom_kills_in(v1) == 0 and oom_kills_in(v2) == 2 and oom_kills_in("") is None
    files = {Path("/proc/self/cgroup"): (LINUX / "proc_self_cgroup_v2.txt").read_text(),
             Path("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/memory.events"):
                 v2}
    assert oom_kill_count(read=files.get) == 2
    # v1 inside a container: the group's own files at the mount's top
    files = {Path("/proc/self/cgroup"): (LINUX / "proc_self_cgroup_v1.txt").read_text(),
             Path("/sys/fs/cgroup/memory/memory.oom_control"): v1}
    assert oom_kill_count(read=files.get) == 0
    assert oom_kill_count(read=lambda path: None) is None  # macOS: no witness, no error


def test_a_sigkill_is_memory_only_with_a_witness():
    roomy = MemorySample(trainer_bytes=2 * GIB, available_bytes=10 * GIB, total_bytes=24 * GIB)
    assert killed_for_memory(roomy, None, 0, 0) is None
    assert killed_for_memory(roomy, 16 * GIB, None, None) is None
    assert "out-of-memory kill" in killed_for_memory(roomy, None, 3, 4)
    tight = MemorySample(trainer_bytes=20 * GIB, available_bytes=GIB // 2, total_bytes=24 * GIB)
    assert "available a moment before" in killed_for_memory(tight, None, None, None)
    near = MemorySample(trainer_bytes=15 * GIB, available_bytes=8 * GIB, total_bytes=24 * GIB)
    assert "near its memory limit" in killed_for_memory(near, 16 * GIB, None, None)

    killed = -signal.SIGKILL
    assert classify_exit(killed, "", None).cause == "killed"
    by_memory = classify_exit(killed, "", killed_for_memory(tight, None, None, None))
    assert by_memory.cause == "oom" and by_memory.message.startswith(
        "The trainer was killed (SIGKILL) as memory ran out: the machine had 512.0 MiB")
