"""GPU use from `macmon pipe`, parsed from a recorded sample, and failing soft elsewhere.

tests/data/macos/macmon_pipe.txt is one line of `macmon pipe -s 1` (macmon 0.5, the sample of
its README): `gpu_usage` is [MHz, busy fraction], powers are watts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zyquo_tui.core.system import machine

RECORDED = Path(__file__).parents[1] / "data" / "macos" / "macmon_pipe.txt"


def test_gpu_busy_fraction_becomes_a_percentage_with_frequency_and_power():
    use = machine.parse_macmon_pipe(RECORDED.read_text())
    assert (use.gpu_percent, use.gpu_mhz) == (2.1, 461)
    assert use.gpu_watts == pytest.approx(0.01745, abs=1e-5)
    assert use.total_watts == pytest.approx(0.2223, abs=1e-4)


def test_the_last_sample_of_several_counts():
    first = RECORDED.read_text().strip()
    busier = first.replace("[461,0.021497859]", "[1398,0.87]")
    assert machine.parse_macmon_pipe(f"{first}\n{busier}\n").gpu_percent == 87.0


@pytest.mark.parametrize("output", [None, "", "garbage", '{"gpu_usage": "busy"}',
                                    '{"temp": {}}', "[1, 2]"])
def test_missing_or_unexpected_output_is_no_figure(output):
    assert machine.parse_macmon_pipe(output) is None


def test_off_macos_there_is_no_gpu_figure_and_no_command_is_run(monkeypatch):
    monkeypatch.setattr(machine, "IS_MACOS", False)
    monkeypatch.setattr(machine, "run_command", lambda *a, **k: pytest.fail("ran a command"))
    assert machine.gpu_use() is None
