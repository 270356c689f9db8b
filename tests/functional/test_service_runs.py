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
    assert_systemd_accepts(tmp_path / service.UNIT, plan.content, "Type=oneshot", "oneshoot")


def assert_systemd_accepts(unit: Path, content: str, line: str, typo: str) -> None:
    """systemd-analyze verifies the unit as written, and refuses it with `line`'s value
    misspelt as `typo` (the check can fail). Skipped where systemd-analyze is missing."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here")
    unit.write_text(content)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, check=False)
    # verify exits 0 even for unknown keys and values it ignores: those print a line each.
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stderr
    broken = unit.with_name(f"broken-{unit.name}")
    broken.write_text(content.replace(line, line.split("=")[0] + "=" + typo))
    done = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True,
                          text=True, check=False)
    assert typo in done.stderr, "the check must be able to fail"


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


def test_the_servers_systemd_unit_keeps_it_up_and_passes_systemd_analyze_verify(tmp_path):
    plan = service.service_plan(platform="linux", user_home=tmp_path, python=sys.executable,
                                store_home=tmp_path / "store", user="me",
                                serve=("0.0.0.0", 9000))

    assert plan.path == tmp_path / ".config/systemd/user/zyquo-tui-serve.service"
    assert (f"ExecStart={sys.executable} -m zyquo_tui.__main__ serve --host 0.0.0.0 "
            "--port 9000\n") in plan.content
    assert "Restart=always\n" in plan.content and "RestartSec=5\n" in plan.content
    assert f'Environment="ZYQUO_HOME={tmp_path}/store"' in plan.content
    assert "KillMode" not in plan.content  # stopping the unit stops the server
    assert plan.install_commands[-1] == ["systemctl", "--user", "enable", "--now",
                                         service.SERVE_UNIT]
    assert plan.uninstall_commands[0] == ["systemctl", "--user", "disable", "--now",
                                          service.SERVE_UNIT]
    assert any("--show-key" in note for note in plan.notes)
    assert_systemd_accepts(tmp_path / service.SERVE_UNIT, plan.content, "Restart=always",
                           "allways")


@pytest.mark.parametrize("daemon", [False, True])
def test_the_servers_launchd_job_is_kept_alive_with_its_address(tmp_path, daemon):
    plan = service.service_plan(platform="darwin", daemon=daemon, user_home=tmp_path,
                                python="/usr/bin/python3", store_home=tmp_path / "store",
                                uid=501, user="me", serve=("127.0.0.1", 8765))

    job = plistlib.loads(plan.content.encode())
    assert job["Label"] == service.SERVE_LABEL == "com.zyquo-tui.serve"
    assert job["ProgramArguments"] == ["/usr/bin/python3", "-m", "zyquo_tui.__main__", "serve",
                                       "--host", "127.0.0.1", "--port", "8765"]
    assert job["KeepAlive"] is True and job["RunAtLoad"] is True
    assert job["StandardOutPath"] == str(tmp_path / "store" / "serve.log")
    assert job["EnvironmentVariables"] == {"ZYQUO_HOME": str(tmp_path / "store")}
    if daemon:
        assert plan.path == Path("/Library/LaunchDaemons/com.zyquo-tui.serve.plist")
        assert job["UserName"] == "me"
        assert plan.uninstall_commands == [["launchctl", "bootout",
                                            "system/com.zyquo-tui.serve"]]
    else:
        assert plan.path == tmp_path / "Library/LaunchAgents/com.zyquo-tui.serve.plist"
        assert "UserName" not in job
        assert plan.install_commands == [["launchctl", "bootstrap", "gui/501", str(plan.path)]]
        assert plan.uninstall_commands == [["launchctl", "bootout",
                                            "gui/501/com.zyquo-tui.serve"]]
        assert "service install --serve --daemon" in plan.notes[0]


@pytest.mark.skipif(sys.platform == "darwin", reason="the systemd user unit is Linux's")
def test_cli_serve_dry_run_prints_the_servers_unit_with_its_address_and_changes_nothing(
        tmp_path, fake_service_manager):
    home = tmp_path / "user"
    home.mkdir()
    done = service_cli(home, "install", "--serve", "--host", "0.0.0.0", "--port", "9000",
                       "--dry-run")

    assert done.returncode == 0, done.stderr
    unit = home / ".config/systemd/user/zyquo-tui-serve.service"
    assert done.stdout.startswith(f"would write {unit}:\n[Unit]\n")
    assert " serve --host 0.0.0.0 --port 9000\n" in done.stdout
    assert "Restart=always\n" in done.stdout
    assert ("would run: systemctl --user enable --now zyquo-tui-serve.service\n"
            in done.stdout)
    assert not any(home.iterdir()) and calls(fake_service_manager) == []


@pytest.mark.skipif(sys.platform == "darwin", reason="the systemd user unit is Linux's")
def test_cli_serve_install_status_and_uninstall_touch_the_servers_unit_only(
        tmp_path, fake_service_manager):
    installed = service_cli(tmp_path, "install", "--serve", "--port", "9001")

    units = tmp_path / ".config/systemd/user"
    assert installed.returncode == 0, installed.stderr
    assert sorted(p.name for p in units.iterdir()) == [service.SERVE_UNIT]
    assert " serve --host 127.0.0.1 --port 9001\n" in (units / service.SERVE_UNIT).read_text()
    assert calls(fake_service_manager) == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", service.SERVE_UNIT]]
    status = json.loads(service_cli(tmp_path, "status", "--serve", "--json").stdout)
    assert status["path"] == str(units / service.SERVE_UNIT) and status["installed"] is True
    assert calls(fake_service_manager)[-1][:4] == ["systemctl", "--user", "show",
                                                   service.SERVE_UNIT]
    recover = json.loads(service_cli(tmp_path, "status", "--json").stdout)
    assert recover["installed"] is False  # the boot recovery is a service of its own

    fake_service_manager.unlink()
    removed = service_cli(tmp_path, "uninstall", "--serve")
    assert removed.returncode == 0, removed.stderr
    assert not (units / service.SERVE_UNIT).exists()
    assert calls(fake_service_manager) == [
        ["systemctl", "--user", "disable", "--now", service.SERVE_UNIT],
        ["systemctl", "--user", "daemon-reload"]]


def test_host_or_port_without_serve_is_refused_in_one_sentence(tmp_path):
    done = service_cli(tmp_path, "install", "--port", "9000", "--dry-run")
    assert done.returncode == 2 and "give them with --serve" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
