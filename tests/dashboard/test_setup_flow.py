"""Setting up runs from the keyboard: the new-run form, its memory verdict, and what it makes.

The sample models are real (built once per session) and copied into the test's $ZYQUO_HOME;
one test trains for real through the Supervisor. The others fix the memory budget (and the
dataset's row lengths) so their verdicts do not depend on this machine.
"""

from __future__ import annotations

import shutil
import sys

import psutil
from conftest import SAMPLE_DATA, zyquo_cli
from test_setup_helpers import (
    GIB,
    FixedSources,
    install_models,
    open_new_run,
    settle,
    type_into,
    until,
)
from test_setup_helpers import setup_dashboard as dashboard
from textual.widgets import Collapsible

from zyquo_tui.core.memory.advisor import Verdict
from zyquo_tui.core.memory.measure import measure_peak
from zyquo_tui.core.runs.mlx_config import load_mlx_yaml, run_to_mlx_config
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method
from zyquo_tui.core.store.presets import list_presets, load_preset
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.dialogs.confirm import ConfirmDialog
from zyquo_tui.dashboard.dialogs.preset_picker import PresetPickerDialog
from zyquo_tui.dashboard.dialogs.text_prompt import TextPromptDialog
from zyquo_tui.dashboard.messages import SampleChanged
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen
from zyquo_tui.dashboard.screens.models_screen import ModelsScreen, add_model_folder
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen
from zyquo_tui.dashboard.widgets.choice_picker import ChoicePicker
from zyquo_tui.dashboard.widgets.hyperparameter_form import ProblemLine
from zyquo_tui.dashboard.widgets.loss_chart import LossChart
from zyquo_tui.dashboard.widgets.method_picker import MethodPicker
from zyquo_tui.dashboard.widgets.metric_sparkline import MetricSparkline

COMPLETIONS = str(SAMPLE_DATA / "completions")


def shown(screen, selector: str) -> str:
    return str(screen.query_one(selector).render())


async def form_on(pilot, dataset: str):
    """The new-run screen with the sample model and a shipped dataset picked from its lists
    by keyboard, the dataset's check and row count done."""
    screen = await open_new_run(pilot)
    await choose(pilot, "model", "zyquo-tiny")
    await choose(pilot, "dataset", dataset)
    await settle(pilot, screen)
    return screen


async def choose(pilot, select_id: str, label_start: str) -> None:
    """Open a Select with the keyboard and pick the option whose label starts so."""
    screen = pilot.app.screen
    if select_id.startswith("hp-"):
        await screen.form.reveal(select_id[3:])
        await pilot.pause()
    select = screen.query_one(f"#{select_id}")
    select.focus()
    await pilot.press("enter")
    await pilot.pause()
    labels = [str(prompt) for prompt, _ in select._options]
    target = next(i for i, label in enumerate(labels) if label.startswith(label_start))
    current = next((i for i, (_, value) in enumerate(select._options)
                    if value == select.value), 0)
    step = "down" if target >= current else "up"
    await pilot.press(*[step] * abs(target - current), "enter")
    await pilot.pause()


async def test_a_run_set_up_in_the_form_starts_and_trains(models):
    """Pick the sample model and dataset from the lists, type a few settings, press s: the
    run is created, started through the Supervisor, opens in the live metrics, and trains to
    the end. Nothing is fixed here: the real budget, the real row count."""
    app = dashboard()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot)
        await choose(pilot, "model", "zyquo-tiny")
        assert screen.model_path == str(models["zyquo-tiny"])
        await choose(pilot, "dataset", "completions")
        await type_into(pilot, screen, "iters", "30")
        await type_into(pilot, screen, "learning_rate", "5e-4")
        await type_into(pilot, screen, "steps_per_eval", "10")
        await type_into(pilot, screen, "save_every", "10")
        await type_into(pilot, screen, "val_batches", "2")
        await pilot.press("escape")  # leave the field: letters act again
        await settle(pilot, screen)
        assert screen.lengths, "the rows were counted with the model's tokenizer"
        assert screen.plan.assessment.verdict is Verdict.FITS
        assert "num_layers" not in screen.field_errors  # 16 became -1 for a 2-layer model
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, LiveMetricsScreen),
                    lambda: "the new run's live metrics; notifications: "
                    f"{[n.message for n in app._notifications]}", timeout=120)
        run_id = app.screen.run_id
        run = RunStore().get(run_id)
        assert run.name == "zyquo-tiny lora" and run.data == COMPLETIONS
        assert run.hyperparameters.iters == 30 and run.hyperparameters.num_layers == -1
        assert run.hyperparameters.learning_rate == 5e-4
        assert run.memory["verdict"] == "fits" and not run.memory["override"]
        await until(pilot, lambda: (app.service.run(run_id) is not None
                                    and app.service.run(run_id).state is RunState.COMPLETED),
                    "the run to complete", timeout=240)


