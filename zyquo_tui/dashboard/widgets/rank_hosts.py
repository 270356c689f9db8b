"""RankHosts: the hosts of a distributed run on one line: each machine's ranks, whether they
live, their peak memory and the memory verdict each host was given at the start."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from zyquo_tui.core.formatting import fmt_bytes
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.dashboard.widgets.live_text import LiveText

# Not alive, alive, not reachable: how a rank reads (a symbol and a style).
ALIVE_LOOK = {True: ("●", "green"), False: ("○", "red"), None: ("?", "yellow")}
VERDICT_STYLE = {"fits": "green", "tight": "yellow", "won't fit": "red"}
THIS_MACHINE = "this machine"


@dataclass
class Machine:
    """One machine of the run: its name, its ranks, and what is known of them."""

    name: str
    local: bool
    ranks: list[int]
    verdict: str | None = None


def machines_of(run: Run) -> list[Machine]:
    """The machines of a distributed run, this one first, with the memory verdict the start
    gave each. Looks up this machine's names (and may read a hostfile): call it from a
    worker."""
    from zyquo_tui.core.memory.host_verdicts import placement_of

    placement = placement_of(run.hyperparameters.zyquo_tui)
    machines = [Machine(THIS_MACHINE if local else name, local, list(ranks))
                for name, local, ranks in placement.machines]
    for host in (run.memory or {}).get("hosts") or []:
        for machine in machines:
            if machine.local == bool(host.get("local")) and (
                    machine.local or machine.name == host.get("host")):
                machine.verdict = host.get("verdict") or "unknown"
    return machines


def world_size(run: Run) -> int:
    recorded = (run.process or {}).get("world_size")
    if isinstance(recorded, int):
        return recorded
    from zyquo_tui.core.runs.hosts import world_size_of

    return world_size_of(run.hyperparameters.zyquo_tui)


class RankHosts(LiveText):
    """One line under the run's status, for a run of more than one process: per machine its
    ranks (r0, r1...), ● alive / ○ gone / ? not reachable (the screen checks in a worker while
    the run is active), its ranks' largest peak memory (every rank's comes with the train
    events) and the memory verdict the start gave that host."""

    DEFAULT_CSS = """
    RankHosts { height: 1; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, run: Run, machines: list[Machine], alive: list[bool | None] | None,
             peaks: list[int]) -> None:
        """`alive`: each rank's liveness as last checked (None: not checked yet); `peaks`:
        each rank's latest peak memory, by rank (rank 0's alone for runs whose events predate
        every rank's)."""
        text = Text("hosts", style="bold")
        for machine in machines:
            text.append("   ")
            text.append(machine.name)
            text.append(" r" + ",".join(map(str, machine.ranks)), style="dim")
            text.append(" ")
            text.append_text(self._state(run, machine, alive))
            known = [peaks[rank] for rank in machine.ranks if rank < len(peaks)]
            if known:
                # a machine's largest: what its memory must hold for each of its ranks
                which = f"r{machine.ranks[0]} " if len(known) < len(machine.ranks) else ""
                text.append(f" · {which}peak {fmt_bytes(max(known))}")
            if machine.verdict:
                text.append(" · ")
                text.append(machine.verdict, style=VERDICT_STYLE.get(machine.verdict, "dim"))
        self.text = text

    @staticmethod
    def _state(run: Run, machine: Machine, alive: list[bool | None] | None) -> Text:
        if run.state in (RunState.CONFIGURED, RunState.QUEUED):
            return Text("waiting", style="dim")
        if not run.state.is_active:
            return Text("ended", style="dim")
        if alive is None:
            return Text("checking…", style="dim")
        known = [alive[rank] for rank in machine.ranks if rank < len(alive)]
        if not known:
            return Text("starting", style="dim")
        if all(state is True for state in known):
            symbol, style = ALIVE_LOOK[True]
            word = "alive" if len(known) == 1 else f"{len(known)} alive"
        elif any(state is False for state in known):
            symbol, style = ALIVE_LOOK[False]
            gone = sum(state is False for state in known)
            word = "gone" if len(known) == 1 else f"{gone} of {len(known)} gone"
        else:
            symbol, style = ALIVE_LOOK[None]
            word = "not reachable"
        return Text(f"{symbol} {word}", style=style)
