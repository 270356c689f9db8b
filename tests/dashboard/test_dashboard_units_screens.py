"""The dashboard's parts one by one: history loading, display series, retention, notifications,
keys and palette, quitting, run endings, and that the dashboard never imports mlx."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_dashboard_fixtures import (
    NOW,
    T0,
    event,
    make,
    training_events,
    write_checkpoints,
    write_events,
    write_showcase_store,
)

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.checkpoints import list_checkpoints
from zyquo_tui.core.store.retention import (
    RetentionPolicy,
    save_policy,
)
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system.liveness import identity
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.dialogs.adapter_command import adapter_commands
from zyquo_tui.dashboard.messages import RunEnded
from zyquo_tui.dashboard.notify import (
    NotificationSettings,
)
from zyquo_tui.dashboard.run_feed import RunFeed, load_history
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen
from zyquo_tui.dashboard.screens.runs_screen import RunsScreen

QUIET = NotificationSettings(desktop="off", bell=False)


REPO = Path(__file__).resolve().parents[2]


def random_stream(seed: int) -> list[dict]:
    """Sessions with resumes (which rewrite later steps), warnings, checkpoints, odd events."""
    rng = random.Random(seed)
    events = training_events(300, rng.randint(20, 300), start=T0, report=rng.choice([1, 2, 5]))
    resume_at = rng.choice([c["iteration"] for c in events if c["type"] == "checkpoint"] or [0])
    events.append(event("cancelled", T0 + 500, iteration=resume_at, checkpoint=resume_at))
    events += training_events(300, 300, start=T0 + 600, resumed_from=resume_at or None,
                              report=2, seed=3)
    events.insert(rng.randint(1, len(events) - 1),
                  event("warning", T0 + 1, code="truncated", message="rows were cut"))
    events.insert(rng.randint(1, len(events) - 1),
                  event("train", T0 + 2, iteration=7, train_loss=1.0, rank=1))  # another shape
    events.append(event("completed", T0 + 900, iteration=300))
    return events


@pytest.mark.parametrize("seed", range(6))
def test_fast_history_load_matches_run_metrics(tmp_path, seed):
    path = tmp_path / "events.jsonl"
    stream = random_stream(seed)
    text = "".join(json.dumps(e) + "\n" for e in stream)
    path.write_text(text + '{"v": 1, "type": "train", "iter')  # a write in progress
    expected = RunMetrics()
    expected.ingest(read_events(path))

    history = load_history(path)

    assert history.offset == len(text.encode())
    got = history.metrics
    for name, series in expected.series.items():
        assert list(got.series[name].steps) == series.steps, name
        assert list(got.series[name].values) == pytest.approx(series.values), name
    assert got.summary() == expected.summary()
    assert got.checkpoints.keys() == expected.checkpoints.keys()
    assert len(got.warnings) == len(expected.warnings)


def test_feed_folds_live_bursts_like_a_full_reload(tmp_path):
    stream = random_stream(1)
    feed = RunFeed("r")
    feed.adopt(load_history(tmp_path / "missing.jsonl"))
    for start in range(0, len(stream), 37):
        feed.ingest(stream[start:start + 37])
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in stream))
    reloaded = RunFeed("r")
    reloaded.adopt(load_history(path))
    for name in feed.display:
        assert feed.display[name].in_order() == pytest.approx(
            reloaded.display[name].in_order()), name


def test_adapter_commands_run_in_a_shell(tmp_path):
    """The block pastes into sh as it is: mkdir and cp leave the step's adapter where
    --adapter-path points (mlx_lm itself replaced by a stub that prints its arguments)."""
    store = write_showcase_store(tmp_path / "my home", with_running=False)  # a space, too
    adapters = store.adapters_dir("20251129-080000-000-a1b2")
    checkpoint = {c.step: c for c in list_checkpoints(adapters)}[300]
    script = adapter_commands("/models/m", adapters, checkpoint, latest_step=400)
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "mlx_lm").write_text('#!/bin/sh\nprintf "%s|" "$@"; echo\n')
    (stub / "mlx_lm").chmod(0o755)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                          env={"PATH": f"{stub}:/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    target = adapters.parent / "step-0000300"
    copied = (target / "adapters.safetensors").stat().st_size
    assert copied == checkpoint.adapter_path.stat().st_size
    assert (target / "adapter_config.json").exists()
    assert f"generate|--model|/models/m|--adapter-path|{target}|--prompt|" in done.stdout


async def listed(pilot):
    deadline = time.monotonic() + 20
    while not pilot.app.service.loaded:
        assert time.monotonic() < deadline
        await pilot.pause(0.05)
    await pilot.pause()


def footer_keys(app) -> set[str]:
    return {key for key, active in app.screen.active_bindings.items()
            if active.enabled and active.binding.show}


async def test_footer_offers_only_the_verbs_valid_for_the_selected_run(tmp_path):
    store = write_showcase_store(tmp_path / "home", with_running=False)
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot)
        table = app.screen.table
        table.select_run("20251129-080000-000-a1b2")  # completed
        await pilot.pause()
        keys = footer_keys(app)
        assert {"enter", "slash", "l", "k"} <= keys and not keys & {"c", "r", "s"}
        table.select_run("20251129-081000-000-a7b8")  # cancelled
        await pilot.pause()
        assert "r" in footer_keys(app) and "c" not in footer_keys(app)
        table.select_run("20251129-093000-000-c9d0")  # queued
        await pilot.pause()
        assert "c" in footer_keys(app) and "r" not in footer_keys(app)
        table.select_run("20251129-094500-000-e1f2")  # configured
        await pilot.pause()
        assert "s" in footer_keys(app)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (80, 8)], ids=str)
async def test_the_runs_name_column_takes_the_free_width_and_no_column_shows_cut(tmp_path, size):
    # (80, 8): more runs than rows, so the vertical scrollbar takes its share of the width.
    store = write_showcase_store(tmp_path / "home", with_running=False)
    copy = "support-chat lora r16 (again)"
    make(store, "20251129-095000-000-f0f0", copy, RunState.CONFIGURED)
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET)
    async with app.run_test(size=size) as pilot:
        await listed(pilot)
        table = app.screen.table
        assert table.show_vertical_scrollbar == (size[1] == 8)

        def layout() -> tuple[int, list[int]]:
            edges = []
            for column in table.columns.values():
                edges.append((edges[-1] if edges else 0) + column.get_render_width(table))
            return table.scrollable_content_region.width, edges

        def cut(shown: int, edges: list[int]) -> bool:
            return any(start < shown < end for start, end in zip([0] + edges, edges))
        # The scrollbar's arrival is a resize the table answers a frame later: wait for it.
        deadline = time.monotonic() + 10
        while cut(*layout()) and time.monotonic() < deadline:
            await pilot.pause(0.05)
        shown, edges = layout()
        # Every column ends inside the view or starts at its edge or beyond: none is cut.
        assert not cut(shown, edges), edges
        assert shown - edges[-1] < 0 or shown in edges  # and the free width went to the name
        name = table.get_cell("20251129-095000-000-f0f0", "name")
        assert name == copy
        assert table.columns["name"].width >= (len(copy) if size[0] >= 120 else 18)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=str)
async def test_a_stopped_runs_cause_leaves_the_loss_chart_readable(tmp_path, size):
    store = write_showcase_store(tmp_path / "home", with_running=False)
    interrupted = "20251129-082000-000-a3b4"

    def killed(run):  # the runner's own words for a SIGKILL: five lines at 80 columns
        run.failure = {"cause": "killed", "message": (
            "The trainer was killed (SIGKILL), most likely by the system running out of "
            "memory or by a user."), "suggestion": (
            "if memory was short, lower batch_size or max_seq_length, turn on "
            "grad_checkpoint, train fewer layers, or use a quantized base model (run "
            "`zyquo-tui plan` for a configuration that fits); otherwise resume the run")}
    store.update(interrupted, killed)
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET)
    async with app.run_test(size=size) as pilot:
        await listed(pilot)
        app.screen.table.select_run(interrupted)
        await pilot.press("enter")
        deadline = time.monotonic() + 20
        while not (app.service.feed(interrupted) and app.service.feed(interrupted).loaded):
            assert time.monotonic() < deadline
            await pilot.pause(0.05)
        await pilot.pause(0.2)
        screen = app.screen
        assert isinstance(screen, LiveMetricsScreen)
        # The cause and what to try, whole: five lines at 80 columns, three at 120.
        assert screen.query_one("#failure").region.height == (5 if size[0] == 80 else 3)
        # Six rows of plot at least (borders and the x axis aside), at 80x24 too.
        assert screen.query_one("#loss-chart").region.height >= 9
        # The events box gives its room up only where the room is short.
        assert screen.query_one("#events").display == (size[1] > 24)


async def test_palette_names_every_command_area_colon_action(tmp_path):
    store = write_showcase_store(tmp_path / "home", with_running=False)
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot)
        app.screen.table.select_run("20251129-081000-000-a7b8")
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Runs: Resume" in titles and "Runs: Filter" in titles
        assert "Dashboard: Help" in titles and "Dashboard: Quit" in titles
        assert all(re.fullmatch(r"[A-Z][a-z]+: [A-Z].*", title) for title in titles), titles
        await pilot.press("enter")
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Run: Smoothing" in titles and "Run: Resume" in titles


async def test_number_keys_move_between_the_views_of_a_run(tmp_path):
    store = write_showcase_store(tmp_path / "home", with_running=False)
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot)
        app.screen.table.select_run("20251129-080000-000-a1b2")
        for key, name in (("2", "LiveMetricsScreen"), ("3", "CheckpointsScreen"),
                          ("4", "LogsScreen"), ("2", "LiveMetricsScreen"), ("1", "RunsScreen")):
            await pilot.press(key)
            await pilot.pause()
            assert type(app.screen).__name__ == name, key
        assert len(app.screen_stack) == 1
        await pilot.press("enter", "l", "escape")
        assert isinstance(app.screen, LiveMetricsScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)


async def test_q_quits_saying_that_training_goes_on(tmp_path, capsys):
    store = write_showcase_store(tmp_path / "home")  # has a running run
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot)
        await pilot.press("q")
        await pilot.pause()
    said = " ".join(capsys.readouterr().err.split())
    assert "Still training in the background: support-chat dora" in said
    assert app.return_code == 0


async def test_config_toml_keys_remap_and_a_refused_file_is_said_at_start(tmp_path):
    """[keys] of config.toml rebinds a key; a file the commands refuse is said once, at
    start, in the commands' own sentence (file:line), and every setting keeps its default."""
    store = RunStore(tmp_path / "home").ensure()
    config = store.home / "config.toml"
    config.write_text('[keys]\n"app.help" = "h"\n')
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET, poll_interval=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot)
        await pilot.press("h")
        await pilot.pause()
        assert type(app.screen).__name__ == "HelpDialog"
    config.write_text('[keys]\n"app.help" = "h"\n\n[notifications]\ndesktop = "loud"\n')
    app = ZyquoApp(store, clock=lambda: NOW, poll_interval=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot)
        messages = [n.message for n in app._notifications]
        assert f"{config}:5: [notifications] desktop must be one of" in messages[0], messages
        assert app.notifier.settings.desktop == "auto" and app.service.settings.keys == {}
        await pilot.press("h")
        await pilot.pause()
        assert type(app.screen).__name__ != "HelpDialog"