async def test_a_dpo_run_set_up_in_the_form_trains_and_shows_its_rewards(models):
    """Setup, start, metrics for a preference run, with the real trainer: pick the sample
    model and the preference data from the lists (dpo is the objective), press s; the live
    metrics fill the reward margin and accuracy sparklines as the run trains, and v charts
    the train and validation margins."""
    app = dashboard()
    run_id = None
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            screen = await form_on(pilot, "preference")
            assert screen.objective == "dpo"
            for key, value in (("iters", "40"), ("learning_rate", "1e-3"), ("beta", "0.2"),
                               ("steps_per_report", "5"), ("steps_per_eval", "20"),
                               ("save_every", "20"), ("val_batches", "2")):
                await type_into(pilot, screen, key, value)
            await pilot.press("escape")
            await settle(pilot, screen)
            assert screen.plan.assessment.verdict is Verdict.FITS
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, LiveMetricsScreen),
                        lambda: "the new run's live metrics; notifications: "
                        f"{[n.message for n in app._notifications]}", timeout=120)
            metrics_screen = app.screen
            run_id = metrics_screen.run_id
            run = RunStore().get(run_id)
            assert run.objective == "dpo" and run.hyperparameters.zyquo_tui["beta"] == 0.2
            await until(pilot, lambda: (app.service.run(run_id) is not None
                                        and app.service.run(run_id).state.is_terminal),
                        "the run to end", timeout=240)
            assert app.service.run(run_id).state is RunState.COMPLETED, \
                RunStore().get(run_id).failure
            await until(pilot, lambda: len(app.service.feed(run_id).metrics.series[
                "val_reward_margin"]) >= 3, "the last validation's margin")
            metrics_screen.redraw()
            await pilot.pause()
            for key in ("reward_margin", "reward_accuracy"):
                sparkline = metrics_screen.query_one(f"#spark-{key}", MetricSparkline)
                assert sparkline.display and sparkline.values and sparkline.current != "–"
            await pilot.press("v")
            chart = metrics_screen.query_one(LossChart)
            assert chart.border_title == "Reward margin"
            assert len(chart.train) >= 8 and len(chart.val) >= 3
        finally:
            if run_id is not None and not app.service.store.get(run_id).state.is_terminal:
                app.service.supervisor.cancel(run_id)


async def test_wont_fit_turns_to_fits_with_the_first_suggestion(models):
    """A huge batch and sequence on an 8 GiB budget shows won't fit; the suggestions keep the
    effective batch, and key 1 applies the first one: the form changes and the verdict is
    fits."""
    app = dashboard(lambda home: FixedSources(home, budget=8 * GIB))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]))
        await type_into(pilot, screen, "batch_size", "64")
        await type_into(pilot, screen, "max_seq_length", "8192")
        await type_into(pilot, screen, "iters", "100")
        await pilot.pause()
        assert screen.plan.assessment.verdict is Verdict.WONT_FIT
        assert "won't fit" in shown(screen, "#memory-title")
        first = screen.plan.suggestions[0]
        assert first.verdict is Verdict.FITS
        await pilot.press("escape", "1")
        await pilot.pause()
        assert screen.plan.assessment.verdict is Verdict.FITS
        assert "fits" in shown(screen, "#memory-title")
        values = screen.form.values
        assert int(values["batch_size"]) * int(values["grad_accumulation_steps"]) == 64
        assert int(values["batch_size"]) == first.changes["batch_size"]
        # A step is one batch (as mlx-lm counts): the same updates take that many more steps,
        # and the steps between saves, validations and reports grow alike.
        factor = int(values["grad_accumulation_steps"])
        assert first.iters_factor == factor > 1 and int(values["iters"]) == 100 * factor
        hp = Hyperparameters()
        for key in ("save_every", "steps_per_eval", "steps_per_report"):
            assert int(values[key]) == getattr(hp, key) * factor, key


async def test_qlora_is_refused_on_the_unquantized_sample_and_offered_on_the_quantized(models):
    """The unquantized model offers lora, dora and full, and says why qlora is not offered;
    the 4-bit model turns the method to qlora, offers it, and refuses full with the reason."""
    app = dashboard(lambda home: FixedSources(home))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]))
        picker = screen.query_one(MethodPicker)
        assert Method.QLORA not in picker.allowed and Method.FULL in picker.allowed
        assert "qlora is not offered" in shown(screen, "#method-note")
        picker.focus()
        seen = []
        for _ in range(3):  # → walks the offered methods round to lora, never qlora
            await pilot.press("right")
            seen.append(screen.method)
        assert seen == [Method.DORA, Method.FULL, Method.LORA]
        await choose(pilot, "model", "zyquo-tiny-4bit")
        assert screen.method is Method.QLORA
        assert Method.QLORA in picker.allowed and Method.FULL not in picker.allowed
        assert "full is refused" in shown(screen, "#method-note")
        assert "quantized (4-bit)" in shown(screen, "#method-note")
        assert screen.plan is not None and not screen.plan.estimate.problems


