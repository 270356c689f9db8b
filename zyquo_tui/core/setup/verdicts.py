"""How a RunDraft is judged before it becomes a run: memory, disk, hosts and duration.

`plan` and the setup form show the same verdicts of the same draft, so both come here: the
memory plan (the terms' estimate, judged by the config's replica once one is measured), the
disk verdict beside it, a distributed run's other hosts, and how long it will take. The slow
parts (the replica's measurement, token lengths, the duration's look at the store) are the
caller's to run where it suits it (a worker, or inline on the command line); this module
only puts the answers together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from zyquo_tui.core.memory.advisor import MemoryAdvisor, Plan, Verdict
from zyquo_tui.core.memory.disk_verdict import DiskAssessment, assess_disk
from zyquo_tui.core.memory.estimate import Estimate, TrainingConfig
from zyquo_tui.core.memory.host_verdicts import (
    HostVerdict,
    Placement,
    host_verdicts,
    placed_advisor,
    placement_of,
)
from zyquo_tui.core.runs.problems import Problem

if TYPE_CHECKING:
    from zyquo_tui.core.memory.duration import DurationEstimate
    from zyquo_tui.core.memory.facts import ModelFacts
    from zyquo_tui.core.setup.draft import RunDraft
    from zyquo_tui.core.store.store import RunStore
    from zyquo_tui.core.store.user_settings import Settings


@dataclass
class DraftVerdicts:
    """What a draft is judged to need: its memory plan (None while the settings have errors
    or the budget or the model's facts are unknown), its disk verdict, and a distributed
    run's other hosts (this machine's verdict is the plan's)."""

    plan: Plan | None
    disk: DiskAssessment | None = None
    hosts: list[HostVerdict] = field(default_factory=list)


def training_config(draft: "RunDraft", lengths: Sequence[int] | None = None) -> TrainingConfig:
    """The config the memory model judges: the draft's method and settings, its batches as
    wide as the longest row when the rows were counted."""
    longest = max(lengths) if lengths else None
    return TrainingConfig.from_hyperparameters(draft.method, draft.hyperparameters, longest)


def placement(draft: "RunDraft") -> Placement:
    """Where the draft's ranks train (one process here unless --ranks, --hosts, --hostfile)."""
    return placement_of(draft.hyperparameters.zyquo_tui)


def advisor_for(draft: "RunDraft", advisor: MemoryAdvisor,
                machine_limit: int | None = None) -> MemoryAdvisor:
    """The advisor of where the run trains: a distributed run is judged on one rank's share
    of the batch, with --ranks N putting N of them in this machine's memory; against the
    run's memory limit (or config.toml's) where that is below the budget."""
    where = placement(draft)
    advisor = advisor.within(draft.hyperparameters, machine_limit)
    return advisor if where.distribution is None else placed_advisor(advisor, where)


def judged_by_replica(plan: Plan, advisor: MemoryAdvisor, replica: Estimate | None) -> Plan:
    """The plan judged by its replica's estimate (core/memory/replica.py) when there is one;
    the terms' suggestions stay unless it fits."""
    if replica is None:
        return plan
    assessment = advisor.judge(replica)
    suggestions = [] if assessment.verdict is Verdict.FITS else plan.suggestions
    return Plan(assessment, suggestions, plan.token_lengths_known)


def assess(draft: "RunDraft", facts: "ModelFacts | None", advisor: MemoryAdvisor | None, *,
           lengths: Sequence[int] | None = None, replica: Estimate | None = None,
           home: Path | None = None, disk_settings: "Settings | None" = None,
           disk_free: int | None = None,
           known_hosts: dict[str, dict[str, Any]] | None = None,
           problems: Sequence[Problem] | None = None) -> DraftVerdicts:
    """The draft's verdicts (see DraftVerdicts). Without `home` there is no disk verdict;
    without `known_hosts`, other hosts are unknown. `problems` are the draft's, when the
    caller has them already (the form, on every keystroke)."""
    found = draft.problems() if problems is None else problems
    settings_ok = not any(p.is_error and p.key != "dataset" for p in found)
    if facts is None or advisor is None or not settings_ok:
        return DraftVerdicts(None)
    placed = advisor_for(draft, advisor,
                         disk_settings.memory_limit_bytes if disk_settings else None)
    plan = placed.plan(facts, training_config(draft, lengths), lengths)
    plan = judged_by_replica(plan, placed, replica)
    hosts: list[HostVerdict] = []
    where = placement(draft)
    if where.distribution is not None and known_hosts is not None:
        hosts = [verdict for verdict in host_verdicts(plan.assessment, placed, where,
                                                      known_hosts) if not verdict.local]
    disk = None
    if home is not None:
        disk = assess_disk(facts, plan.estimate.config, draft.hyperparameters, home=home,
                           settings=disk_settings, free=disk_free)
    return DraftVerdicts(plan, disk, hosts)


def duration(draft: "RunDraft", facts: "ModelFacts", store: "RunStore",
             lengths: list[int] | None = None,
             measured_tokens_per_second: float | None = None) -> "DurationEstimate":
    """How long the draft's run will take on this machine, from its nearest finished run
    (core/memory/duration.py); unknown, with the reason, when the store cannot be read."""
    from zyquo_tui.core.errors import UserError
    from zyquo_tui.core.memory.duration import DurationEstimate, estimate_duration

    data = draft.data_path if draft.data is not None and draft.data.has_train else None
    try:
        return estimate_duration(store, draft.model_path or "", facts, draft.method,
                                 draft.hyperparameters, data, lengths,
                                 measured_tokens_per_second)
    except (OSError, UserError) as error:
        return DurationEstimate(None, {"source": None, "sentence": f"unknown: {error}"})


def plan(draft: "RunDraft", *, lengths: Sequence[int] | None = None,
         home: Path | None = None) -> DraftVerdicts:
    """A draft's verdicts on this machine, for a script: its budget and measured history,
    the store's free disk, other hosts as `hosts check` last found them; judged by the terms'
    estimate (what `zyquo-tui plan --no-replica` prints; `plan` also measures a replica)."""
    from zyquo_tui.core.memory.facts import ModelFacts
    from zyquo_tui.core.memory.host_verdicts import known_hosts
    from zyquo_tui.core.store.paths import zyquo_home

    home = home or zyquo_home()
    facts = ModelFacts.from_folder(draft.model_path) if draft.model_path else None
    return assess(draft, facts, MemoryAdvisor.for_machine(home), lengths=lengths, home=home,
                  known_hosts=known_hosts(home))