async def test_a_run_ending_notifies_and_applies_retention(tmp_path):
    store = RunStore(tmp_path / "home").ensure()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               stdin=subprocess.DEVNULL)
    try:
        me = identity(sleeper.pid)
        run_id = "20251129-100000-000-abcd"
        events = training_events(400, 400, start=T0)  # best validation at 300
        make(store, run_id, "ending", RunState.RUNNING, iters=400,
             process={"pid": me["pid"], "start_time": me["start_time"]})
        write_events(store, run_id, events)
        write_checkpoints(store, run_id, [100, 200, 300, 400])
        save_policy(store.run_dir(run_id), RetentionPolicy(1))
        app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET, poll_interval=0.2)
        async with app.run_test(size=(100, 30)) as pilot:
            await listed(pilot)
            write_events(store, run_id, [event("completed", T0 + 400, iteration=400)])
            store.update(run_id, lambda r: r.set_state(RunState.COMPLETED))
            deadline = time.monotonic() + 20
            while (run_id, "completed") not in app.ended_runs or \
                    len(list_checkpoints(store.adapters_dir(run_id))) != 2:
                assert time.monotonic() < deadline, app.ended_runs
                await pilot.pause(0.1)
            messages = [n.message for n in app._notifications]
            assert any("ending completed 400 steps" in m for m in messages), messages
        assert [c.step for c in list_checkpoints(store.adapters_dir(run_id))] == [300, 400]
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_a_run_that_starts_and_ends_between_two_polls_notifies(tmp_path):
    """A run made and ended before the dashboard's next read of the store (a short run, or
    one from the CLI) still tells the user it ended; runs already ended when the dashboard
    opened do not."""
    store = RunStore(tmp_path / "home").ensure()
    make(store, "20251129-090000-000-abcd", "old", RunState.COMPLETED, iters=10)
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET, poll_interval=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot)
        run_id = "20251129-100000-000-abcd"
        make(store, run_id, "quick", RunState.COMPLETED, iters=10)
        deadline = time.monotonic() + 20
        while (run_id, "completed") not in app.ended_runs:
            assert time.monotonic() < deadline, app.ended_runs
            await pilot.pause(0.1)
        assert app.ended_runs == [(run_id, "completed")]  # not the run ended before it opened
        assert any("quick completed" in n.message for n in app._notifications)