async def test_a_bad_dataset_shows_its_file_line_problems_and_blocks_the_start(models, tmp_path):
    """A dataset with an empty line and invalid JSON: the form lists train.jsonl:N problems,
    and s refuses to create the run, saying why."""
    bad = tmp_path / "bad-chat"
    bad.mkdir()
    lines = (SAMPLE_DATA / "chat" / "train.jsonl").read_text().splitlines()[:20]
    lines[2] = ""
    lines[6] = '{"messages": [{"role": "user", "content": "unfinished'
    (bad / "train.jsonl").write_text("\n".join(lines) + "\n")
    shutil.copy(SAMPLE_DATA / "chat" / "valid.jsonl", bad / "valid.jsonl")
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=str(bad))
        await settle(pilot, screen)
        problems = shown(screen, "#dataset-problems")
        assert "train.jsonl:3: empty line" in problems
        assert "train.jsonl:7: invalid JSON" in problems
        assert "2 errors" in shown(screen, "#dataset-summary")
        screen.query_one("#setup-form").focus()
        await pilot.press("s")
        await pilot.pause()
        assert app.screen is screen
        assert RunStore().list() == []
        messages = [n.message for n in app._notifications]
        assert any("The dataset has 2 errors" in m and "train.jsonl:3" in m for m in messages)


async def test_a_preset_saved_and_loaded_again_is_equal(models):
    """p saves the form as a TOML preset; a fresh form with l and enter loads it: the same
    method, hyperparameters (schedule included), model and dataset."""
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await type_into(pilot, screen, "batch_size", "2")
        await type_into(pilot, screen, "learning_rate", "3e-4")
        await type_into(pilot, screen, "rank", "16")
        await type_into(pilot, screen, "seed", "7")
        screen.query_one(MethodPicker).focus()
        await pilot.press("right")  # lora → dora
        await choose(pilot, "hp-schedule", "cosine_decay")
        await pilot.pause()
        await type_into(pilot, screen, "warmup", "5")
        screen.draft.extra_config = {"wandb": "my-project"}  # as an imported YAML leaves it
        await pilot.press("escape", "p")
        await until(pilot, lambda: isinstance(app.screen, TextPromptDialog), "the name prompt")
        await pilot.press("end", "ctrl+u", *"my preset", "enter")
        await until(pilot, lambda: list_presets() == ["my preset"], "the preset file")
        saved_hp, saved_method = screen.hp, screen.method
        assert saved_hp.lr_schedule == {"name": "cosine_decay", "arguments": [3e-4, 1000, 0],
                                        "warmup": 5}
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is not screen, "the form to close")

        fresh = await open_new_run(pilot)
        fresh.query_one("#setup-form").focus()
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, PresetPickerDialog), "the presets")
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is fresh and fresh.model_path is not None,
                    "the preset in the form")
        await pilot.pause()
        assert fresh.method is saved_method is Method.DORA
        assert fresh.hp == saved_hp
        assert fresh.model_path == str(models["zyquo-tiny"]) and fresh.data_path == COMPLETIONS
        assert fresh.extra_config == {"wandb": "my-project"}
        preset = load_preset("my preset")
        assert preset.hyperparameters == saved_hp and preset.method is Method.DORA


async def test_exported_yaml_is_the_runs_mlx_config_and_imports_back(models, tmp_path):
    """e writes the mlx-lm YAML of the form's run; i reads it into a fresh form, which then
    holds the same settings."""
    target = tmp_path / "exported.yaml"
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await type_into(pilot, screen, "iters", "120")
        await type_into(pilot, screen, "grad_accumulation_steps", "4")
        await pilot.press("escape", "e")
        await until(pilot, lambda: isinstance(app.screen, TextPromptDialog), "the path prompt")
        app.screen.query_one("Input").value = str(target)  # a path: typed as one paste
        await pilot.press("enter")
        await until(pilot, target.exists, "the YAML file")
        made = screen.build_run()
        assert load_mlx_yaml(target) == run_to_mlx_config(made)
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is not screen, "the form to close")

        fresh = await open_new_run(pilot)
        fresh.query_one("#setup-form").focus()
        await pilot.press("i")
        await until(pilot, lambda: isinstance(app.screen, TextPromptDialog), "the path prompt")
        app.screen.query_one("Input").value = str(target)  # a path: typed as one paste
        await pilot.press("enter")
        await until(pilot, lambda: fresh.model_path is not None, "the imported settings")
        assert fresh.hp == screen.hp and fresh.method is Method.LORA
        assert fresh.data_path == COMPLETIONS


