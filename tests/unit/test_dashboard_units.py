"""The dashboard's parts one by one: history loading, display series, retention, notifications,
keys and palette, quitting, run endings, and that the dashboard never imports mlx."""

from __future__ import annotations

import http.server
import math
import threading

import pytest
from test_dashboard_fixtures import (
    write_checkpoints,
    write_showcase_store,
)

from zyquo_tui.core.events.metrics import Series
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.checkpoints import list_checkpoints
from zyquo_tui.core.store.retention import (
    RetentionPolicy,
    apply_retention,
    doomed,
    save_policy,
)
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.dialogs.adapter_command import adapter_commands
from zyquo_tui.dashboard.notify import (
    NotificationSettings,
    Notifier,
    desktop_protocol,
    osc_sequence,
    post_webhook,
)
from zyquo_tui.dashboard.run_feed import DisplaySeries


def test_display_series_keeps_extremes_of_100000_points():
    steps = list(range(1, 100_001))
    values = [2.0 + 0.1 * math.sin(i / 50) for i in steps]
    values[31_337] = 9.5  # one spike
    values[77_777] = -3.0  # one dip
    live = DisplaySeries()
    for step, value in zip(steps, values):
        live.add(step, value)
    bulk = DisplaySeries()
    bulk.fill(steps, values)
    for series in (live, bulk):
        assert len(series) <= series.capacity
        shown = series.in_order()
        assert max(shown) == 9.5 and min(shown) == -3.0
        assert shown.index(9.5) < shown.index(-3.0)  # in the order they happened
        assert series.points()[0][0] == 1 and series.points()[-1][1] == 100_000


def test_display_series_rebuilds_when_a_resume_rewrites_steps():
    source = Series()
    for step in range(1, 51):
        source.add(step, float(step))
    display = DisplaySeries()
    display.sync(source)
    source.truncate_after(20)
    for step in range(21, 31):
        source.add(step, -float(step))
    display.sync(source)
    assert display.in_order()[-1] == -30.0 and len(display.in_order()) == 30


def test_smoothing_follows_a_falling_loss_without_lag():
    display = DisplaySeries()
    steps = list(range(1, 201))
    display.fill(steps, [10 - s / 20 + (0.5 if s % 2 else -0.5) for s in steps])
    smoothed = dict(display.smoothed(0.6))
    assert smoothed[100] == pytest.approx(5.0, abs=0.2)  # a one-way EMA would lag above


def test_retention_keeps_the_best_and_the_last_n(tmp_path):
    store = write_showcase_store(tmp_path / "home", with_running=False)
    run_id = "20251129-080000-000-a1b2"  # checkpoints 100..400, best 300
    checkpoints = list_checkpoints(store.adapters_dir(run_id))
    assert [c.step for c in doomed(checkpoints, RetentionPolicy(1), 300)] == [100, 200]
    assert [c.step for c in doomed(checkpoints, RetentionPolicy(1, keep_best=False), 300)] == \
        [100, 200, 300]

    assert apply_retention(store, run_id) == []  # no policy: keep everything
    save_policy(store.run_dir(run_id), RetentionPolicy(1))
    assert apply_retention(store, run_id) == [100, 200]
    assert [c.step for c in list_checkpoints(store.adapters_dir(run_id))] == [300, 400]
    assert (store.adapters_dir(run_id) / "adapters.safetensors").exists()
    assert not list(store.adapters_dir(run_id).glob("0000100_*"))


def test_retention_leaves_a_cancelled_run_alone(tmp_path):
    store = write_showcase_store(tmp_path / "home", with_running=False)
    run_id = "20251129-081000-000-a7b8"
    save_policy(store.run_dir(run_id), RetentionPolicy(1))
    assert apply_retention(store, run_id) == []
    assert len(list_checkpoints(store.adapters_dir(run_id))) == 2


def test_desktop_notification_protocol_follows_the_terminal():
    assert desktop_protocol("auto", {"LC_TERMINAL": "iTerm2", "TERM": "xterm-256color"}) == "osc9"
    assert desktop_protocol("auto", {"TERM": "foot"}) == "osc777"
    assert desktop_protocol("auto", {"TERM": "xterm-256color"}) is None
    assert desktop_protocol("osc777", {}) == "osc777"
    assert desktop_protocol("off", {"LC_TERMINAL": "iTerm2"}) is None


