"""Machine facts: macOS sources parsed from recorded outputs, and every source failing soft."""

from __future__ import annotations

from pathlib import Path

import pytest

from zyquo_tui.core.system import machine

RECORDED = Path(__file__).parents[1] / "data" / "macos"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def test_vm_stat_pages_become_bytes():
    figures = machine.parse_vm_stat(recorded("vm_stat.txt"))
    assert figures["free"] == 3279 * 16384
    assert figures["wired_down"] == 141519 * 16384
    assert figures["occupied_by_compressor"] == 61843 * 16384


def test_memory_pressure_free_percentage():
    assert machine.parse_memory_pressure(recorded("memory_pressure.txt")) == 63


def test_sysctl_wired_limit():
    assert machine.parse_sysctl_value(recorded("sysctl_wired_limit_raised.txt")) == 28672
    assert machine.parse_sysctl_value(recorded("sysctl_wired_limit_default.txt")) == 0


@pytest.mark.parametrize("parser", [machine.parse_vm_stat, machine.parse_memory_pressure,
                                    machine.parse_sysctl_value])
@pytest.mark.parametrize("output", [None, "", "garbage\nmore garbage", "sysctl: unknown oid"])
def test_parsers_fail_soft_on_missing_or_unexpected_output(parser, output):
    assert parser(output) is None


def test_a_missing_command_is_a_missing_figure(monkeypatch):
    assert machine.run_command(["zyquo-no-such-tool", "-n"]) is None
    monkeypatch.setattr(machine, "IS_MACOS", True)
    monkeypatch.setattr(machine.shutil, "which", lambda name: None)
    assert machine.wired_limit_bytes() is None
    assert machine.memory_free_percent() is None
    assert machine.caffeinate_prefix() == []


def test_macos_sources_use_their_commands(monkeypatch):
    monkeypatch.setattr(machine, "IS_MACOS", True)
    outputs = {"sysctl": recorded("sysctl_wired_limit_raised.txt"),
               "memory_pressure": recorded("memory_pressure.txt")}
    monkeypatch.setattr(machine, "run_command", lambda argv, timeout=5.0: outputs[argv[0]])
    monkeypatch.setattr(machine.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert machine.wired_limit_bytes() == 28672 * 1024 * 1024
    assert machine.memory_free_percent() == 63
    assert machine.caffeinate_prefix() == ["caffeinate", "-i"]


def test_memory_facts_on_this_machine():
    facts = machine.memory_facts()
    assert facts.total_bytes >= facts.available_bytes > 0
    assert facts.used_by_others_bytes == facts.total_bytes - facts.available_bytes


def test_the_peak_resident_footprint_is_bytes_on_macos_and_kib_on_linux():
    # getrusage's ru_maxrss, as each system reports a 1.5 GiB peak
    assert machine.peak_resident_bytes(1610612736, platform="darwin") == 1610612736
    assert machine.peak_resident_bytes(1572864, platform="linux") == 1610612736
    # On Linux, /proc/self/status's VmHWM (recorded), and ru_maxrss where it has none.
    status = "Name:\tpython3\nVmPeak:\t  612480 kB\nVmHWM:\t   13628 kB\nVmRSS:\t   13628 kB\n"
    assert machine.peak_resident_bytes(platform="linux", status=status) == 13628 * 1024
    assert machine._vm_hwm_bytes("Name:\tpython3\n") is None
    now = machine.resident_bytes()
    here = machine.peak_resident_bytes()
    # Linux updates the high-water mark lazily, so the peak may trail the present a little;
    # a unit error (KiB read as bytes) would be 1024 times off.
    assert now is not None and here is not None and here >= 0.9 * now > 0