async def test_starting_a_run_that_wont_fit_asks_then_overrides(models, monkeypatch):
    """On a budget too small for the sample, s asks first; n keeps the form; y starts the run
    with override_memory=True (the Supervisor records the override)."""
    app = dashboard(lambda home: FixedSources(home, budget=1 << 20, lengths=[60]))
    calls = []

    async with app.run_test(size=(120, 40)) as pilot:
        supervisor = app.service.supervisor

        def start(run_id, **options):
            calls.append(options)
            return supervisor.store.get(run_id)  # recorded, not trained
        monkeypatch.setattr(supervisor, "start", start)
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, screen)
        assert screen.plan.assessment.verdict is Verdict.WONT_FIT
        screen.query_one("#setup-form").focus()
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
        await pilot.press("n")
        await until(pilot, lambda: app.screen is screen, "the form again")
        assert calls == [] and RunStore().list() == []
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
        await pilot.press("y")
        await until(pilot, lambda: calls, "the start")
        assert calls == [{"queue_if_busy": True, "override_memory": True,
                          "override_disk": False}]
        await until(pilot, lambda: isinstance(app.screen, LiveMetricsScreen), "the run view")


class SmallDiskSources(FixedSources):
    """Memory to spare, but 3 MiB free on the store's disk and a 1 MiB floor."""

    def disk(self):
        from zyquo_tui.core.store.user_settings import Settings

        settings = Settings()
        settings.disk_floor_bytes = 1 << 20
        return 3 << 20, settings


async def test_starting_a_run_that_wont_fit_on_disk_asks_then_overrides_the_disk(models,
                                                                                monkeypatch):
    """The disk verdict stands under the memory one; s on a run whose checkpoints won't fit
    asks, and y starts it with override_disk=True."""
    app = dashboard(lambda home: SmallDiskSources(home, lengths=[60]))
    calls = []

    async with app.run_test(size=(120, 40)) as pilot:
        supervisor = app.service.supervisor

        def start(run_id, **options):
            calls.append(options)
            return supervisor.store.get(run_id)
        monkeypatch.setattr(supervisor, "start", start)
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, screen)
        assert screen.plan.assessment.verdict is Verdict.FITS
        assert screen.verdicts.disk.verdict is Verdict.WONT_FIT  # 1000 iters: 10 checkpoints
        assert "Disk · ✗ won't fit" in str(screen.query_one("#memory-details").render())
        screen.query_one("#setup-form").focus()
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
        assert "won't fit on disk" in app.screen.heading
        await pilot.press("y")
        await until(pilot, lambda: calls, "the start")
        assert calls == [{"queue_if_busy": True, "override_memory": False,
                          "override_disk": True}]


async def test_a_draft_is_a_configured_run_and_the_queue_takes_the_next(models, monkeypatch):
    """d saves a configured run and goes back; a second form's a queues its run (the
    Supervisor's enqueue, stubbed here so nothing trains)."""
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    queued = []
    async with app.run_test(size=(120, 40)) as pilot:
        supervisor = app.service.supervisor
        monkeypatch.setattr(supervisor, "enqueue", lambda run_id, **options: (
            queued.append((run_id, options)) or supervisor.store.get(run_id)))
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, screen)
        screen.query_one("#setup-form").focus()
        await pilot.press("d")
        await until(pilot, lambda: app.screen is not screen, "the form to close")
        (draft,) = RunStore().list()
        assert draft.state is RunState.CONFIGURED and draft.name == "zyquo-tiny lora"

        second = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, second)
        second.query_one("#setup-form").focus()
        await pilot.press("a")
        await until(pilot, lambda: queued, "the queue")
        assert queued[0][1] == {"override_memory": False, "override_disk": False}


async def test_pack_rows_is_a_switch_the_verdict_follows_and_the_draft_keeps(models):
    """Pack rows is one of the form's basic settings: switched on from the keyboard, the
    verdict's attention term widens to the packed sequences (docs/memory.md: batch x the
    longest row), and the draft the form makes packs."""
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, screen)
        unpacked = screen.plan.estimate.breakdown["attention"]
        row = await screen.form.reveal("pack")
        await pilot.pause()
        row.control.focus()
        await pilot.press("space")
        await settle(pilot, screen)
        assert screen.plan.estimate.config.packed
        assert screen.plan.estimate.breakdown["attention"] > unpacked
        screen.query_one("#setup-form").focus()
        await pilot.press("d")
        await until(pilot, lambda: app.screen is not screen, "the form to close")
        (draft,) = RunStore().list()
        assert SETTINGS["pack"].get(draft.hyperparameters) is True


