"""Snapshots of every dashboard screen at 80x24 and 120x40, from fixed data.

The store is written by test_dashboard_fixtures.py (every run state and a damaged run), under a
fixed path (paths show in the mlx-lm commands), with a fixed clock and the UTC time zone, so
each SVG is the same on every machine. Each test's docstring says what the reviewer should see.
Update with `pytest tests/dashboard/test_dashboard_snapshots.py --snapshot-update`, then look at them.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from test_dashboard_fixtures import (
    NOW,
    PREFERENCE_RUNNING,
    write_empty_store,
    write_preference_store,
    write_showcase_store,
)

from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.notify import NotificationSettings
from zyquo_tui.dashboard.widgets.filter_bar import FilterBar

SNAPSHOT_HOME = Path("/tmp/zyquo-tui-snapshots/home")
BOTH = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])

COMPLETED = "20251129-080000-000-a1b2"
RUNNING = "20251129-091500-000-c3d4"
FAILED = "20251129-083000-000-e5f6"
CANCELLED = "20251129-081000-000-a7b8"


@pytest.fixture
def fixed_world(monkeypatch, fixed_paths_turn):
    """UTC, colour on, and a fresh store at a fixed path; restored afterwards."""
    saved_tz = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    monkeypatch.delenv("NO_COLOR", raising=False)
    shutil.rmtree(SNAPSHOT_HOME, ignore_errors=True)
    monkeypatch.setenv("ZYQUO_HOME", str(SNAPSHOT_HOME))
    yield SNAPSHOT_HOME
    shutil.rmtree(SNAPSHOT_HOME.parent, ignore_errors=True)
    if saved_tz is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved_tz
    time.tzset()


@pytest.fixture
def showcase(fixed_world):
    return write_showcase_store(fixed_world)


def dashboard(store) -> ZyquoApp:
    app = ZyquoApp(store, clock=lambda: NOW,
                   notifications=NotificationSettings(desktop="off", bell=False))
    # A toast in a snapshot stays until the picture is taken, however slow the machine is.
    app.NOTIFICATION_TIMEOUT = 600
    return app


async def until(pilot, predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "the dashboard never got there"
        await pilot.pause(0.05)


async def runs_listed(pilot) -> None:
    """Wait for the first read of the store and for the live feeds of active runs (their
    ETA shows in the table once their events are read)."""
    app = pilot.app
    service = app.service
    await until(pilot, lambda: service.loaded and all(
        service.feed(run.id) is not None and service.feed(run.id).loaded
        for run in service.active_runs()))
    app.screen.refresh_rows() if hasattr(app.screen, "refresh_rows") else None
    await pilot.pause()


async def open_run(pilot, run_id: str, *keys: str) -> None:
    """Select a run in the table, open it with enter, wait for its history, press `keys`."""
    app = pilot.app
    await runs_listed(pilot)
    app.screen.table.select_run(run_id)
    await pilot.press("enter")
    await until(pilot, lambda: (app.service.feed(run_id) is not None
                                and app.service.feed(run_id).loaded))
    await pilot.pause(0.2)
    for key in keys:
        await pilot.press(key)
        await pilot.pause(0.1)
    await pilot.pause(0.2)


class TestRunsScreen:
    @BOTH
    def test_every_state_and_a_damaged_run(self, snap_compare, showcase, size):
        """Eight runs newest first, each state with its symbol and word (▶ running, … queued,
        ○ configured, ✓ completed, ✗ failed, ■ cancelled, ! interrupted) and one "? damaged"
        row whose name column gives the reason in red. Names read whole ("support-chat lora
        r32"): the Name column takes the width the columns that fit whole leave, up to ETA at
        80 columns, Method at 120 (the others are a scroll away, none cut at the edge). The
        running run shows 230/600 with a green bar, its ETA (3m05s) and, at 120 columns,
        elapsed (1h00m); the title bar says
        8 runs · 1 active · 1 queued; tab "1 Runs" is highlighted. Footer: enter Open,
        / Filter, o Sort, s Start (the selected run is configured), l Logs, k Checkpoints,
        ? Help."""
        assert snap_compare(dashboard(showcase), terminal_size=size, run_before=runs_listed)

    def test_filter_narrows_to_matching_runs(self, snap_compare, showcase):
        """After `/` and typing "chat": four runs remain, the three named support-chat and the
        full fine-tune whose dataset is support-chat; the filter bar under the table shows
        "chat" with a steady cursor; the title bar starts "4/8 runs"; the footer offers
        esc Clear filter."""
        async def run_before(pilot):
            await runs_listed(pilot)
            await pilot.press("slash")
            pilot.app.screen.query_one(FilterBar).cursor_blink = False
            await pilot.press(*"chat")
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24), run_before=run_before)

    def test_sorted_by_training_loss(self, snap_compare, showcase):
        """After `o` four times (state, name, progress, then train): rows in rising train
        loss, runs without a loss at the bottom; the Train header reads "Train↑"."""
        async def run_before(pilot):
            await runs_listed(pilot)
            await pilot.press("o", "o", "o", "o")
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24), run_before=run_before)

    @BOTH
    def test_first_launch_offers_the_sample(self, snap_compare, fixed_world, size):
        """An empty store: no table, a panel saying "No runs yet." with b to build the sample
        model then t to train it, and how to add runs from the CLI. Footer: only b Build sample
        and ? Help (nothing to open, filter or sort)."""
        store = write_empty_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=size, run_before=runs_listed)


class TestLiveMetricsScreen:
    @BOTH
    def test_running_run(self, snap_compare, showcase, size):
        """The running dora run: "▶ running" and its name on top, then step 230/600, a green
        bar at 38%, elapsed 1h00m, ETA 3m05s, 2.0 it/s. Six sparklines (train loss, val loss,
        tokens/s, learn rate, peak MLX, peak RSS) with current values 1.4707, 1.6811, 1890,
        8.08e-06, 2.9 GiB, 3.2 GiB. The loss chart: y axis from about 1.30 to 3.95, x from 0 to 600 with data up
        to 230; validation (orange) above the train line; legend "train, smoothed / raw /
        validation". Latest events: val at 200, checkpoint at 200, train at 230. Footer:
        s Smoothing, c Cancel, k Checkpoints, l Logs, esc Back, ? Help."""
        assert snap_compare(dashboard(showcase), terminal_size=size,
                            run_before=lambda pilot: open_run(pilot, RUNNING))

    @BOTH
    def test_failed_run_says_why_and_what_to_try(self, snap_compare, showcase, size):
        """The failed full fine-tune: "✗ failed", step 140/1000 at 14%, no ETA. At the bottom
        a red-edged panel: "failed (oom): The trainer ran out of memory." and "Try: lower
        batch_size or max_seq_length, ...". At 120x40 the latest events above it, the last
        line saying failed at step 143 (oom); at 80x24 no events box: the panel has its place
        and the loss chart keeps eight rows of plot. Footer offers r Resume, not c
        Cancel."""
        assert snap_compare(dashboard(showcase), terminal_size=size,
                            run_before=lambda pilot: open_run(pilot, FAILED))

    def test_completed_run_with_smoothing_off(self, snap_compare, showcase):
        """The completed run after `s`: the chart draws the raw train loss in full colour (no
        faint copy) and the legend reads "train / validation"; the train loss sparkline shows
        raw values. Step 400/400, 100%, elapsed 3m29s, no ETA; no cancel or resume in the
        footer."""
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, COMPLETED, "s"))

    def test_cancel_asks_first(self, snap_compare, showcase):
        """`c` on the running run: a modal asks "Cancel support-chat dora?", explains that the
        trainer saves a checkpoint (about step 230) and stops and that r resumes it, with
        buttons "Keep running (n)" (focused) and "Cancel run (y)"."""
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, RUNNING, "c"))

    def test_help_lists_the_keys_of_this_screen(self, snap_compare, showcase):
        """`?` on the running run's metrics: a modal with the Run keys (s smoothing, c cancel,
        k checkpoints, l logs, esc back, g try, each with a sentence), then the keys that work
        everywhere (1 2 3 4, ?, ctrl+p, esc, q), then the reminder that closing the dashboard
        never stops training."""
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, RUNNING, "question_mark"))

    def test_without_colour(self, snap_compare, showcase, monkeypatch):
        """NO_COLOR set: the running run in monochrome. Everything still reads: state as
        "▶ running", the bar, values, and the chart's raw train dots dimmer than the smoothed
        line and the validation line in bold."""
        monkeypatch.setenv("NO_COLOR", "1")
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, RUNNING))


class TestPreferenceRuns:
    """A running DPO run, a completed ORPO run and an SFT run (test_dashboard_fixtures.py
    write_preference_store)."""

    @BOTH
    def test_live_metrics_of_a_dpo_run(self, snap_compare, fixed_world, size):
        """The running DPO run "helpful pairs": the status line reads "lora dpo ·
        Qwen2.5-0.5B-Instruct-4bit · helpful-pairs", step 260/400. Seven sparklines: the five
        of every run, then "margin" (rising, about 2.4) and "reward acc" (rising, about 91%).
        The chart is the loss (border title "Loss"), falling from about 0.72. The footer
        offers v Chart beside s Smoothing."""
        store = write_preference_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=size,
                            run_before=lambda pilot: open_run(pilot, PREFERENCE_RUNNING))

    def test_v_charts_the_reward_margin(self, snap_compare, fixed_world):
        """After v: the chart's border title is "Reward margin", its y axis from about -0.1 to
        2.6; the train margin rises from 0 (smoothed, raw faintly behind) and the validation
        margin (orange squares) follows below it."""
        store = write_preference_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, PREFERENCE_RUNNING, "v"))

    def test_the_runs_list_tags_preference_runs(self, snap_compare, fixed_world):
        """Three runs: "dpo helpful pairs" (running) and "dpo"/"orpo" in magenta before the
        preference runs' names; the SFT run "support-chat lora r16" has no tag."""
        store = write_preference_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=(80, 24), run_before=runs_listed)


