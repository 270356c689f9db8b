"""The boot service: a launchd plist and a systemd unit checked against their formats, and the
service managers' answers read from recorded outputs."""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import zyquo_cli

from zyquo_tui.core.processes import service


def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    plan = service.service_plan(platform="linux", user_home=tmp_path, python=sys.executable,
                                store_home=tmp_path / "store with space", user="me")

    assert plan.path == tmp_path / ".config/systemd/user/zyquo-tui-recover.service"
    assert f"ExecStart={sys.executable} -m zyquo_tui.__main__ runs recover" in plan.content
    assert f'Environment="ZYQUO_HOME={tmp_path}/store with space"' in plan.content
    assert "KillMode=process" in plan.content and "WantedBy=default.target" in plan.content
    assert "loginctl enable-linger me" in plan.notes[0]
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here")
    unit = tmp_path / service.UNIT
    unit.write_text(plan.content)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, check=False)
    # verify exits 0 even for unknown keys and values it ignores: those print a line each.
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stderr

    broken = tmp_path / "broken.service"
    broken.write_text(plan.content.replace("Type=oneshot", "Type=oneshoot"))
    done = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True,
                          text=True, check=False)
    assert "oneshoot" in done.stderr, "the check must be able to fail"


def test_cli_dry_run_prints_the_unit_and_changes_nothing(tmp_path):
    home = tmp_path / "user"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "zyquo_tui", "service", "install",
                           "--dry-run", "--json"], capture_output=True, text=True, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["dry_run"] is True
    if sys.platform == "darwin":
        assert plan["kind"] == service.LAUNCHD_AGENT
        plistlib.loads(plan["content"].encode())
    else:
        assert plan["kind"] == service.SYSTEMD_USER
        assert plan["content"].startswith("[Unit]\n")
    assert plan["path"].startswith(str(home))
    assert not any(home.iterdir()), "a dry run writes nothing"


def service_cli(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`zyquo-tui service ...` with $HOME at `home`, the service manager the stand-in on PATH
    (conftest's fake_service_manager)."""
    return subprocess.run([sys.executable, "-m", "zyquo_tui", "service", *args],
                          capture_output=True, text=True, env={**os.environ, "HOME": str(home),
                                                               **env}, check=False)


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_every_service_manager_a_test_can_reach_is_the_recording_stand_in(
        fake_service_manager):
    for tool in ("systemctl", "launchctl"):
        found = Path(shutil.which(tool))
        assert found.resolve() == (Path(__file__).parents[1] / "fake_tools" /
                                   "service_manager.py").resolve(), found
    assert service.run_tool(["systemctl", "--user", "daemon-reload"]) == (0, "")
    assert calls(fake_service_manager) == [["systemctl", "--user", "daemon-reload"]]


@pytest.mark.skipif(sys.platform == "darwin", reason="the systemd user unit is Linux's")
def test_cli_install_writes_the_unit_enables_it_and_uninstall_disables_and_removes_it(
        tmp_path, fake_service_manager):
    installed = service_cli(tmp_path, "install")

    unit = tmp_path / ".config/systemd/user/zyquo-tui-recover.service"
    assert installed.returncode == 0, installed.stderr
    assert unit.is_file() and "runs recover" in unit.read_text()
    assert calls(fake_service_manager) == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", service.UNIT]]
    status = json.loads(service_cli(tmp_path, "status", "--json").stdout)
    # docs/CLI.md's keys; the details are what the manager said (a recorded answer)
    assert status == {"kind": service.SYSTEMD_USER, "path": str(unit), "installed": True,
                      "loaded": True, "details": {"enabled": True, "active_state": "active",
                                                  "last_exit_status": "0"}}
    assert calls(fake_service_manager)[-1][:3] == ["systemctl", "--user", "show"]

    fake_service_manager.unlink()  # the uninstall's calls alone
    removed = service_cli(tmp_path, "uninstall")
    assert removed.returncode == 0 and not unit.exists()
    assert calls(fake_service_manager) == [
        ["systemctl", "--user", "disable", service.UNIT],
        ["systemctl", "--user", "daemon-reload"]]
    status = json.loads(service_cli(tmp_path, "status", "--json").stdout)
    assert status["installed"] is False and status["loaded"] is False
    again = service_cli(tmp_path, "uninstall")
    assert again.returncode == 0 and "not installed" in again.stdout


@pytest.mark.skipif(sys.platform == "darwin", reason="the systemd user unit is Linux's")
def test_install_without_a_user_service_manager_writes_the_unit_and_says_what_systemctl_said(
        tmp_path):
    installed = service_cli(tmp_path, "install", ZYQUO_FAKE_SERVICE_MANAGER="unreachable")

    assert installed.returncode == 1
    assert (tmp_path / ".config/systemd/user/zyquo-tui-recover.service").is_file()
    assert ("warning: `systemctl --user daemon-reload`: Failed to connect to bus: "
            "No medium found") in installed.stderr
    status = json.loads(service_cli(tmp_path, "status", "--json",
                                    ZYQUO_FAKE_SERVICE_MANAGER="unreachable").stdout)
    assert status["installed"] is True
    assert status["loaded"] is None and status["details"] is None  # cannot be asked


@pytest.mark.skipif(sys.platform == "darwin", reason="the systemd user unit is Linux's")
def test_install_without_systemctl_says_it_was_not_found(tmp_path):
    nothing = tmp_path / "no-tools"
    nothing.mkdir()
    installed = service_cli(tmp_path, "install", PATH=str(nothing))

    assert installed.returncode == 1
    assert "warning: `systemctl --user daemon-reload`: not found" in installed.stderr


def test_daemon_on_linux_is_refused_in_one_sentence():
    if sys.platform == "darwin":
        pytest.skip("the LaunchDaemon exists on macOS")
    done = zyquo_cli("service", "install", "--daemon")
    assert done.returncode == 2 and "loginctl enable-linger" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