async def test_new_run_like_an_existing_one_copies_its_settings(models):
    """N on a selected run opens the form filled with its model, dataset, method and
    hyperparameters, named "... (again)"."""
    store = RunStore().ensure()
    hp = Hyperparameters.from_dict({"iters": 77, "batch_size": 2, "num_layers": -1,
                                    "learning_rate": 2e-4,
                                    "lora_parameters": {"rank": 4, "scale": 10.0}})
    run = Run.new(model=str(models["zyquo-tiny"]), data=COMPLETIONS, method=Method.DORA,
                  name="first try", hyperparameters=hp)
    store.create(run)
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: run.id in app.service.runs, "the run in the list")
        app.screen.table.select_run(run.id)
        await pilot.press("N")
        await until(pilot, lambda: isinstance(app.screen, NewRunScreen), "the form")
        screen = app.screen
        await until(pilot, lambda: screen.ready and screen.model_path, "the copied settings")
        assert screen.query_one("#run-name").value == "first try (again)"
        assert screen.method is Method.DORA and screen.data_path == COMPLETIONS
        assert screen.hp == hp


async def test_measure_runs_the_real_probe_and_shows_it_beside_the_estimate(models):
    """t trains a few real steps in a subprocess (a worker thread: the form keeps answering)
    and the panel shows the measured peak against the estimate."""
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, screen)
        screen.query_one("#setup-form").focus()
        await pilot.press("t")
        await until(pilot, lambda: screen.measure_state.running, "the measurement to start")
        assert "Measuring" in screen.panel.measure_text
        assert screen.panel.measure_text in shown(screen, "#memory-details")
        await type_into(pilot, screen, "iters", "50")  # the form answers meanwhile
        assert screen.form.values["iters"] == "50"
        await until(pilot, lambda: not screen.measure_state.running, "the measurement",
                    timeout=180)
        state = screen.measure_state
        assert state.error is None and state.measurement.peak_bytes > 0
        line = screen.panel.measure_text
        assert line in shown(screen, "#memory-details")
        assert line.startswith("Measured ") and "estimated" in line


async def test_preference_rows_offer_dpo_and_orpo_and_the_form_makes_the_run_it_shows(models):
    """The preference sample: the objective is dpo, orpo is offered and sft is not (and the
    note says why); beta, the DPO loss and the reference show for dpo, beta alone for orpo,
    none for SFT data (which offers sft and distill). A draft holds exactly the settings the
    form shows, through the same checks as `runs new`; the memory estimate is given the
    objective."""
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]),
                                    data=str(SAMPLE_DATA / "preference"))
        await settle(pilot, screen)
        picker = screen.query_one("#objective", ChoicePicker)
        assert screen.objective == "dpo" and picker.allowed == {"dpo", "orpo"}
        assert screen.query_one("#objective-line").display
        assert "sft is not offered" in shown(screen, "#objective-note")
        assert "dataset" not in screen.field_errors

        def rows_shown() -> set[str]:
            return {key for key in ("beta", "dpo_loss", "reference")
                    if screen.form.shows(key)}
        assert rows_shown() == {"beta", "dpo_loss", "reference"}
        await type_into(pilot, screen, "beta", "0.25")
        await choose(pilot, "hp-dpo_loss", "ipo")
        await type_into(pilot, screen, "iters", "40")
        assert screen.plan is not None
        assert SETTINGS["objective"].get(screen.plan.estimate.config.to_hyperparameters(
            screen.hp)) == "dpo" and SETTINGS["objective"].get(screen.hp) == "dpo"

        picker.focus()
        await pilot.press("right")  # dpo → orpo; never round to sft
        assert screen.objective == "orpo" and rows_shown() == {"beta"}
        await pilot.press("right")
        assert screen.objective == "dpo"
        await pilot.press("d")  # the picker has the focus: letters act
        await until(pilot, lambda: RunStore().list(), "the draft")
        run = RunStore().list()[0]
        assert run.objective == "dpo" and run.state is RunState.CONFIGURED
        assert run.hyperparameters.zyquo_tui == {"objective": "dpo", "beta": 0.25,
                                                 "dpo_loss": "ipo"}
        assert run.hyperparameters.iters == 40

        # Back to SFT data: sft (and distill) offered, and the run is sft with no preference
        # settings.
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, screen)
        assert screen.objective == "sft"
        assert screen.query_one("#objective", ChoicePicker).allowed == {"sft", "distill"}
        assert rows_shown() == set()
        assert screen.build_run().hyperparameters.zyquo_tui == {}


