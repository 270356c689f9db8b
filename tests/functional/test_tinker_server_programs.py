"""Programs against one long-lived server: two at once each get the losses they get alone, and a
program goes on after the server was killed (SIGKILL) and started again, from its last
save_state with the optimizer, with the losses of a run that was never stopped. Real SDK
programs (tests/functional/tinker_steps_program.py), a real server, real signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tinker")
from test_tinker_server import start_server, stop  # noqa: E402

from conftest import zyquo_cli  # noqa: E402

PROGRAM = Path(__file__).with_name("tinker_steps_program.py")


def program(server, *args: str) -> subprocess.Popen:
    env = {**os.environ, "TINKER_BASE_URL": server.url, "TINKER_API_KEY": server.key,
           "TINKER_TELEMETRY": "0"}
    return subprocess.Popen([sys.executable, str(PROGRAM), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def lines_of(process: subprocess.Popen) -> list[dict]:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def losses(lines: list[dict]) -> list[float]:
    return [line["loss"] for line in lines if "loss" in line]


@pytest.fixture
def home(isolated_home, sample_models):
    shutil.copytree(sample_models["zyquo-tiny"], isolated_home / "models" / "zyquo-tiny")
    return isolated_home


def test_two_programs_at_once_get_the_losses_each_gets_alone(home):
    server = start_server(home)
    try:
        first_args = ("--seed", "3", "--rows", "0,1", "--steps", "8")
        second_args = ("--seed", "4", "--rows", "2", "--steps", "8")
        first_alone = losses(lines_of(program(server, *first_args)))
        second_alone = losses(lines_of(program(server, *second_args)))
        assert len(first_alone) == len(second_alone) == 8
        assert first_alone != pytest.approx(second_alone)  # two different programs
        together = [program(server, *first_args), program(server, *second_args)]
        first, second = (losses(lines_of(p)) for p in together)
    finally:
        stop(server)
    assert first == pytest.approx(first_alone, rel=1e-6, abs=0)
    assert second == pytest.approx(second_alone, rel=1e-6, abs=0)


def test_a_program_goes_on_after_the_server_was_killed_with_the_losses_of_a_straight_run(
        home):
    from zyquo_tui.core.store.store import RunStore

    server = start_server(home)
    try:
        straight = losses(lines_of(program(server, "--seed", "9", "--steps", "6")))
        first_part = lines_of(program(server, "--seed", "9", "--steps", "6", "--save-at", "3",
                                      "--vanish"))
        assert losses(first_part) == straight[:3]
        saved = next(line["saved"] for line in first_part if "saved" in line)
        os.killpg(server.process.pid, signal.SIGKILL)  # its model loaded, its run running
        assert server.process.wait(timeout=30) == -signal.SIGKILL
    finally:
        stop(server)
    killed_run = saved.split("/")[2]
    listed = {r["id"]: r["state"] for r in json.loads(zyquo_cli("runs", "list",
                                                                 "--json").stdout)}
    assert listed[killed_run] == "interrupted"  # its server is gone: a reader says so

    again = start_server(home)
    try:
        went_on = losses(lines_of(program(again, "--resume", saved, "--steps", "3")))
    finally:
        stop(again)
    assert went_on == pytest.approx(straight[3:], rel=1e-6, abs=0)
    assert RunStore(home).get(killed_run).state.value == "interrupted"
