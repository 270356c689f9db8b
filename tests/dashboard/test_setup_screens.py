"""The models, datasets and machine screens, and the keys that open the setup screens."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import threading

import psutil
from conftest import SAMPLE_DATA
from rich.console import Console
from test_setup_helpers import FixedSources, install_models, until
from test_setup_helpers import setup_dashboard as dashboard

from zyquo_tui.core.events.protocol import EventWriter
from zyquo_tui.core.library.token_stats import TokenStats
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.core.system.liveness import identity
from zyquo_tui.dashboard.dialogs.machine import MachineDialog
from zyquo_tui.dashboard.dialogs.text_prompt import TextPromptDialog
from zyquo_tui.dashboard.screens.datasets_screen import DatasetsScreen
from zyquo_tui.dashboard.screens.models_screen import ModelsScreen
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen
from zyquo_tui.dashboard.setup_sources import SetupSources, trainer_use


def text_of(screen, selector: str) -> str:
    """What a Static shows, as plain text (tables too)."""
    content = screen.query_one(selector).content
    if isinstance(content, str):
        return content
    console = Console(width=200, record=True, file=io.StringIO(), color_system=None)
    console.print(content)
    return console.export_text()


# -- keys from anywhere -------------------------------------------------------------------------


async def test_setup_keys_open_their_screens_from_the_runs_list(models):
    app = dashboard(FixedSources)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.service.loaded, "the store")
        for key, screen_type in (("n", NewRunScreen), ("M", ModelsScreen),
                                 ("D", DatasetsScreen), ("m", MachineDialog)):
            await pilot.press(key)
            await until(pilot, lambda: isinstance(app.screen, screen_type), screen_type.__name__)
            await pilot.press("escape")
            await until(pilot, lambda: len(app.screen_stack) == 1, "the runs list again")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Dashboard: New run", "Dashboard: Machine", "Dashboard: Models",
                      "Dashboard: Datasets"):
            assert title in titles
        assert "Dashboard: New run like this one" not in titles  # no run selected


async def test_the_new_run_screen_names_its_commands_setup_colon_action(models):
    app = dashboard(FixedSources)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, NewRunScreen), "the form")
        app.screen.query_one("#setup-form").focus()
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Setup: Start", "Setup: Queue", "Setup: Draft", "Setup: Measure",
                      "Setup: Export", "Setup: Import", "Setup: Preset", "Setup: Load"):
            assert title in titles
        assert all(re.fullmatch(r"[A-Z][a-z]+: [A-Z].*", title) for title in titles), titles


# -- models -------------------------------------------------------------------------------------


async def test_models_screen_lists_the_models_with_their_facts(models):
    app = dashboard(FixedSources)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = ModelsScreen()
        app.push_screen(screen)
        await until(pilot, lambda: screen.models, "the models")
        assert [m.name for m in screen.models] == ["zyquo-tiny", "zyquo-tiny-4bit"]
        detail = text_of(screen, "#model-detail")
        assert "hidden 64 · layers 2 · heads 4 · kv heads 2 · vocab 512" in detail
        assert "Searched:" in detail and str(models["zyquo-tiny"].parent) in detail
        await pilot.press("down")
        await pilot.pause()
        assert "4-bit, group 64, affine" in text_of(screen, "#model-detail")
        await pilot.press("enter")  # a new run with the highlighted model
        await until(pilot, lambda: isinstance(app.screen, NewRunScreen), "the form")
        await until(pilot, lambda: app.screen.model_path == str(models["zyquo-tiny-4bit"]),
                    "the model chosen")


async def test_adding_a_folder_saves_it_in_config_toml_and_finds_its_models(
        isolated_home, sample_models, tmp_path):
    (isolated_home / "config.toml").write_text('[keys]\n"run.cancel" = "x"\n')
    elsewhere = tmp_path / "elsewhere"
    install_models(elsewhere, sample_models)  # elsewhere/models/zyquo-tiny...
    app = dashboard(FixedSources)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = ModelsScreen()
        app.push_screen(screen)
        await until(pilot, lambda: screen.discovered, "an empty list")
        assert screen.models == []
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, TextPromptDialog), "the prompt")
        app.screen.query_one("Input").value = str(elsewhere / "models")
        await pilot.press("enter")
        await until(pilot, lambda: len(screen.models) == 2, "the folder's models")
        assert {m.source for m in screen.models} == {"config"}
    assert Settings.load().model_folders == [str((elsewhere / "models").resolve())]
    assert '"run.cancel" = "x"' in (isolated_home / "config.toml").read_text()


# -- datasets -----------------------------------------------------------------------------------


class SlowTokens(FixedSources):
    """Token statistics that wait for the test: the UI must go on meanwhile."""

    def __init__(self, home):
        super().__init__(home)
        self.release = threading.Event()
        self.cancelled_seen = threading.Event()
        self.calls = []

    def token_stats(self, data, model, max_seq_length, preview_line, cancelled):
        self.calls.append((data, preview_line))
        while not self.release.wait(0.02):
            if cancelled():
                self.cancelled_seen.set()
                self.release.wait(60)  # slow to stop: a UI that waited for it would hang
                raise RuntimeError("cancelled")
        return TokenStats.from_json({
            "data": data, "model": model, "format": "chat", "max_seq_length": max_seq_length,
            "splits": {"train": {"rows": 225, "min": 25, "median": 41, "p95": 50, "max": 53,
                                 "total_tokens": 8736, "truncated_rows": 0}},
            "preview": {"split": "train", "line": preview_line, "tokens": 25, "spans": [
                {"kind": "masked", "text": "<|im_start|>user\nWhat is 9 minus 4?", "tokens": 17},
                {"kind": "trained", "text": "9 minus 4 is 5.<|im_end|>", "tokens": 8}]},
            "note": ""})


async def test_token_statistics_count_in_a_worker_while_the_screen_responds(models):
    app = dashboard(SlowTokens)
    sources = app.setup_sources
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(DatasetsScreen())
        await until(pilot, lambda: app.screen.datasets and app.screen.report, "the report")
        screen = app.screen
        assert screen.current().name == "chat"
        await pilot.press("t")
        await until(pilot, lambda: sources.calls, "counting to begin")
        assert "Counting" in text_of(screen, "#tokens")
        await pilot.press("right_square_bracket")  # the next row: the first count is dropped
        await until(pilot, lambda: sources.cancelled_seen.is_set(), "the first count cancelled")
        # The first count cannot end before release, so the second one begins only if the
        # key did not wait for the first.
        await until(pilot, lambda: len(sources.calls) == 2, "the second count to begin",
                    timeout=30)
        assert sources.calls[-1][1] == 2 and not sources.release.is_set()
        sources.release.set()
        await until(pilot, lambda: screen.stats is not None, "the statistics")
        assert sources.calls[-1][1] == 2 and screen.preview_line == 2
        tokens = text_of(screen, "#tokens")
        assert "train" in tokens and "8736" in tokens
        preview = text_of(screen, "#preview")
        assert "train.jsonl line 2: 25 tokens" in preview and "9 minus 4 is 5." in preview


class CountedTokens(SlowTokens):
    """Token statistics at once, each count recorded."""

    def __init__(self, home):
        super().__init__(home)
        self.release.set()


async def test_going_back_to_a_row_shows_its_tokens_without_counting_again(models):
    app = dashboard(CountedTokens)
    sources = app.setup_sources
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(DatasetsScreen())
        await until(pilot, lambda: app.screen.datasets and app.screen.report, "the report")
        screen = app.screen
        await pilot.press("t")
        await until(pilot, lambda: screen.stats is not None, "the statistics")
        sources.release.clear()  # a count from here on waits: the table must stay meanwhile
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: len(sources.calls) == 2, "row 2 counted")
        assert "8736" in text_of(screen, "#tokens")  # row 1's statistics, not "Counting…"
        assert "Counting" in text_of(screen, "#preview")
        sources.release.set()
        await until(pilot, lambda: screen.stats.preview.line == 2, "row 2's preview")
        sources.release.clear()
        await pilot.press("left_square_bracket")  # back to row 1: remembered
        await pilot.pause()
        assert screen.stats.preview.line == 1 and len(sources.calls) == 2
        assert "train.jsonl line 1" in text_of(screen, "#preview")
        sources.release.set()


def test_token_statistics_are_counted_again_when_the_files_change(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"text": "one"}\n')
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text("{}")
    sources = CountedTokens(tmp_path / "home")

    def count(line=1):
        return sources.counted_token_stats(str(data), str(model), 2048, line, lambda: False)
    count()
    count()
    assert len(sources.calls) == 1  # remembered
    count(line=2)
    assert len(sources.calls) == 2  # another row: another preview
    (data / "train.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    count()
    assert len(sources.calls) == 3  # the dataset changed
    (model / "tokenizer.json").write_text('{"changed": true}')
    count()
    assert len(sources.calls) == 4  # the tokenizer changed
    assert sources.cached_token_stats(str(data), str(model), 2048, 1) is not None


async def test_real_token_statistics_and_a_masked_preview(models):
    """The real subprocess with the sample model's tokenizer and chat template."""
    app = dashboard(FixedSources)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(DatasetsScreen())
        await until(pilot, lambda: app.screen.datasets and app.screen.report, "the report")
        screen = app.screen
        await pilot.press("t")
        await until(pilot, lambda: screen.stats is not None, "the statistics", timeout=120)
        assert screen.stats.splits["train"].rows == 225
        kinds = [span.kind for span in screen.stats.preview.spans]
        assert kinds[0] == "masked" and "trained" in kinds
        assert "masked" in text_of(screen, "#preview")