async def test_the_forms_data_checks_are_the_clis_with_the_same_sentences(models):
    """Text rows with mask_prompt on and a batch bigger than train.jsonl: the form marks each
    field with the sentence `runs new` refuses the same settings with."""
    text = str(SAMPLE_DATA / "text")
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=text)
        await settle(pilot, screen)
        screen.form.set_values({"mask_prompt": True, "batch_size": "300"},
                               touched={"mask_prompt", "batch_size"})
        await pilot.pause()
        marked = {key: screen.form.row(key)._problem for key in ("mask_prompt", "batch_size")}
    for flags, key in ((["--mask-prompt"], "mask_prompt"), (["--batch-size", "300"],
                                                            "batch_size")):
        done = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", text,
                         "--num-layers", "-1", *flags)
        assert done.returncode == 2
        sentence = done.stderr.strip().removeprefix("zyquo-tui: The run was not created: ")
        assert marked[key] == (sentence, False), (marked, done.stderr)
    assert RunStore().list() == []


async def test_a_marked_field_shows_its_sentence_without_restyling_its_row(models):
    """A warning, then an error, then nothing under a field: the sentence shows in the
    warning's or the error's colour and goes, the value turns red with the error, and no
    widget of the row is matched against the stylesheet again (a match costs about a
    millisecond a widget, in the key press that marks the field)."""
    app = dashboard(FixedSources)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await type_into(pilot, screen, "batch_size", "3")
        await settle(pilot, screen)
        row = screen.form.row("batch_size")
        line = row.query_one(ProblemLine)
        refused = row.control.get_component_rich_style("field-input--refused")
        restyled = []
        update_nodes = app.stylesheet.update_nodes

        def counted(nodes, animate=False):
            nodes = list(nodes)
            restyled.extend(node for node in nodes if node is row or row in node.ancestors)
            return update_nodes(nodes, animate)
        app.stylesheet.update_nodes = counted

        row.show_problem("more than the rows of train.jsonl", warning=True)
        await pilot.pause()
        assert restyled == []
        assert line.display and str(line.content) == "⚠ more than the rows of train.jsonl"
        assert line.render().style == line.get_component_rich_style("problem-line--warning")
        row.show_problem("not a whole number")
        await pilot.pause()
        assert line.display and str(line.content) == "✗ not a whole number"
        assert line.render().style == line.get_component_rich_style("problem-line--error")
        assert restyled == [] and row.control.marked
        assert [span.style for span in row.control._value.spans] == [refused]
        row.show_problem(None)
        await pilot.pause()
        assert not line.display and not row.control.marked
        assert row.control._value.spans == [] and restyled == []


async def test_models_found_later_join_the_list_without_reopening_the_form(
        isolated_home, sample_models, tmp_path):
    """Opened on an empty store, the form says no model is found; the sample built meanwhile
    (SampleChanged) fills the list, and a folder added on the models screen shows up when
    the form is back on top."""
    app = dashboard(FixedSources)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot)
        assert screen.models == []
        assert "no model found" in shown(screen, "#model-facts")
        install_models(isolated_home, {"zyquo-tiny": sample_models["zyquo-tiny"]})
        app.post_message(SampleChanged())
        await until(pilot, lambda: screen.model_path is not None, "the built model")
        assert [m.name for m in screen.models] == ["zyquo-tiny"]  # the only one: taken
        assert "no model found" not in shown(screen, "#model-facts")

        more = tmp_path / "more"
        shutil.copytree(sample_models["zyquo-tiny-4bit"], more / "tiny-4bit")
        assert add_model_folder(isolated_home, str(more))
        app.push_screen(ModelsScreen())
        await pilot.pause()
        await pilot.press("escape")
        await until(pilot, lambda: len(screen.models) == 2, "the added folder's model")
        assert screen.model_path == str(isolated_home / "models" / "zyquo-tiny")


def measuring_children() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "zyquo_tui.trainer.measure" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


class SlowStartSources(FixedSources):
    """Real measurements whose subprocess first sleeps a minute: long enough that only a
    cancel can end it within the test."""

    def __init__(self, home, python: str) -> None:
        super().__init__(home, lengths=[60])
        self.python = python

    def measure(self, model, config, *, data, hyperparameters, extra_config, cancelled=None):
        return measure_peak(model, config, data=data, hyperparameters=hyperparameters,
                            extra_config=extra_config, cancelled=cancelled, python=self.python)