class TestCheckpointsScreen:
    @BOTH
    def test_best_checkpoint_marked(self, snap_compare, showcase, size):
        """The completed run's checkpoints 100, 200, 300, 400 with validation losses 2.3795,
        1.6475, 1.3670, 1.5083; step 300 carries "★ best" and has the cursor; each is
        "exact" (resumable), 12.8 MiB, saved 2025-11-29 08:00 to 08:03. Above: "completed ·
        4 checkpoint(s), 51.0 MiB · best: step 300 (val 1.3670)" and "Retention: keep every
        checkpoint". Footer: enter mlx-lm, f Fork, d Delete, t Retention, g Try, e Export,
        l Logs, esc Back; no resume (the run completed)."""
        assert snap_compare(dashboard(showcase), terminal_size=size,
                            run_before=lambda pilot: open_run(pilot, COMPLETED, "k"))

    @BOTH
    def test_mlx_lm_commands_for_a_step(self, snap_compare, showcase, size):
        """enter on step 300: a modal "Generate with step 300 of support-chat lora r16" with
        the commands: mkdir of a step-0000300 folder, cp of adapter_config.json and of
        0000300_adapters.safetensors as adapters.safetensors, mlx_lm generate with
        --adapter-path that folder, and mlx_lm fuse. Footer: y Copy all, esc Close."""
        assert snap_compare(dashboard(showcase), terminal_size=size,
                            run_before=lambda pilot: open_run(pilot, COMPLETED, "k", "enter"))

    def test_delete_asks_first(self, snap_compare, showcase):
        """`d` on step 300: "Delete the checkpoint of step 300?", its weights and resume state
        (12.8 MiB) removed for good, and a warning that it is the best checkpoint; buttons
        "Keep (n)" (focused) and "Delete (y)"."""
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, COMPLETED, "k", "d"))

    def test_retention_choices(self, snap_compare, showcase):
        """`t` on the completed run: a modal saying the choice applies now (it has completed),
        listing "Keep every checkpoint" (highlighted) and "Keep the best and the last", "... last 2",
        3, 5 and 10."""
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, COMPLETED, "k", "t"))

    def test_cancelled_run_can_resume_from_a_checkpoint(self, snap_compare, showcase):
        """The cancelled qlora run's checkpoints 100 and 183, both exact; the footer offers
        r Resume besides fork, delete, retention, try, export and eval (logs cut at 80
        columns)."""
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, CANCELLED, "k"))


class TestLogsScreen:
    @BOTH
    def test_trainer_log_followed(self, snap_compare, showcase, size):
        """The running run's trainer.log, scrolled to its end (step 230 the last line), title
        "Logs (following) · support-chat dora · running". Footer: f Follow, g Top, G End,
        c Cancel, k Checkpoints, esc Back."""
        assert snap_compare(dashboard(showcase), terminal_size=size,
                            run_before=lambda pilot: open_run(pilot, RUNNING, "l"))

    def test_paused_at_the_top(self, snap_compare, showcase):
        """After `g`: the log from its first line ("Loading pretrained model ..."), and the
        title starts "Logs (paused, f follows)"."""
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, RUNNING, "l", "g"))
