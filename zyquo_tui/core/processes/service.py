"""The boot services: `zyquo-tui runs recover` when the machine starts, so runs outlive a
reboot, and (`serve=`) `zyquo-tui serve` kept up, so Tinker programs find the server.

On macOS a launchd agent (~/Library/LaunchAgents/com.zyquo-tui.recover.plist) that runs at
load, or with `daemon=True` a LaunchDaemon (/Library/LaunchDaemons, run as the user, needs
root); on Linux a systemd user unit (~/.config/systemd/user/zyquo-tui-recover.service). The
files are generated here (`service_plan`) and checked against their formats in the tests
(plistlib round trip; `systemd-analyze verify`). The runner that recover starts detaches into
its own session, and the files say so to their managers (launchd's AbandonProcessGroup,
systemd's KillMode=process), so training outlives the one-shot job that started it.

The server's service is a second job of the same kind (com.zyquo-tui.serve.plist,
zyquo-tui-serve.service) that runs `zyquo-tui serve --host H --port P` in the foreground and
has its manager start it again whenever it ends (launchd's KeepAlive, systemd's
Restart=always): the server is the job itself, so stopping the job stops the server.

Every launchctl and systemctl call goes through `run_tool`, which fails soft (None when the tool
is missing or fails), and its output is read by a parser tested against recorded outputs
(tests/data/macos/, tests/data/linux/), as core/system/machine.py does for its
facts. `run_tool` runs the tool PATH names, and nothing else: that is where the tests put a
stand-in that records its calls (tests/fake_tools/), since a different $HOME does not keep
the real managers off the user's own services.
"""

from __future__ import annotations

import getpass
import os
import plistlib
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from zyquo_tui.core.store.paths import HOME_ENV
from zyquo_tui.core.system.entry_points import CLI, python_command

LABEL = "com.zyquo-tui.recover"
UNIT = "zyquo-tui-recover.service"
SERVE_LABEL = "com.zyquo-tui.serve"
SERVE_UNIT = "zyquo-tui-serve.service"
RESTART_SECONDS = 5  # between a server that ended and its next start (systemd; launchd: 10)
LAUNCHD_AGENT = "launchd-agent"
LAUNCHD_DAEMON = "launchd-daemon"
SYSTEMD_USER = "systemd-user"


@dataclass
class ServicePlan:
    """What `service install` writes and runs, and what it takes to remove it again."""

    kind: str
    path: Path
    content: str
    install_commands: list[list[str]]
    uninstall_commands: list[list[str]]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        data = asdict(self)
        data["path"] = str(self.path)
        return data


def recover_command(python: str) -> list[str]:
    return python_command(CLI, "runs", "recover", python=python)


def serve_command(python: str, host: str, port: int) -> list[str]:
    return python_command(CLI, "serve", "--host", host, "--port", str(port), python=python)


def _environment(store_home: Path | None) -> dict[str, str]:
    """The store the service recovers: the one this command uses, named when it is not the
    default (a service starts without the user's shell and its exports)."""
    value = os.environ.get(HOME_ENV)
    if store_home is not None:
        value = str(store_home)
    return {HOME_ENV: value} if value else {}


def launchd_plist(python: str, store_home: Path | None, log: Path,
                  user: str | None = None) -> dict:
    """The job as a property list (a dict; plistlib writes it)."""
    job = {
        "Label": LABEL,
        "ProgramArguments": recover_command(python),
        "RunAtLoad": True,
        # The runner recover starts detaches (its own session); launchd must not kill what
        # is left of the job's process group when `recover` exits.
        "AbandonProcessGroup": True,
        "StandardOutPath": str(log),
        "StandardErrorPath": str(log),
        "ProcessType": "Background",
    }
    environment = _environment(store_home)
    if environment:
        job["EnvironmentVariables"] = environment
    if user:
        job["UserName"] = user  # a LaunchDaemon runs as root unless told otherwise
    return job


