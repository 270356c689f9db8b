"""The try screen and the export, driven from the keyboard: real generation and real exports of
a trained sample run (Pilot), and snapshots of the new screens from fixed data.

The snapshots swap the generator for a scripted one (as the setup screens swap in fixed
figures): the model's answers would tie the pictures to this machine's arithmetic.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

from conftest import zyquo_cli
from helpers import copy_run
from test_dashboard_snapshots import (  # noqa: F401  (fixed_world and showcase are fixtures)
    BOTH,
    COMPLETED,
    dashboard,
    fixed_world,
    open_run,
    showcase,
    until,
)

from zyquo_tui.core.library.models import discover_models
from zyquo_tui.core.processes import exports
from zyquo_tui.core.processes.try_session import TryRequest
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.dialogs.export import ExportDialog
from zyquo_tui.dashboard.notify import NotificationSettings
from zyquo_tui.dashboard.screens.checkpoints_screen import CheckpointsScreen
from zyquo_tui.dashboard.screens.try_screen import Exchange, TryScreen, open_session
from zyquo_tui.dashboard.widgets.checkpoint_table import CheckpointTable

QUIET = NotificationSettings(desktop="off", bell=False)


async def wait_until(pilot, predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await pilot.pause(0.1)


async def open_checkpoints(pilot, run_id: str, step: int) -> CheckpointsScreen:
    app = pilot.app
    await wait_until(pilot, lambda: run_id in app.service.runs, "the run to be listed")
    app.show_view("checkpoints", run_id)
    await pilot.pause(0.2)
    screen = app.screen
    assert isinstance(screen, CheckpointsScreen)
    table = screen.query_one(CheckpointTable)
    await wait_until(pilot, lambda: len(table.checkpoints) == 4, "the checkpoints")
    table.move_cursor(row=[c.step for c in table.checkpoints].index(step))
    await pilot.pause(0.1)
    return screen


def answered(exchange: Exchange, base: bool = True) -> bool:
    return all(exchange.texts[side] for side in (("adapter", "base") if base else ("adapter",)))


async def test_try_a_checkpoint_and_keep_a_small_history(trained_runs, isolated_home):
    run_id = copy_run(trained_runs["float"], isolated_home)
    app = ZyquoApp(RunStore(isolated_home), notifications=QUIET, poll_interval=0.3)
    async with app.run_test(size=(110, 36)) as pilot:
        await open_checkpoints(pilot, run_id, 40)
        await pilot.press("g")
        screen = app.screen
        assert isinstance(screen, TryScreen) and screen.step == 40
        await wait_until(pilot, lambda: screen.ready, "the model to load")

        for prompt in ("What is 8 minus 7?", "What colour is a plum?"):
            await pilot.press(*prompt, "enter")
            await wait_until(pilot, lambda: screen.waiting == 0 and answered(
                list(screen.exchanges.values())[-1]), f"both answers to {prompt!r}")

        exchanges = list(screen.query(Exchange))
        assert [e.prompt for e in exchanges] == ["What is 8 minus 7?", "What colour is a plum?"]
        assert all(e.texts["adapter"] != e.texts["base"] for e in exchanges)
        # The screen said the same as `runs try` (greedy: the same answers).
        cli = zyquo_cli("runs", "try", run_id, "--prompt", "What is 8 minus 7?", "--json")
        assert cli.returncode == 0, cli.stderr
        import json
        expected = json.loads(cli.stdout)
        first = exchanges[0]
        assert (first.texts["adapter"], first.texts["base"]) == (expected["adapter"],
                                                                 expected["base"])

        # Leaving the screen ends its generator.
        process = screen.session.process
        await pilot.press("escape")
        await wait_until(pilot, lambda: process.poll() is not None, "the generator to end",
                         timeout=10)
        assert isinstance(app.screen, CheckpointsScreen)


class HeldReadySession:
    """The real generator, whose "ready" reaches the screen only once the test lets it: the
    question is typed while the model loads however fast this machine loads it."""

    def __init__(self, store, run_id: str, step: int | None) -> None:
        self.session = open_session(store, run_id, step)
        self.release = threading.Event()

    def next_event(self):
        event = self.session.next_event()
        if event is not None and event.get("event") == "ready":
            self.release.wait(timeout=120)
        return event

    def __getattr__(self, name: str):
        return getattr(self.session, name)


async def test_a_question_asked_while_the_model_loads_is_answered_once_it_is_ready(
        trained_runs, isolated_home):
    run_id = copy_run(trained_runs["float"], isolated_home)
    app = ZyquoApp(RunStore(isolated_home), notifications=QUIET, poll_interval=0.3)
    async with app.run_test(size=(110, 36)) as pilot:
        await wait_until(pilot, lambda: run_id in app.service.runs, "the run")
        screen = TryScreen(run_id, 40, session_factory=HeldReadySession)
        app.push_screen(screen)
        await wait_until(pilot, lambda: screen.session is not None, "the generator to start")
        assert not screen.ready
        await pilot.press(*"What is 8 minus 7?", "enter")
        assert screen.early_prompt == "What is 8 minus 7?" and not screen.exchanges
        screen.session.release.set()
        await wait_until(pilot, lambda: screen.exchanges and screen.waiting == 0 and answered(
            list(screen.exchanges.values())[-1]), "the early question's answers")
        assert [e.prompt for e in screen.query(Exchange)] == ["What is 8 minus 7?"]


async def test_try_keeps_only_the_last_exchanges(trained_runs, isolated_home, monkeypatch):
    from zyquo_tui.dashboard.screens import try_screen

    run_id = copy_run(trained_runs["float"], isolated_home)
    monkeypatch.setattr(try_screen, "HISTORY", 2)
    app = ZyquoApp(RunStore(isolated_home), notifications=QUIET, poll_interval=0.3)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: run_id in app.service.runs, "the run")
        app.push_screen(TryScreen(run_id, 10, session_factory=ScriptedSession))
        await pilot.pause(0.1)
        screen = app.screen
        await wait_until(pilot, lambda: screen.ready, "ready")
        for word in ("one", "two", "three"):
            await pilot.press(*word, "enter")
            await wait_until(pilot, lambda: screen.waiting == 0, "the answers")
        await pilot.pause(0.1)
        assert [e.prompt for e in screen.query(Exchange)] == ["two", "three"]


async def test_export_from_the_checkpoints_screen(trained_runs, isolated_home):
    run_id = copy_run(trained_runs["4bit"], isolated_home)
    app = ZyquoApp(RunStore(isolated_home), notifications=QUIET, poll_interval=0.3)
    async with app.run_test(size=(110, 36)) as pilot:
        await open_checkpoints(pilot, run_id, 30)
        await pilot.press("e")
        dialog = app.screen
        assert isinstance(dialog, ExportDialog)
        assert dialog.quantized_base and dialog.gguf_supported
        await pilot.press("enter")  # the first choice: float weights, the default folder

        def notified(title: str) -> bool:
            return any(n.title == title for n in app._notifications)
        await wait_until(pilot, lambda: notified("Export done") or notified("Export failed")
                         or notified("Export rejected"), "the export to end")
        [job] = exports.list_jobs(isolated_home, run_id)
        assert job.state == exports.COMPLETED, job.message
        assert job.step == 30 and job.weights == "float" and job.check["difference"] <= 1e-3
        # The new model is in the models list, and the screen says how the export ended.
        assert Path(job.output) in [m.path for m in discover_models(isolated_home)]
        app.screen.reload()
        await pilot.pause(0.1)
        summary = str(app.screen.query_one("#checkpoint-summary").render())
        assert f"Export: step 30 → {job.output} (float): completed" in summary


async def test_an_export_to_a_taken_folder_says_what_to_do_in_the_dashboard(tmp_path):
    from test_dashboard_fixtures import make, write_checkpoints

    from zyquo_tui.core.runs.run import RunState
    from zyquo_tui.dashboard.dialogs.export import ExportChoice
    from zyquo_tui.dashboard.export_jobs import start_export

    model, data, taken = tmp_path / "model", tmp_path / "data", tmp_path / "taken"
    for folder in (model, data, taken):
        folder.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (data / "valid.jsonl").write_text('{"text": "a row"}\n')
    (taken / "config.json").write_text("{}")
    store = RunStore(tmp_path / "home").ensure()
    run_id = "20251129-080000-000-a1b2"
    make(store, run_id, "taken", RunState.COMPLETED, model=str(model), data=str(data))
    write_checkpoints(store, run_id, [100])
    app = ZyquoApp(store, notifications=QUIET)
    async with app.run_test(size=(100, 30)) as pilot:
        start_export(app, run_id, 100, ExportChoice(taken))
        await wait_until(pilot, lambda: app._notifications, "the refusal", timeout=20)
        [refusal] = list(app._notifications)
        # The dashboard has no -o: its own next step instead (the CLI keeps -o).
        assert refusal.message == (f"{taken} already exists; press e again and give another "
                                   "folder, or move it away.")
    assert not (store.home / "exports").exists()


# -- snapshots ------------------------------------------------------------------------------------

class ScriptedSession:
    """Stands in for the generator subprocess: ready at once, and the same answers to every
    prompt, in two pieces each (as tokens stream in)."""

    ANSWERS = {"adapter": ["The capital of Sweden ", "is Stockholm."],
               "base": ["the the of of ", "capital capital"]}

    def __init__(self, store, run_id: str, step: int | None) -> None:
        self.request = TryRequest(run_id, "run", "/models/base", Path("/runs/adapters"),
                                  step or 400, max_tokens=100)
        self.events: queue.Queue = queue.Queue()
        self.events.put({"event": "ready", "step": self.request.step, "chat_template": True})
        self.asked = 0

    def ask(self, prompt: str) -> int:
        index = self.asked
        self.asked += 1
        for side, pieces in self.ANSWERS.items():
            for piece in pieces:
                self.events.put({"event": "text", "index": index, "side": side, "text": piece})
            self.events.put({"event": "answer", "index": index, "side": side,
                             "text": "".join(pieces), "tokens": 6, "finish": "stop"})
        self.events.put({"event": "done", "index": index})
        return index

    def next_event(self):
        return self.events.get()

    def stderr_tail(self) -> str:
        return ""

    def close(self) -> None:
        self.events.put(None)


async def try_screen_with_an_answer(pilot) -> None:
    await open_run(pilot, COMPLETED, "k")
    pilot.app.push_screen(TryScreen(COMPLETED, 300, session_factory=ScriptedSession))
    await pilot.pause(0.1)
    screen = pilot.app.screen
    await until(pilot, lambda: screen.ready)
    await pilot.press(*"What is the capital of Sweden?", "enter")
    await until(pilot, lambda: screen.waiting == 0)
    await pilot.press(*"And of Norway?")
    await pilot.pause(0.2)


class TestTryScreen:
    @BOTH
    def test_both_answers_side_by_side(self, snap_compare, showcase, size):
        """Title "Try · support-chat lora r16"; the status line "Adapter at step 300 vs the
        base · greedy, up to 100 tokens · enter sends"; the prompt "› What is the
        capital of Sweden?" above two boxes side by side: "adapter · step 300" (accent border)
        saying "The capital of Sweden is Stockholm." and "base" saying "the the of of capital
        capital". At the bottom the input holds "And of Norway?" (not sent yet). Footer:
        esc Back."""
        assert snap_compare(dashboard(showcase), terminal_size=size,
                            run_before=try_screen_with_an_answer)


class TestExport:
    @BOTH
    def test_the_export_dialog(self, snap_compare, showcase, size):
        """`e` on step 300 of the completed run: a modal "Export step 300 of support-chat lora
        r16 as a model", a dim line on the check and the background job, the folder input
        holding /tmp/zyquo-tui-snapshots/home/models/support-chat-lora-r16-step300, and the
        choices Float weights (highlighted), 8-bit weights, 4-bit weights (no GGUF line: the
        fixture's model folder is not a llama model mlx-lm converts)."""
        assert snap_compare(dashboard(showcase), terminal_size=size,
                            run_before=lambda pilot: open_run(pilot, COMPLETED, "k", "e"))

    def test_an_export_under_way_shows_under_the_summary(self, snap_compare, showcase):
        """The checkpoints screen of the completed run with a third summary line: "Export:
        step 300 → /tmp/zyquo-tui-snapshots/home/models/support-chat-step300 (4-bit):
        fusing". Footer as ever, with g Try and e Export."""
        job = exports.ExportJob(
            id="20251129-090000-000-exp1", run_id=COMPLETED, run_name="support-chat", step=300,
            model="/models/base", adapters="/runs/a", data="/data", dequantize=False,
            output=str(showcase.home / "models" / "support-chat-step300"), quantize=4,
            gguf=False, phase="fusing", created=time.time() + 3600)  # young: not yet "dead"
        (showcase.home / "exports").mkdir()
        exports.save_job(showcase.home, job)
        assert snap_compare(dashboard(showcase), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, COMPLETED, "k"))