async def test_retention_chosen_for_a_completed_run_applies_now(tmp_path):
    """A run that has already completed has no end ahead to prune at: the policy chosen on its
    checkpoints screen (t) prunes now, and the list shows what is left."""
    store = RunStore(tmp_path / "home").ensure()
    run_id = "20251129-100000-000-abcd"
    make(store, run_id, "done", RunState.COMPLETED, iters=400)
    write_events(store, run_id, [*training_events(400, 400, start=T0),  # best val at 300
                                 event("completed", T0 + 400, iteration=400)])
    write_checkpoints(store, run_id, [100, 200, 300, 400])
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET, poll_interval=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot)
        await pilot.press("3")
        await pilot.pause()
        assert type(app.screen).__name__ == "CheckpointsScreen"
        await pilot.press("t")
        await pilot.pause()
        assert "applied now" in str(app.screen.query_one(".dialog-heading").render())
        await pilot.press("down", "enter")  # keep the best and the last
        deadline = time.monotonic() + 20
        while [c.step for c in app.screen.table.checkpoints] != [300, 400]:
            assert time.monotonic() < deadline, [c.step for c in app.screen.table.checkpoints]
            await pilot.pause(0.1)
        messages = [n.message for n in app._notifications]
        assert any("keep the best and the last, applied now" in m for m in messages), messages
    assert [c.step for c in list_checkpoints(store.adapters_dir(run_id))] == [300, 400]


