"""The boot service: a launchd plist and a systemd unit checked against their formats, and the
service managers' answers read from recorded outputs."""

from __future__ import annotations

import plistlib
from pathlib import Path

from zyquo_tui.core.processes import service

DATA = Path(__file__).parents[1] / "data"


def recorded(name: str) -> str:
    return (DATA / name).read_text()


def test_the_launchd_agent_is_a_valid_plist_in_the_users_launch_agents(tmp_path):
    plan = service.service_plan(platform="darwin", user_home=Path("/Users/mini"),
                                python="/Users/mini/zyquo/.venv/bin/python",
                                store_home=Path("/Users/mini/.zyquo"), uid=501)

    assert plan.kind == service.LAUNCHD_AGENT
    assert plan.path == Path("/Users/mini/Library/LaunchAgents/com.zyquo-tui.recover.plist")
    job = plistlib.loads(plan.content.encode())
    assert plistlib.dumps(job).decode() == plan.content  # the round trip changes nothing
    assert job["Label"] == "com.zyquo-tui.recover"
    assert job["ProgramArguments"] == ["/Users/mini/zyquo/.venv/bin/python", "-m",
                                       "zyquo_tui.__main__", "runs", "recover"]
    assert job["RunAtLoad"] is True and job["AbandonProcessGroup"] is True
    assert job["EnvironmentVariables"] == {"ZYQUO_HOME": "/Users/mini/.zyquo"}
    assert job["StandardOutPath"] == "/Users/mini/.zyquo/service.log"
    assert "UserName" not in job
    assert plan.install_commands == [["launchctl", "bootstrap", "gui/501", str(plan.path)]]
    assert plan.uninstall_commands == [["launchctl", "bootout",
                                        "gui/501/com.zyquo-tui.recover"]]
    assert "automatic login" in plan.notes[0] and "--daemon" in plan.notes[0]


def test_the_launch_daemon_variant_runs_as_the_user_from_boot():
    plan = service.service_plan(platform="darwin", daemon=True, user="mini",
                                python="/usr/local/bin/python3",
                                store_home=Path("/Users/mini/.zyquo"))

    assert plan.kind == service.LAUNCHD_DAEMON
    assert plan.path == Path("/Library/LaunchDaemons/com.zyquo-tui.recover.plist")
    job = plistlib.loads(plan.content.encode())
    assert job["UserName"] == "mini" and job["RunAtLoad"] is True
    assert plan.install_commands[0][:3] == ["launchctl", "bootstrap", "system"]


def test_launchctl_print_is_read_from_recorded_outputs():
    loaded = service.parse_launchctl_print((0, recorded("macos/launchctl_print_loaded.txt")))
    assert loaded == {"loaded": True, "state": "not running", "last_exit_code": "0",
                      "runs": "1", "path": "/Users/mini/Library/LaunchAgents/"
                                           "com.zyquo-tui.recover.plist"}
    missing = service.parse_launchctl_print((113, recorded("macos/launchctl_print_missing.txt")))
    assert missing == {"loaded": False}
    assert service.parse_launchctl_print(None) is None  # launchctl missing: unknown


def test_systemctl_show_is_read_from_recorded_outputs():
    enabled = service.parse_systemctl_show((0, recorded("linux/systemctl_show_enabled.txt")))
    assert enabled == {"loaded": True, "enabled": True, "active_state": "active",
                       "last_exit_status": "0"}
    missing = service.parse_systemctl_show((0, recorded("linux/systemctl_show_missing.txt")))
    assert missing["loaded"] is False and missing["enabled"] is False
    assert service.parse_systemctl_show((1, "Failed to connect to bus: No medium found")) \
        is None


def test_status_on_a_mac_says_installed_and_loaded(tmp_path, monkeypatch):
    plan = service.service_plan(platform="darwin", user_home=tmp_path, python="python3",
                                store_home=tmp_path, uid=501)
    plan.path.parent.mkdir(parents=True)
    plan.path.write_text(plan.content)
    asked = []

    def launchctl_print(target):
        asked.append(target)
        return 0, recorded("macos/launchctl_print_loaded.txt")
    monkeypatch.setattr(service, "launchctl_print", launchctl_print)

    status = service.service_status(plan)

    assert asked == ["gui/501/com.zyquo-tui.recover"]
    assert status["installed"] is True and status["loaded"] is True
    assert status["details"]["last_exit_code"] == "0"