def test_osc_sequences_pass_through_tmux_and_screen():
    plain = osc_sequence("osc9", "zyquo-tui", "run done\x07;", {})
    assert plain == "\x1b]9;zyquo-tui: run done,\x07"
    assert osc_sequence("osc777", "t", "b", {}) == "\x1b]777;notify;t;b\x07"
    tmux = osc_sequence("osc9", "t", "b", {"TMUX": "/tmp/tmux-0/default,1,0"})
    assert tmux == "\x1bPtmux;\x1b\x1b]9;t: b\x07\x1b\\"
    assert osc_sequence("osc9", "t", "b", {"STY": "123.pts"}) == "\x1bP\x1b]9;t: b\x07\x1b\\"


class _Hook(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append((dict(self.headers), body.decode()))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_webhook_posts_like_ntfy_and_failures_are_only_logged(caplog):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.handle_request, daemon=True).start()
    post_webhook(f"http://127.0.0.1:{server.server_port}/topic", "zyquo-tui: run failed",
                 "sample failed at step 3", failed=True)
    headers, body = _Hook.received[-1]
    assert body == "sample failed at step 3"
    assert headers["Title"] == "zyquo-tui: run failed" and headers["Priority"] == "high"
    server.server_close()

    class FakeApp:
        is_headless = True
        _driver = None

        def notify(self, *args, **kwargs):
            self.notified = (args, kwargs)

        def bell(self):
            pass
    notifier = Notifier(FakeApp(), NotificationSettings(
        desktop="osc9", webhook_url=f"http://127.0.0.1:{server.server_port}/closed"))
    notifier.send("zyquo-tui: run completed", "done", failed=False)
    for thread in notifier.webhook_threads:
        thread.join(15)
    assert notifier.webhook_errors and "failed" in caplog.text
    assert not notifier.desktop_enabled()  # no terminal under the test driver


def test_notification_settings_from_config_toml(tmp_path):
    (tmp_path / "config.toml").write_text(
        '[notifications]\ndesktop = "osc777"\nbell = false\n'
        'webhook_url = "https://ntfy.sh/zyquo-test"\n\n[keys]\n"run.cancel" = "x"\n')
    app = ZyquoApp(RunStore(tmp_path))
    settings = app.notifier.settings
    assert (settings.desktop, settings.bell, settings.webhook_url) == \
        ("osc777", False, "https://ntfy.sh/zyquo-test")
    assert app.service.settings.keys == {"run.cancel": "x"}


def test_adapter_commands_copy_a_step_into_its_own_folder(tmp_path):
    store = write_showcase_store(tmp_path / "home", with_running=False)
    run_id = "20251129-080000-000-a1b2"
    adapters = store.adapters_dir(run_id)
    checkpoints = {c.step: c for c in list_checkpoints(adapters)}
    latest = adapter_commands("/models/m", adapters, checkpoints[400], latest_step=400)
    assert latest.startswith(f"RUN={adapters.parent}\nMODEL=/models/m\n")
    assert 'mlx_lm generate --model "$MODEL" --adapter-path "$RUN/adapters" \\' in latest
    older = adapter_commands("/models/m", adapters, checkpoints[300], latest_step=400)
    assert '--adapter-path "$RUN/adapters"' not in older
    assert 'cp "$RUN/adapters/adapter_config.json" "$RUN/step-0000300/"' in older
    assert 'cp "$RUN/adapters/0000300_adapters.safetensors" \\\n' \
        '    "$RUN/step-0000300/adapters.safetensors"' in older


def test_an_active_runs_newest_checkpoint_is_kept_from_deletion_by_either_door(tmp_path):
    """One rule for the checkpoints screen's d and `runs checkpoints --delete`: the newest
    checkpoint of an active run (the one it resumes from) stays; older ones, and every one of a
    stopped run, may go."""
    from zyquo_tui.core.runs.run import Run
    from zyquo_tui.core.store.retention import deletion_refusal

    store = RunStore(tmp_path / "home").ensure()
    run = store.create(Run.new(model=str(tmp_path), data=str(tmp_path)))
    write_checkpoints(store, run.id, [10, 20])
    checkpoints = list_checkpoints(store.adapters_dir(run.id))
    run.set_state(RunState.STARTING)
    run.set_state(RunState.RUNNING)
    assert "its newest checkpoint, the one it resumes from" in deletion_refusal(
        run, checkpoints[-1], checkpoints)
    assert deletion_refusal(run, checkpoints[0], checkpoints) is None
    run.set_state(RunState.CANCELLED)
    assert deletion_refusal(run, checkpoints[-1], checkpoints) is None
