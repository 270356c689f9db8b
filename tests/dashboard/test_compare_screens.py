"""The compare screen, the marks on the runs list, and samples on the live metrics screen:
Pilot tests of the flow, and snapshots at 80x24 and 120x40 from a fixed store."""

from __future__ import annotations

import pytest
from test_dashboard_fixtures import (
    T0,
    event,
    make,
    summary_of,
    training_events,
    write_checkpoints,
    write_events,
)
from test_dashboard_snapshots import (
    BOTH,
    dashboard,
    fixed_world,
    open_run,
    runs_listed,
    until,
)

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.screens.compare_screen import CompareScreen
from zyquo_tui.dashboard.screens.runs_screen import RunsScreen
from zyquo_tui.dashboard.widgets.compare_chart import BY_TOKENS, CompareChart
from zyquo_tui.dashboard.widgets.samples_panel import SamplesPanel

__all__ = ["fixed_world"]  # the fixture, used by name

SLOW = "20251129-080000-000-a1b2"
FAST = "20251129-081000-000-b2c3"
STOPPED = "20251129-082000-000-c3d4"
PROMPTS = ("How do I reset my password?", "Can I change the email on my account?")


def answer(step: int, prompt: int) -> str:
    """Answers that get better as the run learns."""
    early = ("password password the the", "account email email")
    late = ("Open Settings, choose Security, then Reset password; a link arrives by email.",
            "Yes: Settings, then Account, then Email. We send a code to confirm the change.")
    return early[prompt] if step < 100 else late[prompt] if step >= 200 else \
        late[prompt].split(",")[0] + "…"


def write_compare_store(home) -> RunStore:
    """Three completed runs of one model and dataset: two that differ in learning rate only,
    and one with rank 16 that stopped early (patience 1) and has samples at each validation."""
    store = RunStore(home).ensure()
    events = training_events(400, 400, start=T0)
    events.append(event("completed", T0 + 8 + 400 * 0.5 + 1, iteration=400))
    make(store, SLOW, "support lr 1e-5", RunState.COMPLETED, summary=summary_of(events),
         learning_rate=1e-5)
    write_events(store, SLOW, events)
    write_checkpoints(store, SLOW, [100, 200, 300, 400])

    events = training_events(400, 400, start=T0 + 600, seed=3)
    for e in events:  # a higher rate: lower losses sooner, and more tokens a step
        if e["type"] == "train":
            e["train_loss"] *= 0.85
            e["trained_tokens"] = int(e["trained_tokens"] * 1.4)
        if e["type"] == "val":
            e["val_loss"] -= 0.12
    events.append(event("completed", T0 + 600 + 8 + 400 * 0.5 + 1, iteration=400))
    make(store, FAST, "support lr 5e-5", RunState.COMPLETED, summary=summary_of(events),
         learning_rate=5e-5)
    write_events(store, FAST, events)
    write_checkpoints(store, FAST, [100, 200, 300, 400])

    events = training_events(400, 350, start=T0 + 1200, seed=5, evaluate=50)
    with_samples = []
    for e in events:
        with_samples.append(e)
        if e["type"] == "val":
            with_samples += [event("sample", e["time"], iteration=e["iteration"],
                                   prompt=prompt, text=answer(e["iteration"], i))
                             for i, prompt in enumerate(PROMPTS)]
    best_step, best_loss = metrics_of(events).best_val()
    message = (f"Stopped early: the validation loss did not improve for 1 validation; the "
               f"best was {best_loss:.4f} at step {best_step}.")
    stop = {"stop_reason": "early_stopping", "stop_message": message,
            "best_val_step": best_step, "best_checkpoint_step": best_step}
    with_samples.append(event("completed", T0 + 1200 + 8 + 350 * 0.5 + 1, iteration=350,
                              summary=stop))
    make(store, STOPPED, "support r16 patience 1", RunState.COMPLETED,
         summary={**summary_of(with_samples), **stop}, learning_rate=1e-5,
         lora_parameters={"rank": 16},
         zyquo_tui={"early_stopping_patience": 1, "sample_prompts": 2})
    write_events(store, STOPPED, with_samples)
    write_checkpoints(store, STOPPED, sorted({100, 200, best_step, 350}))
    return store


def metrics_of(events) -> RunMetrics:
    metrics = RunMetrics()
    metrics.ingest(events)
    return metrics


@pytest.fixture
def compare_store(fixed_world):
    return write_compare_store(fixed_world)


async def mark(pilot, *run_ids: str) -> None:
    await runs_listed(pilot)
    for run_id in run_ids:
        pilot.app.screen.table.select_run(run_id)
        await pilot.press("space")
    await pilot.pause()


async def open_compare(pilot, *run_ids: str, keys: tuple[str, ...] = ()) -> None:
    await mark(pilot, *run_ids)
    await pilot.press("C")
    await until(pilot, lambda: isinstance(pilot.app.screen, CompareScreen)
                and pilot.app.screen.comparison is not None)
    for key in keys:
        await pilot.press(key)
    await pilot.pause(0.2)