async def test_leaving_the_form_stops_its_measurement(models, tmp_path):
    """A measurement is a subprocess; closing the form while it runs kills it, instead of
    leaving it to train on with nobody to read the result."""
    slow_python = tmp_path / "slow-python"
    slow_python.write_text(f"#!{sys.executable}\nimport os, sys, time\ntime.sleep(60)\n"
                           f"os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])\n")
    slow_python.chmod(0o755)
    app = dashboard(lambda home: SlowStartSources(home, str(slow_python)))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, screen)
        screen.query_one("#setup-form").focus()
        await pilot.press("t")
        await until(pilot, lambda: measuring_children(), "the measuring subprocess")
        child = measuring_children()[0]
        await pilot.press("escape")
        await until(pilot, lambda: not screen.is_attached, "the form to close")
        await until(pilot, lambda: not child.is_running(), "the subprocess to end", timeout=20)


async def test_the_form_says_how_long_the_run_takes_estimated_off_the_event_loop(models):
    """Beside the verdict, the duration: unknown with an empty store (and the key that
    measures), then, once the store's history gives a figure, about so long and from which
    run. The estimate runs in a worker thread, again when a setting it depends on changes."""
    import threading

    from zyquo_tui.core.memory.duration import DurationEstimate

    calls = []

    class HistorySources(FixedSources):
        with_history = False
        rows_from = "rows"
        source = "history"

        def duration(self, model, facts, method, hp, data, lengths, measured):
            calls.append((threading.current_thread() is threading.main_thread(), hp.iters))
            if not self.with_history:  # the real estimate, on this test's empty store
                return super().duration(model, facts, method, hp, data, lengths, measured)
            return DurationEstimate(hp.iters * 0.72, {"source": self.source, "same_model": True,
                                                      "run_name": "earlier run",
                                                      "tokens_per_step_from": self.rows_from})

    sources = HistorySources
    app = dashboard(lambda home: sources(home, budget=8 * GIB))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]))
        await settle(pilot, screen)
        assert "Time · unknown: no run finished here yet; t measures" in shown(
            screen, "#memory-figures")
        app.setup_sources.with_history = True
        before = len(calls)
        screen.recompute()  # nothing it depends on changed: no new estimate
        assert len(calls) == before
        await type_into(pilot, screen, "iters", "500")
        await settle(pilot, screen)
        await until(pilot, lambda: "about" in shown(screen, "#memory-figures"), "the duration")
        assert "Time · about 6m00s, from run earlier run of this model" in shown(
            screen, "#memory-figures")
        assert "rows' lengths" not in shown(screen, "#memory-figures")
        # No dataset to count a step's tokens: the figure rests on the basis run's rows.
        app.setup_sources.rows_from = "basis_batch_scaled"
        await type_into(pilot, screen, "iters", "600")
        await settle(pilot, screen)
        await until(pilot, lambda: "7m12s" in shown(screen, "#memory-figures"), "the duration")
        assert ("from run earlier run of this model, its rows' lengths (no dataset yet)"
                in shown(screen, "#memory-figures").replace("\n", " "))
        # Measured without a dataset: on rows of max_seq_length, which the step's tokens count.
        app.setup_sources.source, app.setup_sources.rows_from = "measured", "max_seq_length"
        await type_into(pilot, screen, "iters", "500")
        await settle(pilot, screen)
        await until(pilot, lambda: "measured" in shown(screen, "#memory-figures"), "the duration")
        assert ("about 6m00s, at the measured speed, rows of max_seq_length (no dataset yet)"
                in shown(screen, "#memory-figures").replace("\n", " "))
    assert calls and not any(on_loop for on_loop, _ in calls)
    assert calls[-1][1] == 500


def test_the_time_line_does_not_say_no_dataset_when_one_is_picked_but_not_counted():
    """A dataset picked whose rows are not counted (still counting, or it has errors to fix)
    is not "no dataset": the line says which."""
    from zyquo_tui.core.memory.duration import DurationEstimate
    from zyquo_tui.dashboard.widgets.memory_panel import duration_line

    guessed = DurationEstimate(60.0, {"source": "history", "same_model": True,
                                      "run_name": "earlier", "tokens_per_step_from":
                                      "basis_batch_scaled"})
    assert "its rows' lengths (no dataset yet)" in duration_line(guessed).plain
    picked = duration_line(guessed, dataset_picked=True).plain
    assert "its rows' lengths (the dataset's rows not counted)" in picked
    assert "no dataset" not in picked