async def test_a_bad_dataset_folder_lists_every_problem_with_file_and_line(models, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    rows = (SAMPLE_DATA / "text" / "train.jsonl").read_text().splitlines()[:10]
    rows[4] = '{"txt": "a misspelt key"}'
    (bad / "train.jsonl").write_text("\n".join(rows) + "\n\n")
    app = dashboard(FixedSources)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(DatasetsScreen())
        await until(pilot, lambda: app.screen.datasets, "the list")
        screen = app.screen
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, TextPromptDialog), "the prompt")
        app.screen.query_one("Input").value = str(bad)
        await pilot.press("enter")
        await until(pilot, lambda: any(d.name == "bad" for d in screen.datasets), "the folder")
        table = screen.query_one("DataTable")
        table.move_cursor(row=[d.name for d in screen.datasets].index("bad"))
        await until(pilot, lambda: screen.report is not None and screen.report.errors,
                    "the report")
        problems = text_of(screen, "#problems")
        assert "train.jsonl:5:" in problems and "train.jsonl:11: empty line" in problems
        assert "wait until the errors above are fixed" in text_of(screen, "#tokens")


async def test_the_datasets_screen_previews_a_preference_pair_side_by_side(models):
    """The shipped preference dataset: valid, no refusal, and its first pair with the prompt
    across and chosen and rejected in two columns; ] shows the next pair."""
    app = dashboard(FixedSources)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(DatasetsScreen())
        await until(pilot, lambda: app.screen.datasets, "the list")
        screen = app.screen
        names = [d.name for d in screen.datasets]
        screen.query_one("DataTable").move_cursor(row=names.index("preference"))
        await until(pilot, lambda: screen.report is not None
                    and screen.report.format == "preference", "the report")
        validation = text_of(screen, "#validation")
        assert "✓ valid" in validation and "✗" not in validation
        rows = (SAMPLE_DATA / "preference" / "train.jsonl").read_text().splitlines()
        first, second = json.loads(rows[0]), json.loads(rows[1])
        pair = text_of(screen, "#pair")
        assert "train.jsonl line 1" in pair and first["prompt"] in pair
        # Side by side: chosen and rejected start on the same line, chosen on the left.
        line = next(row for row in pair.splitlines() if first["chosen"] in row)
        assert first["rejected"] in line
        assert line.index(first["chosen"]) < line.index(first["rejected"])
        screen.query_one("DataTable").blur()
        await pilot.press("right_square_bracket")
        await pilot.pause()
        pair = text_of(screen, "#pair")
        assert "train.jsonl line 2" in pair and second["prompt"] in pair