# -- the flow ------------------------------------------------------------------------------------


async def test_mark_two_runs_compare_them_and_come_back(compare_store):
    app = dashboard(compare_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await mark(pilot, SLOW)
        screen = app.screen
        assert isinstance(screen, RunsScreen) and screen.table.marked == [SLOW]
        assert screen.check_action("compare", ()) is None  # shown, not usable yet
        await pilot.press("C")
        assert isinstance(app.screen, RunsScreen), "one run is nothing to compare"
        await pilot.press("space")  # the same run again: unmarked
        assert screen.table.marked == []
        await mark(pilot, SLOW, FAST)
        assert "2 marked" in screen.query_one("#title").context

        await pilot.press("C")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                    and app.screen.comparison is not None)
        compare = app.screen
        assert compare.comparison.differences == {"learning_rate": [1e-5, 5e-5]}
        figures = compare.query_one("#compare-figures")
        assert figures.row_count == 2
        settings = compare.query_one("#compare-settings")
        assert [str(cell) for cell in settings.get_row_at(0)] == ["learning_rate", "1e-05",
                                                                  "5e-05"]
        chart = compare.query_one(CompareChart)
        steps_x = max(x for x, _ in chart.curves[1].train)
        await pilot.press("x")
        assert chart.axis == BY_TOKENS and chart.border_title == "Loss by tokens trained"
        assert max(x for x, _ in chart.curves[1].train) == int(400 * 900 * 1.4) != steps_x

        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen) and app.screen.table.marked == [SLOW, FAST]


async def test_samples_step_back_through_evaluations(compare_store):
    app = dashboard(compare_store)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_run(pilot, STOPPED)
        panel = app.screen.query_one(SamplesPanel)
        assert panel.display and panel.steps == [1, 50, 100, 150, 200, 250, 300, 350]
        assert panel.step == 350
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert panel.step == 250 and "step 250 (6 of 8)" in panel.border_title
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        assert panel.step == 350 and app.screen.sample_step is None  # following again


# -- snapshots -----------------------------------------------------------------------------------


class TestCompareScreen:
    @BOTH
    def test_three_runs_compared_by_step(self, snap_compare, compare_store, size):
        """Title "compare · 3 runs". The chart overlays three runs' train losses (A cyan, B
        magenta, C yellow) with their validation squares, x from 0 to 400 steps; legend
        "━━ A ━━ B ━━ C ━━ train ■ validation". Figures: best val 1.3670, 1.2868, 1.3818, all
        at step 300; C "early stopping" under Stopped, 3m04s against 3m29s; the names last
        (cut at 80 columns). Settings that differ: learning_rate (1e-05, 5e-05, 1e-05), rank
        (8, 8, 16), early_stopping_patience (–, –, 1), sample_prompts (–, –, 2). Footer:
        x Steps/tokens, esc Back."""
        assert snap_compare(dashboard(compare_store), terminal_size=size,
                            run_before=lambda pilot: open_compare(pilot, SLOW, FAST, STOPPED))

    def test_by_tokens_trained(self, snap_compare, compare_store):
        """After x: the chart's title reads "Loss by tokens trained" and its x axis ends at
        504k (B trained 1.4 times the tokens a step): B's curve is stretched to the right."""
        assert snap_compare(dashboard(compare_store), terminal_size=(80, 24),
                            run_before=lambda pilot: open_compare(pilot, SLOW, FAST,
                                                                  keys=("x",)))

    def test_marked_runs_on_the_runs_list(self, snap_compare, compare_store):
        """Two names start with ◆ in bold (the marked runs); the title bar ends "2 marked";
        the footer offers C Compare."""
        assert snap_compare(dashboard(compare_store), terminal_size=(80, 24),
                            run_before=lambda pilot: mark(pilot, SLOW, STOPPED))


class TestSamples:
    @BOTH
    def test_latest_samples_and_why_the_run_stopped(self, snap_compare, compare_store, size):
        """The early-stopped run: status line ends "stopped early · best 300" (cut at 80
        columns); a Samples
        panel "Samples at step 350 (8 of 8)" with "[ earlier ] later" shows the two prompts
        (› How do I reset my password? …) and their good answers; the latest events end with
        "completed at step 350: Stopped early: …"."""
        assert snap_compare(dashboard(compare_store), terminal_size=size,
                            run_before=lambda pilot: open_run(pilot, STOPPED))

    def test_stepping_back_to_an_early_evaluation(self, snap_compare, compare_store):
        """After [ seven times: "Samples at step 1 (1 of 8)", the first answers, still
        gibberish ("password password the the")."""
        assert snap_compare(dashboard(compare_store), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, STOPPED,
                                                              *["left_square_bracket"] * 7))
