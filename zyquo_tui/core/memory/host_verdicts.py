"""The memory verdict of a distributed run, host by host (docs/memory.md, docs/distributed.md).

Each rank trains batch_size / world_size rows of every step, so the estimate is one rank's
(MemoryAdvisor.placed). The ranks on this machine share its memory: with `--ranks N` all N,
so N x the per-rank estimate against this machine's budget. Another host trains one rank in
its own memory: the per-rank estimate against the free memory `hosts check` last reported for
it (core/store/known_hosts.py); no check has reached it, its verdict is unknown, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zyquo_tui.core.formatting import fmt_bytes, fmt_datetime
from zyquo_tui.core.memory.advisor import (
    Assessment,
    MemoryAdvisor,
    Verdict,
    tight_fraction,
)
from zyquo_tui.core.memory.estimate import Estimate
from zyquo_tui.core.runs.hosts import Distribution, HostfileError, distribution_of
from zyquo_tui.core.store.known_hosts import load_known_hosts
from zyquo_tui.core.system.cluster import is_this_machine

# Worst last: the order in which verdicts are combined.
_SEVERITY = {Verdict.FITS: 0, Verdict.TIGHT: 1, Verdict.WONT_FIT: 2}


@dataclass
class HostVerdict:
    """One host of a distributed run: its ranks, what they need and whether it has it
    (verdict None: not known, `reason` says why)."""

    host: str
    local: bool
    ranks: list[int]
    need_bytes: int
    verdict: Verdict | None
    reason: str
    budget_bytes: int | None = None  # this machine: what training may use
    free_bytes: int | None = None  # free memory now (here) or when `hosts check` last ran
    checked_at: float | None = None  # another host: when that check ran

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "local": self.local, "ranks": list(self.ranks),
                "estimate_bytes": self.need_bytes,
                "verdict": self.verdict.value if self.verdict else None,
                "reason": self.reason, "budget_bytes": self.budget_bytes,
                "free_memory_bytes": self.free_bytes, "checked_at": self.checked_at}


@dataclass
class Placement:
    """Where a run's ranks train: the hosts in rank order, grouped by machine."""

    distribution: Distribution | None
    # (host name, is this machine, its ranks), this machine first
    machines: list[tuple[str, bool, list[int]]] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return self.distribution.world_size if self.distribution else 1

    @property
    def ranks_here(self) -> int:
        return sum(len(ranks) for _, local, ranks in self.machines if local) or 1


def placement_of(own: dict[str, Any] | None) -> Placement:
    """The run's placement from its own settings (hyperparameters.zyquo_tui); an unreadable
    hostfile counts as one process (its own check says what is wrong)."""
    try:
        found = distribution_of(own)
    except HostfileError:
        found = None
    if found is None:
        return Placement(None)
    machines: dict[str, tuple[str, bool, list[int]]] = {}
    for rank, entry in enumerate(found.hosts):
        local = found.local_ranks or is_this_machine(entry.ssh)
        key = "" if local else entry.ssh  # every name of this machine is one machine
        _, _, ranks = machines.setdefault(key, (entry.ssh, local, []))
        ranks.append(rank)
    ordered = sorted(machines.values(), key=lambda machine: not machine[1])
    return Placement(found, ordered)


def placed_advisor(advisor: MemoryAdvisor, placement: Placement) -> MemoryAdvisor:
    return advisor.placed(placement.world_size, placement.ranks_here)


def host_verdicts(assessment: Assessment, advisor: MemoryAdvisor, placement: Placement,
                  known: dict[str, dict[str, Any]]) -> list[HostVerdict]:
    """Every machine's verdict: this one's is `assessment` (from the placed advisor), the
    others' the per-rank estimate against the free memory `known` records for them."""
    estimate = assessment.estimate
    verdicts = []
    for host, local, ranks in placement.machines:
        if local:
            verdicts.append(HostVerdict(
                host, True, ranks, estimate.total_bytes * len(ranks), assessment.verdict,
                assessment.reason, assessment.budget.budget_bytes,
                assessment.budget.available_bytes))
        else:
            verdicts.append(_remote(host, ranks, estimate, known.get(host),
                                    tight_fraction(advisor.coefficients)))
    return verdicts


def _remote(host: str, ranks: list[int], estimate: Estimate, known: dict[str, Any] | None,
            tight: float) -> HostVerdict:
    need = estimate.total_bytes * len(ranks)
    which = (f"rank {ranks[0]}" if len(ranks) == 1
             else f"ranks {', '.join(map(str, ranks))}")
    free = (known or {}).get("free_memory_bytes")
    if not isinstance(free, int) or free <= 0:
        return HostVerdict(host, False, ranks, need, None,
                           f"unknown: no `zyquo-tui hosts check` has reached {host} yet, so its "
                           f"free memory is not known ({which} need about "
                           f"{fmt_bytes(need)}); run it to judge.")
    checked_at = known.get("checked_at")
    when = (f"when `hosts check` last reached it ({fmt_datetime(checked_at)})" if checked_at
            else "when `hosts check` last reached it")
    verdict = Verdict.of(need, free, tight)
    if verdict is Verdict.WONT_FIT:
        said = f"more than the {fmt_bytes(free)} {host} had free {when}."
    else:
        said = f"{need / free:.0%} of the {fmt_bytes(free)} {host} had free {when}" + (
            ": within the estimate's error of it." if verdict is Verdict.TIGHT else ".")
    return HostVerdict(host, False, ranks, need, verdict,
                       f"needs about {fmt_bytes(need)} for {which}: {said}",
                       None, free, checked_at)


def worst(verdicts: list[HostVerdict]) -> HostVerdict | None:
    """The host whose known verdict is the worst (this machine on a tie); None if none known."""
    known = [v for v in verdicts if v.verdict is not None]
    return max(known, key=lambda v: _SEVERITY[v.verdict], default=None)


def known_hosts(home: Path | None) -> dict[str, dict[str, Any]]:
    from zyquo_tui.core.store.paths import zyquo_home

    return load_known_hosts(home or zyquo_home())


def gate_hosts(run: Any, assessment: Assessment, advisor: MemoryAdvisor, placement: Placement,
               known: dict[str, dict[str, Any]], *, override: bool = False) -> list[HostVerdict]:
    """After this machine's gate (advisor.gate, with the placed advisor): record every host's
    verdict in run.memory["hosts"], and refuse a run another host is known to have too little
    free memory for, unless `override` (recorded, as for this machine)."""
    from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError

    verdicts = host_verdicts(assessment, advisor, placement, known)
    short = [v for v in verdicts if not v.local and v.verdict is Verdict.WONT_FIT]
    run.memory = {**(run.memory or {}), "world_size": placement.world_size,
                  "per_rank_batch_size": advisor.rank_config(assessment.estimate.config
                                                             ).batch_size,
                  "hosts": [v.to_json() for v in verdicts]}
    if short and override:
        run.memory["override"] = True
    if short and not override:
        host = short[0]
        raise UserError(f"This run won't fit in {host.host}'s memory: rank {host.ranks[0]} "
                        f"{host.reason[:-1]}; run `zyquo-tui hosts check` again if that has "
                        "changed, give it a smaller batch or start it with an explicit "
                        "override (--override-memory).", EXIT_PROBLEMS)
    return verdicts