# -- the machine --------------------------------------------------------------------------------


def test_trainer_memory_is_the_recorded_process_and_its_children_with_its_last_peaks(tmp_path):
    # A stand-in trainer (never this test's own process): a child that holds 64 MiB, and a
    # grandchild, until its stdin closes.
    code = ("import subprocess, sys; held = bytearray(64 << 20); "
            "child = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], "
            "stdin=subprocess.PIPE); print('ready', flush=True); sys.stdin.read(); "
            "child.stdin.close(); child.wait()")
    trainer = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout.readline().strip() == "ready"
        them = identity(trainer.pid)
        run = Run.new(model="m", data="d")
        run.state = RunState.RUNNING
        run.process = {"pid": them["pid"], "start_time": them["start_time"]}
        events = tmp_path / "events.jsonl"
        writer = EventWriter(events)
        for step, (mlx, rss) in enumerate([(10 << 20, 200 << 20), (12 << 20, 230 << 20)], 1):
            writer.write("train", iteration=step, train_loss=1.0, learning_rate=1e-4,
                         iterations_per_second=1.0, tokens_per_second=10.0,
                         trained_tokens=10 * step, peak_memory_bytes=mlx, peak_rss_bytes=rss)
        writer.write("val", iteration=2, val_loss=1.0, val_time=0.1)
        writer.close()
        use = trainer_use(run, events)
        own = psutil.Process(trainer.pid).memory_info().rss
        assert use.pid == trainer.pid
        assert use.rss_bytes > own >= 64 << 20  # the trainer's and its child's
        assert (use.peak_memory_bytes, use.peak_rss_bytes) == (12 << 20, 230 << 20)
        assert trainer_use(run).peak_memory_bytes is None  # without its events
        run.process = {"pid": them["pid"], "start_time": them["start_time"] - 100}  # reused pid
        assert trainer_use(run) is None
        run.process = None
        assert trainer_use(run) is None
    finally:
        trainer.stdin.close()
        trainer.wait(timeout=30)


def test_reading_this_machine_fails_soft_off_macos(isolated_home):
    reading = SetupSources(isolated_home).machine()
    assert reading.total_bytes > 0 and reading.available_bytes > 0
    assert reading.budget is not None and reading.budget.budget_bytes > 0
    if reading.platform != "macOS":
        assert reading.gpu is None and reading.gpu_note and reading.free_percent is None


async def test_the_machine_panel_shows_each_figure_and_closes_with_m(isolated_home):
    app = dashboard(FixedSources)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MachineDialog)
                    and app.screen.reading is not None, "the machine panel")
        figures = text_of(app.screen, "#machine-figures")
        for expected in ("41.0 GiB available", "48.0 GiB training may use", "1.2 GiB in use",
                         "2.15 (1 minute) on 10 cores", "63% free", "41% busy at 1398 MHz",
                         "3.1 GiB resident: support-chat dora (pid 4242)"):
            assert expected in figures
        await pilot.press("m")
        await until(pilot, lambda: not isinstance(app.screen, MachineDialog), "it to close")