def launchd_serve_plist(python: str, store_home: Path | None, log: Path, host: str,
                        port: int, user: str | None = None) -> dict:
    """The server's job: started at load and again whenever it ends."""
    job = {
        "Label": SERVE_LABEL,
        "ProgramArguments": serve_command(python, host, port),
        "RunAtLoad": True,
        "KeepAlive": True,
        "StandardOutPath": str(log),
        "StandardErrorPath": str(log),
        # No ProcessType: "Background" would throttle the training it serves.
    }
    environment = _environment(store_home)
    if environment:
        job["EnvironmentVariables"] = environment
    if user:
        job["UserName"] = user
    return job


def systemd_unit(python: str, store_home: Path | None) -> str:
    """The systemd user unit (a one-shot job at the user manager's start)."""
    environment = "".join(f'Environment="{key}={value}"\n'
                          for key, value in _environment(store_home).items())
    command = " ".join(_systemd_quote(arg) for arg in recover_command(python))
    return (
        "[Unit]\n"
        "Description=zyquo-tui: resume the runs a reboot interrupted, then the queue\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"ExecStart={command}\n"
        f"{environment}"
        "RemainAfterExit=yes\n"
        "# The runner that recover starts detaches and trains on: stop only recover itself.\n"
        "KillMode=process\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def systemd_serve_unit(python: str, store_home: Path | None, host: str, port: int) -> str:
    """The server's systemd user unit: the server in the foreground, started again whenever
    it ends."""
    environment = "".join(f'Environment="{key}={value}"\n'
                          for key, value in _environment(store_home).items())
    command = " ".join(_systemd_quote(arg) for arg in serve_command(python, host, port))
    return (
        "[Unit]\n"
        f"Description=zyquo-tui serve: the Tinker API on {host} port {port}, kept up\n"
        "\n"
        "[Service]\n"
        "Type=exec\n"
        f"ExecStart={command}\n"
        f"{environment}"
        "Restart=always\n"
        f"RestartSec={RESTART_SECONDS}\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def _systemd_quote(arg: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def service_plan(*, platform: str = sys.platform, daemon: bool = False,
                 user_home: Path | None = None, python: str = sys.executable,
                 store_home: Path | None = None, uid: int | None = None,
                 user: str | None = None, serve: tuple[str, int] | None = None
                 ) -> ServicePlan:
    """The service for this platform (or the one given, for tests and to prepare a Mac's):
    the boot recovery, or with `serve=(host, port)` the server kept up."""
    user_home = user_home or Path.home()
    uid = os.getuid() if uid is None else uid
    label, unit = (SERVE_LABEL, SERVE_UNIT) if serve else (LABEL, UNIT)
    flags = " --serve" if serve else ""
    key_note = ["The server's key: `zyquo-tui serve --show-key` (programs need it as "
                "TINKER_API_KEY)."] if serve else []
    if platform == "darwin":
        log_home = store_home or Path(os.environ.get(HOME_ENV) or user_home / ".zyquo")
        log = log_home / ("serve.log" if serve else "service.log")

        def plist(user: str | None) -> str:
            job = (launchd_serve_plist(python, store_home, log, *serve, user) if serve
                   else launchd_plist(python, store_home, log, user))
            return plistlib.dumps(job).decode()

        if daemon:
            user = user or getpass.getuser()
            path = Path("/Library/LaunchDaemons") / f"{label}.plist"
            return ServicePlan(
                LAUNCHD_DAEMON, path, plist(user),
                [["launchctl", "bootstrap", "system", str(path)]],
                [["launchctl", "bootout", f"system/{label}"]],
                [(f"A LaunchDaemon starts at boot with nobody logged in; it runs as {user} "
                  "(UserName). Installing it needs root (sudo)."), *key_note])
        path = user_home / "Library" / "LaunchAgents" / f"{label}.plist"
        return ServicePlan(
            LAUNCHD_AGENT, path, plist(None),
            [["launchctl", "bootstrap", f"gui/{uid}", str(path)]],
            [["launchctl", "bootout", f"gui/{uid}/{label}"]],
            [("A LaunchAgent starts when its user logs in. On a headless Mac turn on "
              "automatic login (System Settings > Users & Groups; it needs FileVault off), or "
              f"install the LaunchDaemon variant (`sudo zyquo-tui service install{flags} "
              "--daemon`), which starts at boot without a login."), *key_note])
    path = user_home / ".config" / "systemd" / "user" / unit
    if serve:  # started now as well as at every start of the user's manager
        content = systemd_serve_unit(python, store_home, *serve)
        enable, disable = ["enable", "--now", unit], ["disable", "--now", unit]
        key_note.append(f"Its output: `journalctl --user -u {unit}`.")
    else:
        content = systemd_unit(python, store_home)
        enable, disable = ["enable", unit], ["disable", unit]
    return ServicePlan(
        SYSTEMD_USER, path, content,
        [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", *enable]],
        [["systemctl", "--user", *disable], ["systemctl", "--user", "daemon-reload"]],
        [("A systemd user unit starts with the user's service manager, at login. To start "
          f"it at boot without a login: `loginctl enable-linger {user or getpass.getuser()}`."),
         *key_note])


# -- the commands: one small function each, failing soft ----------------------------------------

def run_tool(argv: list[str], timeout: float = 10.0) -> tuple[int, str] | None:
    """(exit status, stdout and stderr) of a service manager's command; None when the tool
    is missing or cannot run."""
    found = shutil.which(argv[0])
    if found is None:
        return None
    try:  # the very file found: what was looked up is what runs
        done = subprocess.run([found, *argv[1:]], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.returncode, (done.stdout + done.stderr).strip()


def launchctl_print(target: str) -> tuple[int, str] | None:
    """`launchctl print gui/UID/LABEL` (or system/LABEL): the job's state when loaded."""
    return run_tool(["launchctl", "print", target])


def systemctl_show(unit: str = UNIT) -> tuple[int, str] | None:
    return run_tool(["systemctl", "--user", "show", unit,
                     "--property=LoadState,ActiveState,UnitFileState,ExecMainStatus"])


def parse_launchctl_print(result: tuple[int, str] | None) -> dict | None:
    """Loaded or not, and the job's state and last exit code, from `launchctl print`.

    A loaded job prints `TARGET = {` and tab-indented `key = value` lines; an unknown one
    exits 113 with `Could not find service ...`. None when launchctl could not be asked."""
    if result is None:
        return None
    status, text = result
    if status != 0 or "= {" not in text:
        return {"loaded": False}
    facts: dict = {"loaded": True}
    for line in text.splitlines():
        match = re.match(r"^\t(state|last exit code|runs|path) = (.+)$", line)
        if match:
            facts[match.group(1).replace(" ", "_")] = match.group(2).strip()
    return facts


def parse_systemctl_show(result: tuple[int, str] | None) -> dict | None:
    """LoadState, ActiveState, UnitFileState and ExecMainStatus from `systemctl show`; None
    when systemctl could not be asked (no user manager: a container, an SSH session without
    lingering)."""
    if result is None:
        return None
    status, text = result
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if status != 0 or "LoadState" not in values:
        return None
    return {"loaded": values["LoadState"] == "loaded",
            "enabled": values.get("UnitFileState") == "enabled",
            "active_state": values.get("ActiveState"),
            "last_exit_status": values.get("ExecMainStatus")}


def service_status(plan: ServicePlan) -> dict:
    """Installed (the file is there) and loaded (its manager knows it); loaded is None when
    the manager cannot be asked. `details` is what else the manager said (the job's state, its
    last exit), None then too: always there, so a script's `status["details"]` never fails."""
    installed = plan.path.is_file()
    if plan.kind == SYSTEMD_USER:
        facts = parse_systemctl_show(systemctl_show(plan.path.name))  # the unit's name
    else:
        target = plan.uninstall_commands[0][-1]  # gui/UID/LABEL or system/LABEL
        facts = parse_launchctl_print(launchctl_print(target))
    return {"kind": plan.kind, "path": str(plan.path), "installed": installed,
            "loaded": facts.get("loaded") if facts else None,
            "details": {k: v for k, v in facts.items() if k != "loaded"} if facts else None}


def run_commands(commands: list[list[str]]) -> list[dict]:
    """Run a plan's commands in order; each result says what ran and how it went."""
    results = []
    for argv in commands:
        result = run_tool(argv)
        results.append({"command": argv, "ok": result is not None and result[0] == 0,
                        "output": "" if result is None else result[1],
                        "missing": result is None})
    return results
