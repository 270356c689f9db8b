"""Where a run trains: one process, N processes on this machine, or one process per host.

A distributed run is launched with MLX's own `mlx.launch` (docs/distributed.md): `--ranks N`
starts N processes here (the way to test it on one machine, useful nowhere else), `--hosts
A,B` or `--hostfile FILE` (MLX's hostfile format, as `mlx.distributed_config` writes it) one
process per host. The hosts' first entry is rank 0, which writes the run's files, so it must
be this machine. This module reads those settings; it runs nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from zyquo_tui.core.runs.problems import ERROR, Problem

BACKENDS = ("ring", "jaccl", "mpi")
DEFAULT_BACKEND = "ring"
LOCAL_ADDRESS = "127.0.0.1"  # mlx.launch starts a rank on this "host" without SSH


@dataclass(frozen=True)
class HostEntry:
    """One rank's host as mlx.launch's hostfile has it: the name to SSH to, the addresses the
    ring backend connects over, and (jaccl) the RDMA devices to each other host."""

    ssh: str
    ips: list[str] = field(default_factory=list)
    rdma: list[Any] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"ssh": self.ssh, "ips": list(self.ips)}
        if self.rdma:
            entry["rdma"] = list(self.rdma)
        return entry


@dataclass(frozen=True)
class Distribution:
    """The ranks of a distributed run: one host entry per rank, rank 0 first."""

    hosts: list[HostEntry]
    backend: str = DEFAULT_BACKEND
    envs: list[str] = field(default_factory=list)
    local_ranks: bool = False  # --ranks N: every rank on this machine

    @property
    def world_size(self) -> int:
        return len(self.hosts)


class HostfileError(ValueError):
    """A hostfile that cannot be used, with the sentence that says why."""


def read_hostfile(path: str) -> tuple[list[HostEntry], str, list[str]]:
    """(hosts, backend, envs) of an mlx.launch hostfile: a JSON list of {"ssh", "ips", "rdma"}
    or an object with "hosts" (and optionally "backend" and "envs")."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise HostfileError(f"{path}: no such hostfile; write one with "
                            "`mlx.distributed_config` or give --hosts.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise HostfileError(f"{path}: the hostfile cannot be read ({error}).") from None
    except json.JSONDecodeError as error:
        raise HostfileError(f"{path}:{error.lineno}: the hostfile is not JSON ({error.msg}); "
                            "mlx.launch's format is a list of {\"ssh\": ..., \"ips\": [...]}."
                            ) from None
    backend, envs = "", []
    if isinstance(data, dict):
        backend = data.get("backend") or ""
        envs = data.get("envs") or []
        data = data.get("hosts")
    if not isinstance(data, list) or not data:
        raise HostfileError(f"{path}: the hostfile lists no hosts; mlx.launch's format is a "
                            "list of {\"ssh\": ..., \"ips\": [...]}.")
    hosts = []
    for number, entry in enumerate(data, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("ssh"), str) \
                or not entry["ssh"].strip():
            raise HostfileError(f"{path}: host {number} has no \"ssh\" name.")
        hosts.append(HostEntry(entry["ssh"], list(entry.get("ips") or []),
                               list(entry.get("rdma") or [])))
    return hosts, backend, [str(e) for e in envs]


def distribution_of(own: dict[str, Any] | None) -> Distribution | None:
    """The run's ranks from its own settings (hyperparameters.zyquo_tui), or None for a run in
    one process. Raises HostfileError for a hostfile that cannot be used."""
    own = own or {}
    ranks, hosts, hostfile = own.get("ranks"), own.get("hosts"), own.get("hostfile")
    backend = own.get("backend")
    if isinstance(ranks, int) and ranks > 1:
        return Distribution([HostEntry(LOCAL_ADDRESS, [LOCAL_ADDRESS])] * ranks,
                            backend or DEFAULT_BACKEND, local_ranks=True)
    if isinstance(hosts, list) and len(hosts) > 1:
        return Distribution([HostEntry(str(h)) for h in hosts], backend or DEFAULT_BACKEND)
    if isinstance(hostfile, str) and hostfile:
        entries, file_backend, envs = read_hostfile(hostfile)
        if len(entries) > 1:
            return Distribution(entries, backend or file_backend or DEFAULT_BACKEND, envs)
    return None


def world_size_of(own: dict[str, Any] | None) -> int:
    """How many processes train the run (1 when it is not distributed, or the hostfile is
    unreadable: its own check says so)."""
    try:
        found = distribution_of(own)
    except HostfileError:
        return 1
    return found.world_size if found else 1


# -- checks (core/runs/settings.py calls them) ------------------------------------------------


class HostNames:
    """A list of at least two host names or addresses, this machine first."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if (not isinstance(value, list) or len(value) < 2
                or not all(isinstance(name, str) and name.strip() for name in value)):
            sentence = (f"{called} must be two or more host names or addresses, "
                        f"comma-separated, this machine first; not {value!r}.")
            return [(ERROR, sentence)]
        return []


class HostfileCheck:
    """An mlx.launch hostfile that exists and lists hosts."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not isinstance(value, str) or not value.strip():
            return [(ERROR, f"{called} must be the path of an mlx.launch hostfile.")]
        try:
            read_hostfile(value)
        except HostfileError as error:
            return [(ERROR, str(error))]
        return []


def distribution_problems(batch_size: Any, own: dict[str, Any] | None) -> list[Problem]:
    """One way of naming the ranks at most, and a batch that splits evenly across them (each
    rank trains batch_size / ranks rows of every step, as mlx-lm splits it)."""
    own = own or {}
    given = [key for key in ("ranks", "hosts", "hostfile") if own.get(key) is not None]
    if len(given) > 1:
        return [Problem(given[1], f"{' and '.join(given)} both name the processes of a run; "
                                  "give one of --ranks, --hosts or --hostfile.")]
    size = world_size_of(own)
    if size > 1 and isinstance(batch_size, int) and batch_size % size:
        key = given[0] if given else "ranks"
        return [Problem("batch_size", f"batch_size ({batch_size}) must divide by the {size} "
                                      f"processes of the run ({key}): each trains an equal "
                                      f"share of every batch; use {size * max(1, batch_size // size)} "
                                      f"or {size * (batch_size // size + 1)}.")]
    return []