async def test_the_end_notice_counts_the_trainers_steps_when_the_feed_is_behind(tmp_path):
    """The events shown reach step 200 of 400; the trainer's summary says 400 and its best
    validation loss: the notice takes the summary, the trainer's own last word."""
    store = RunStore(tmp_path / "home").ensure()
    run_id = "20251129-100000-000-abcd"
    make(store, run_id, "lagging", RunState.COMPLETED, iters=400,
         summary={"step": 400, "best_val_loss": 1.2345, "best_val_step": 350})
    write_events(store, run_id, training_events(400, 200, start=T0))
    app = ZyquoApp(store, clock=lambda: NOW, notifications=QUIET, poll_interval=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        await listed(pilot)
        feed = app.service.open_feed(run_id)
        deadline = time.monotonic() + 20
        while not feed.loaded:
            assert time.monotonic() < deadline, "the feed never loaded"
            await pilot.pause(0.05)
        assert feed.metrics.step == 200
        app.on_run_ended(RunEnded(run_id, "completed"))
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert "lagging completed 400 steps; best validation loss 1.2345." in messages, messages


SESSION = r"""
import asyncio, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from test_dashboard_fixtures import write_showcase_store, NOW
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.notify import NotificationSettings

async def main():
    store = write_showcase_store(Path({home!r}))
    app = ZyquoApp(store, clock=lambda: NOW,
                   notifications=NotificationSettings(desktop="off", bell=False))
    async with app.run_test(size=(100, 30)) as pilot:
        while not app.service.loaded:
            await pilot.pause(0.05)
        for keys in (["slash", "c", "escape"], ["o", "O"], ["enter"], ["s", "question_mark"],
                     ["escape", "k"], ["enter"], ["escape", "t"], ["escape", "l"], ["g"],
                     ["1"], ["ctrl+p"], ["escape"]):
            await pilot.press(*keys)
            await pilot.pause(0.3)
        await pilot.press("q")
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("mlx", "mlx_lm")))

asyncio.run(main())
"""


def test_a_full_dashboard_session_never_imports_mlx(tmp_path):
    script = SESSION.format(tests=str(REPO / "tests" / "functional"), home=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
