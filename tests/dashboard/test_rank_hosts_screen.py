"""The hosts of a distributed run on its metrics screen: each machine's ranks, whether they
live (checked in a worker), their peak memory and the memory verdict of each host.
Pilot tests and snapshots at 80x24 and 120x40 of a 2-rank run (a stand-in process plays
the ranks, so liveness is real)."""

from __future__ import annotations

import socket

import pytest
from test_dashboard_fixtures import (
    T0,
    alive_process,
    event,
    make,
    summary_of,
    training_events,
    write_events,
)
from test_dashboard_snapshots import BOTH, dashboard, fixed_world, open_run, until

from zyquo_tui.core.formatting import fmt_bytes
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.widgets.rank_hosts import RankHosts

__all__ = ["fixed_world"]  # the fixture, used by name

TWO_RANKS = "20251129-091500-000-d1d1"
TWO_HOSTS = "20251129-092000-000-d2d2"
SINGLE = "20251129-080000-000-a1b2"


def write_distributed_store(home, *, rank_one_gone: bool = False,
                            every_ranks_peak: bool = True) -> RunStore:
    """A 2-rank run training on this machine (--ranks 2), its ranks recorded as the trainer
    records them; one on two hosts whose other host cannot be reached; a run in one process."""
    store = RunStore(home).ensure()
    process = alive_process()
    rank = {"pid": process["pid"], "start_time": process["start_time"],
            "host": socket.gethostname()}
    gone = {**rank, "start_time": rank["start_time"] + 1000} if rank_one_gone else rank
    events = training_events(600, 230, start=T0 + 3600, seed=2)
    events[0]["world_size"] = 2
    for train in (e for e in events if e["type"] == "train" and every_ranks_peak):
        # rank 1 peaks a little higher
        train["rank_peak_memory_bytes"] = [train["peak_memory_bytes"],
                                           train["peak_memory_bytes"] + 200 * 2**20]
    memory = {"verdict": "fits", "world_size": 2, "per_rank_batch_size": 2,
              "hosts": [{"host": "127.0.0.1", "local": True, "ranks": [0, 1],
                         "estimate_bytes": 6_400_000_000, "verdict": "fits"}]}
    run = make(store, TWO_RANKS, "support-chat 2 ranks", RunState.RUNNING, iters=600,
               summary=summary_of(events), zyquo_tui={"ranks": 2},
               process={**process, "world_size": 2,
                        "ranks": [{"rank": 0, **rank}, {"rank": 1, **gone}]})
    store.update(run.id, lambda r: setattr(r, "memory", memory))
    write_events(store, TWO_RANKS, events)

    other = {**rank, "host": "mini-two"}
    events = training_events(600, 100, start=T0 + 3900, seed=3)
    run = make(store, TWO_HOSTS, "support-chat two minis", RunState.RUNNING, iters=600,
               summary=summary_of(events), zyquo_tui={"hosts": ["localhost",
                                                              "mini-two.invalid"]},
               process={**process, "world_size": 2,
                        "ranks": [{"rank": 0, **rank}, {"rank": 1, **other}]})
    write_events(store, TWO_HOSTS, events)

    events = training_events(400, 400, start=T0)
    events.append(event("completed", T0 + 210, iteration=400))
    make(store, SINGLE, "support-chat lora r16", RunState.COMPLETED, summary=summary_of(events))
    write_events(store, SINGLE, events)
    return store


@pytest.fixture
def distributed_store(fixed_world):
    return write_distributed_store(fixed_world)


def hosts_line(app) -> str:
    return app.screen.query_one(RankHosts).text.plain


async def open_checked(pilot, run_id: str) -> None:
    """Open the run and wait until its ranks have been checked."""
    await open_run(pilot, run_id)
    await until(pilot, lambda: pilot.app.screen.ranks_alive is not None, timeout=30)
    await pilot.pause(0.2)


async def test_both_ranks_on_this_machine_are_alive_with_their_largest_peak(distributed_store):
    app = dashboard(distributed_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_checked(pilot, TWO_RANKS)
        assert app.screen.query_one(RankHosts).display
        peaks = app.service.feed(TWO_RANKS).metrics.rank_peaks
        assert len(peaks) == 2 and peaks[1] > peaks[0]
        line = hosts_line(app)
        assert line == f"hosts   this machine r0,1 ● 2 alive · peak {fmt_bytes(peaks[1])} · fits"


async def test_events_written_before_every_ranks_peak_show_rank_0s(fixed_world):
    app = dashboard(write_distributed_store(fixed_world, every_ranks_peak=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await open_checked(pilot, TWO_RANKS)
        peak = app.service.feed(TWO_RANKS).metrics.series["peak_memory_bytes"].last
        assert f"this machine r0,1 ● 2 alive · r0 peak {fmt_bytes(int(peak))} · fits" in (
            hosts_line(app))


async def test_a_rank_that_is_gone_is_said(fixed_world):
    app = dashboard(write_distributed_store(fixed_world, rank_one_gone=True))
    async with app.run_test(size=(120, 40)) as pilot:
        await open_checked(pilot, TWO_RANKS)
        assert "○ 1 of 2 gone" in hosts_line(app)


async def test_another_host_that_cannot_be_reached_is_not_reachable(distributed_store):
    app = dashboard(distributed_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_checked(pilot, TWO_HOSTS)
        line = hosts_line(app)
        assert "this machine r0 ● alive" in line
        assert "mini-two.invalid r1 ? not reachable" in line


async def test_a_run_in_one_process_has_no_hosts_line(distributed_store):
    app = dashboard(distributed_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_run(pilot, SINGLE)
        assert not app.screen.query_one(RankHosts).display
        assert not [w for w in app.screen.workers if w.group == "ranks"]


class TestRankHosts:
    @BOTH
    def test_a_two_rank_run(self, snap_compare, distributed_store, size):
        """The running 2-rank run: under its two status lines, one more: "hosts   this
        machine r0,1 ● 2 alive · peak 3.1 GiB · fits" (green dot and verdict; rank 1's peak,
        the larger); the sparklines,
        chart and events below as for any run."""
        assert snap_compare(dashboard(distributed_store), terminal_size=size,
                            run_before=lambda pilot: open_checked(pilot, TWO_RANKS))
