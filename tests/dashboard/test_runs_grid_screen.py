"""A grid (`runs grid`) on the runs list: g folds its runs into one line (its name, how many,
their states), G compares them; Pilot tests of the flow and snapshots at 80x24 and 120x40."""

from __future__ import annotations

import pytest
from test_dashboard_fixtures import (
    T0,
    event,
    make,
    summary_of,
    training_events,
    write_events,
)
from test_dashboard_snapshots import BOTH, dashboard, fixed_world, runs_listed, until

from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.screens.compare_screen import CompareScreen
from zyquo_tui.dashboard.screens.runs_screen import RunsScreen
from zyquo_tui.dashboard.widgets.runs_table import GROUP_PREFIX, fitted_name

__all__ = ["fixed_world"]  # the fixture, used by name

GROUP = "grid-20251129-090000-000-9f9f"
GRID = ("20251129-090000-000-0001", "20251129-090000-000-0002",
        "20251129-090000-000-0003", "20251129-090000-000-0004")
ALONE = "20251129-083000-000-e5f6"


def write_grid_store(home) -> RunStore:
    """A 2 x 2 grid of learning rate and rank (two completed, one queued, one configured) and
    one run made on its own."""
    store = RunStore(home).ensure()
    values = [(1e-5, 8), (1e-5, 16), (5e-5, 8), (5e-5, 16)]
    states = [RunState.COMPLETED, RunState.COMPLETED, RunState.QUEUED, RunState.CONFIGURED]
    for number, (run_id, (rate, rank), state) in enumerate(zip(GRID, values, states)):
        summary = {}
        if state is RunState.COMPLETED:
            events = training_events(400, 400, start=T0 + 600 * number, seed=number)
            events.append(event("completed", T0 + 600 * number + 210, iteration=400))
            summary = summary_of(events)
        make(store, run_id, f"support sweep learning_rate={rate:g} rank={rank}", state,
             summary=summary, learning_rate=rate, lora_parameters={"rank": rank})
        if summary:
            write_events(store, run_id, events)

        def grouped(run):
            run.group = GROUP
        store.update(run_id, grouped)
    make(store, ALONE, "support-chat baseline", RunState.COMPLETED)
    return store


@pytest.fixture
def grid_store(fixed_world):
    return write_grid_store(fixed_world)


async def on_grid(pilot) -> None:
    """The runs list, the cursor on the grid's newest run."""
    await runs_listed(pilot)
    pilot.app.screen.table.select_run(GRID[-1])
    await pilot.pause()


async def folded(pilot) -> None:
    await on_grid(pilot)
    await pilot.press("g")
    await pilot.pause()


def footer_keys(screen) -> set[str]:
    return {key for key, active in screen.active_bindings.items()
            if active.binding.show and active.enabled}


async def test_g_folds_a_grid_into_one_line_and_back(grid_store):
    app = dashboard(grid_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await runs_listed(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        screen.table.select_run(ALONE)
        await pilot.pause()
        assert "g" not in footer_keys(screen)  # a run made on its own is in no grid
        await on_grid(pilot)
        assert {"g", "G"} <= footer_keys(screen)

        await pilot.press("g")
        await pilot.pause()
        table = screen.table
        assert table.shown_count == 2  # the grid's line and the run on its own
        [line] = [row for row in table.visible_rows() if row.id.startswith(GROUP_PREFIX)]
        assert line.name == "support sweep" and line.count == 4
        assert dict(line.states) == {"completed": 2, "queued": 1, "configured": 1}
        assert line.step == 800 and line.iters == 1600
        assert table.selected_group() == GROUP and table.selected_run_id() is None
        assert "s" not in footer_keys(screen)  # run verbs need a run, not a grid

        await pilot.press("enter")  # enter on the grid's line opens it out
        await pilot.pause()
        assert table.shown_count == 5 and table.selected_run_id() in GRID


async def test_G_compares_every_run_of_the_grid(grid_store):
    app = dashboard(grid_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await folded(pilot)
        await pilot.press("G")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                    and app.screen.comparison is not None)
        assert app.screen.run_ids == list(GRID)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)


async def test_the_filter_counts_the_grids_runs_it_matches(grid_store):
    app = dashboard(grid_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await folded(pilot)
        screen = app.screen
        screen.table.set_filter("rank=16")
        await pilot.pause()
        [line] = screen.table.visible_rows()
        assert line.count == 2 and dict(line.states) == {"completed": 1, "configured": 1}


class TestGridOnTheRunsList:
    @BOTH
    def test_a_folded_grid(self, snap_compare, grid_store, size):
        """Two lines: the grid's, at the top, whose state reads "…1 ○1 ✓2" (queued, configured,
        completed), name "▸ ×4 support sweep", progress 800/1600 with half a bar, the best
        validation loss of its runs, its group id in the ID column; then "support-chat
        baseline". Footer: g Fold grid, G Compare grid beside the usual keys."""
        assert snap_compare(dashboard(grid_store), terminal_size=size, run_before=folded)

    def test_an_open_grid_at_80_columns(self, snap_compare, grid_store):
        """The grid's runs read apart at 80 columns: "… lr=1e-05 rank=8", "… lr=1e-05
        rank=16", "… lr=5e-05 rank=8", "… lr=5e-05 rank=16" (their values, keys shortened,
        the base name "support sweep" dropped), then "support-chat baseline"."""
        assert snap_compare(dashboard(grid_store), terminal_size=(80, 24), run_before=on_grid)


def test_a_grid_runs_name_keeps_its_values_when_it_does_not_fit():
    assert fitted_name("support sweep learning_rate=1e-05 rank=16", 18) == "… lr=1e-05 rank=16"
    assert fitted_name("support sweep rank=16", 24) == "support sweep rank=16"  # it fits
    assert fitted_name("qwen lora grad_accumulation_steps=4 max_seq_length=2048", 18) == (
        "… gas=4 msl=2048")
    # a shorter key can be enough: the base stays
    assert fitted_name("qwen learning_rate=1e-4", 14) == "qwen lr=1e-4"
    # names without values are cut at the end by the table, as before
    assert fitted_name("a long name without any values", 18) == "a long name without any values"