async def test_a_distributed_run_is_judged_with_its_ranks_here_and_its_other_hosts(models):
    """A copy of a run on two processes (`N`): the panel counts both ranks in this machine's
    memory, one rank's share of the batch each; a run on two hosts names the other one, whose
    free memory no `hosts check` has found yet."""
    def like(**own) -> Run:
        return Run.new(model=str(models["zyquo-tiny"]), data=COMPLETIONS,
                       hyperparameters=Hyperparameters.from_dict(
                           {"num_layers": -1, "batch_size": 4, "zyquo_tui": own}))

    app = dashboard(lambda home: FixedSources(home, budget=8 * GIB, lengths=[40, 60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, like=like(ranks=2))
        await settle(pilot, screen)
        assessment = screen.plan.assessment
        assert assessment.ranks_here == 2
        one_rank = screen.advisor.estimate(screen.facts, screen.plan.estimate.config.replace(
            batch_size=2)).total_bytes
        assert screen.plan.estimate.total_bytes == one_rank
        assert "2 ranks here ×" in shown(screen, "#memory-figures")
        await pilot.press("escape")
        await pilot.pause()

        screen = await open_new_run(pilot, like=like(hosts=["localhost", "mini-two.invalid"]))
        await settle(pilot, screen)
        assert screen.plan.assessment.ranks_here == 1
        assert "mini-two.invalid · unknown: no `zyquo-tui hosts check` has reached" in shown(
            screen, "#memory-details")


async def test_once_the_form_settles_the_verdict_judges_by_a_measured_replica(models):
    """The app's own replicas (a subprocess training a scaled-down copy of the config): the
    terms judge at once and say a replica is on its way; then the replica's figure does, with
    its note; a setting changed and back shows it again without measuring again."""
    app = dashboard(lambda home: FixedSources(home, lengths=[60], replicas=True))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        assert any("being measured" in note for note in screen.plan.estimate.notes)
        await until(pilot, lambda: screen.plan.estimate.replica is not None,
                    "the replica's figure", timeout=120)
        estimate = screen.plan.estimate
        assert estimate.total_bytes == estimate.replica["peak_bytes"] != estimate.model_bytes
        # the sample model's config is small enough to be measured whole (replica.py)
        assert "measured whole" in shown(screen, "#memory-details")
        assert "being measured" not in shown(screen, "#memory-details")  # it was, and is not
        measured = dict(screen.replicas)
        await type_into(pilot, screen, "rank", "4")
        assert screen.plan.estimate.replica is None  # another config: the terms, for now
        await type_into(pilot, screen, "rank", "8")
        assert screen.plan.estimate.replica == estimate.replica
        await until(pilot, lambda: all(w.is_finished for w in screen.setup.workers), "its workers")
        assert all(screen.replicas[key] is value for key, value in measured.items())


async def test_epochs_typed_show_their_iterations_and_iterations_typed_their_epochs(models):
    """On the sample data (225 train rows): 2 epochs at batch 4 fill Iterations with 112 and
    say how; batch 5 makes them 90; typing iterations clears the epochs, and the Epochs help
    says how many epochs they make. The run made is the draft's."""
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(150, 45)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, screen)
        form = screen.form
        iters = form.row("iters")
        await type_into(pilot, screen, "epochs", "2")
        await pilot.pause()
        assert iters.control.value == "112" and screen.hp.iters == 112
        assert iters.help_text == "2 epochs × 56 batches of 4"
        assert "leave 1 row over" in screen.field_warnings["epochs"]

        await type_into(pilot, screen, "batch_size", "5")
        await pilot.pause()
        assert iters.control.value == "90" and screen.hp.iters == 90
        assert "epochs" not in screen.field_warnings  # 225 rows divide by 5
        run = screen.build_run()
        assert (run.hyperparameters.iters, SETTINGS["epochs"].get(run.hyperparameters)) == \
            (90, 2)

        await type_into(pilot, screen, "iters", "30")
        await pilot.pause()
        assert form.row("epochs").control.value == "" and screen.draft.epochs is None
        assert screen.hp.iters == 30
        assert form.row("epochs").help_text == "30 iterations = 0.67 epochs"
        assert iters.help_text == "training steps (mlx-lm: 1000)"


async def test_starting_with_a_marked_field_says_why_and_focuses_it_even_when_folded(models):
    """s with a value the draft refuses (seed, in the folded Advanced group): the run is not
    made, the notification says why, and the field is revealed and focused."""
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=COMPLETIONS)
        await settle(pilot, screen)
        await type_into(pilot, screen, "seed", "-3")
        await pilot.press("escape")  # out of the field: keys act on the form
        await pilot.pause()
        screen.query_one("#model").focus()
        screen.query_one("#advanced", Collapsible).collapsed = True  # folded again
        await pilot.pause()
        await pilot.press("s")
        await until(pilot, lambda: app.focused is screen.form.row("seed").control,
                    "the seed field to be focused")
        assert "seed must be a whole number of 0 or more" in screen.field_errors["seed"]
        assert not list((RunStore().home / "runs").glob("*/run.json"))
