"""Is each host of a distributed run ready? (`zyquo-tui hosts check`)

A host is ready when this machine reaches it by SSH without a password (this machine's own
names are checked without SSH), it runs the same Python at the same path with the same
zyquo-tui, mlx and mlx-lm versions, and it has the run's model and data at the same paths.
Its free memory is reported beside. The same small script gathers the facts here and there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from zyquo_tui.core.system.cluster import is_this_machine

SSH_TIMEOUT_SECONDS = 5
PACKAGES = ("zyquo-tui", "mlx", "mlx-lm")

# Run by the host's Python (the same path as this one): its facts as one JSON line.
FACTS_SCRIPT = """
import json, os, platform, sys
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
try:
    import psutil
    free = psutil.virtual_memory().available
except Exception:
    free = None
print(json.dumps({"python": platform.python_version(), "executable": sys.executable,
                  "packages": {n: version(n) for n in PACKAGES},
                  "paths": {p: os.path.exists(p) for p in sys.argv[1:]},
                  "free_memory_bytes": free}))
""".replace("PACKAGES", repr(PACKAGES))


@dataclass
class HostReport:
    """One host's facts and, when it is not ready, the sentence that says what to do."""

    host: str
    local: bool
    facts: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None

    @property
    def ready(self) -> bool:
        return self.problem is None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "local": self.local, "ready": self.ready,
                "problem": self.problem, "python": self.facts.get("python"),
                "packages": self.facts.get("packages"),
                "paths": self.facts.get("paths"),
                "free_memory_bytes": self.facts.get("free_memory_bytes")}


def host_facts_command(host: str, paths: list[str]) -> tuple[list[str], bool]:
    """The argv that gathers `host`'s facts, and whether it runs here without SSH."""
    here = [sys.executable, "-c", FACTS_SCRIPT, *paths]
    if is_this_machine(host):
        return here, True
    import shlex

    return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_SECONDS}",
            host, shlex.join(here)], False


def check_host(host: str, paths: list[str], reference: dict[str, Any] | None) -> HostReport:
    """`host` against `reference` (this machine's facts; None when checking this machine)."""
    argv, local = host_facts_command(host, paths)
    report = HostReport(host, local)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=SSH_TIMEOUT_SECONDS * 4)
    except FileNotFoundError:
        report.problem = "ssh is not installed here; install OpenSSH to reach other hosts."
        return report
    except subprocess.TimeoutExpired:
        report.problem = (f"{host} did not answer within {SSH_TIMEOUT_SECONDS * 4} s; check "
                          "that it is on and on the network.")
        return report
    if done.returncode != 0 or not done.stdout.strip():
        report.problem = _unreachable(host, local, done)
        return report
    try:
        report.facts = json.loads(done.stdout.strip().splitlines()[-1])
    except json.JSONDecodeError:
        report.problem = f"{host} answered with something other than its facts; run " \
                         f"`ssh {host} true` and make it print nothing."
        return report
    report.problem = _differences(host, report.facts, reference or report.facts, local)
    return report


def _unreachable(host: str, local: bool, done: subprocess.CompletedProcess) -> str:
    said = (done.stderr or "").strip().splitlines()
    said_text = said[-1] if said else f"exit status {done.returncode}"
    if local:
        return f"{host} (this machine): its Python failed ({said_text})."
    if done.returncode == 255:
        return (f"{host} is not reachable by SSH without a password ({said_text}); set up a "
                f"key with `ssh-copy-id {host}` (docs/distributed.md).")
    if done.returncode == 127:
        return (f"{host} has no Python at {sys.executable}; install zyquo-tui there at the "
                "same path as here.")
    return f"{host}: the check failed ({said_text})."


def _differences(host: str, facts: dict[str, Any], reference: dict[str, Any],
                 local: bool) -> str | None:
    if facts.get("python") != reference.get("python"):
        return (f"{host} runs Python {facts.get('python')} and this machine "
                f"{reference.get('python')}; use the same version on both.")
    mine, theirs = reference.get("packages") or {}, facts.get("packages") or {}
    for name in PACKAGES:
        if theirs.get(name) is None:
            return f"{host} has no {name} in {sys.executable}'s environment; install it there."
        if theirs.get(name) != mine.get(name):
            return (f"{host} has {name} {theirs.get(name)} and this machine {mine.get(name)}; "
                    "install the same version on both.")
    missing = [path for path, there in (facts.get("paths") or {}).items() if not there]
    if missing and local:
        return f"This machine has no {missing[0]}; give a path that exists here."
    if missing:
        return (f"{host} has no {missing[0]}; copy it to the same path there (for example "
                f"`rsync -a {missing[0]}/ {host}:{missing[0]}/`).")
    return None


def check_hosts(hosts: list[str], paths: list[str]) -> list[HostReport]:
    """Every host's report, this machine's facts the reference for the others."""
    here = check_host("localhost", paths, None)
    return [HostReport(host, True, here.facts, here.problem) if is_this_machine(host)
            else check_host(host, paths, here.facts or None) for host in hosts]
