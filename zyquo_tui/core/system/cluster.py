"""The machines of a distributed run as mlx.launch needs them: which names are this machine,
the hostfile the launcher reads, and the command that starts one trainer per rank.

mlx.launch starts a rank on "127.0.0.1" as a local process and every other host over SSH; its
ring backend connects the ranks over the hosts' IP addresses (docs/distributed.md).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import sys
from pathlib import Path

from zyquo_tui.core.runs.failures import LAUNCH_MARKER
from zyquo_tui.core.runs.hosts import LOCAL_ADDRESS, Distribution, HostEntry

HOSTFILE_NAME = "hostfile.json"  # in the run folder: what mlx.launch was given
# The line the runner writes in trainer.log before each launch (failures.py reads after it).
LAUNCHER_MARKER = LAUNCH_MARKER


def mlx_launch_path() -> str | None:
    """mlx.launch beside this interpreter (the venv that has mlx), else on PATH."""
    beside = Path(sys.executable).parent / "mlx.launch"
    if beside.is_file():
        return str(beside)
    return shutil.which("mlx.launch")


def own_names() -> set[str]:
    """Every name and address this machine answers to (checked without SSH)."""
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
    host = socket.gethostname()
    names |= {host.split(".")[0], f"{host.split('.')[0]}.local"}
    try:
        names.add(socket.getfqdn())
    except OSError:
        pass
    try:
        import psutil

        for addresses in psutil.net_if_addrs().values():
            names |= {a.address.split("%")[0] for a in addresses
                      if a.family in (socket.AF_INET, socket.AF_INET6)}
    except Exception:  # addresses are a convenience; names still work
        pass
    return {name.lower() for name in names}


def is_this_machine(name: str) -> bool:
    return name.lower() in own_names()


def address_of(name: str) -> str | None:
    """An IPv4 address for a host name (the ring backend connects over addresses)."""
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    try:
        return socket.gethostbyname(name)
    except OSError:
        return None


def free_port(count: int) -> int:
    """A port from which `count` consecutive ports were free a moment ago (local ranks)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((LOCAL_ADDRESS, 0))
            start = probe.getsockname()[1]
        if start + count >= 65535:
            continue
        if all(_port_free(port) for port in range(start, start + count)):
            return start
    return 32323  # mlx.launch's own default


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((LOCAL_ADDRESS, port))
        except OSError:
            return False
    return True


class LaunchError(ValueError):
    """A distributed run that cannot be launched, with the sentence that says why."""


def launch_hosts(distribution: Distribution) -> list[HostEntry]:
    """The hosts as mlx.launch should get them: this machine (rank 0) as 127.0.0.1, so it is
    started without SSH, and every host with the addresses the ring connects over."""
    first = distribution.hosts[0]
    if not distribution.local_ranks and not is_this_machine(first.ssh):
        raise LaunchError(f"The first host ({first.ssh}) is not this machine; rank 0 writes "
                          "the run's files here, so list this machine first.")
    hosts = []
    for entry in distribution.hosts:
        ips = list(entry.ips)
        if not ips and distribution.backend == "ring":
            address = address_of(entry.ssh)
            if address is None:
                raise LaunchError(f"{entry.ssh} has no address this machine can find; give "
                                  "its IP address in --hosts or write a hostfile with "
                                  "`mlx.distributed_config`.")
            ips = [address]
        ssh = LOCAL_ADDRESS if is_this_machine(entry.ssh) else entry.ssh
        hosts.append(HostEntry(ssh, ips, list(entry.rdma)))
    if distribution.backend == "ring" and not distribution.local_ranks and len(hosts) > 1 \
            and any(ip.startswith("127.") for ip in hosts[0].ips):
        raise LaunchError(f"This machine's address for the ring is {hosts[0].ips[0]}, which "
                          "the other hosts cannot reach; list this machine by its network "
                          "name or address first.")
    return hosts


def remote_hosts(distribution: Distribution) -> list[str]:
    """The SSH names of the hosts other than this machine, each once."""
    seen: list[str] = []
    for entry in distribution.hosts:
        if not distribution.local_ranks and not is_this_machine(entry.ssh) \
                and entry.ssh not in seen:
            seen.append(entry.ssh)
    return seen


def launch_command(distribution: Distribution, run_dir: Path, trainer: list[str]) -> list[str]:
    """The argv that starts `trainer` once per rank with mlx.launch; writes the hostfile it
    reads into the run folder. Raises LaunchError when it cannot be launched."""
    launcher = mlx_launch_path()
    if launcher is None:
        raise LaunchError("mlx.launch was not found beside this Python or on PATH; install "
                          "mlx in zyquo-tui's environment.")
    hosts = launch_hosts(distribution)
    hostfile = run_dir / HOSTFILE_NAME
    hostfile.write_text(json.dumps({"backend": distribution.backend, "envs": distribution.envs,
                                    "hosts": [h.to_json() for h in hosts]}, indent=2),
                        encoding="utf-8")
    argv = [launcher, "--hostfile", str(hostfile), "--backend", distribution.backend]
    if distribution.local_ranks:
        argv += ["--starting-port", str(free_port(distribution.world_size))]
    if os.environ.get("PYTHONPATH") and remote_hosts(distribution):
        argv += ["--env", f"PYTHONPATH={os.environ['PYTHONPATH']}"]  # the same paths there
    return [*argv, "--", *trainer]
