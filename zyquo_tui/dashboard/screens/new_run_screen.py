"""NewRunScreen: set up a run, with its memory verdict beside the form as you type.

The form: a name, a model (from discovery: size, quantization, architecture), a dataset (its
format and validation summary; problems with file:line), the method (qlora only for quantized
bases, full only for unquantized ones), and the hyperparameters (basic, advanced, the
learning-rate schedule) with mlx-lm's defaults and a line of help each. Values a run cannot
train with are marked at their field with the reason.

The memory panel recomputes on every change: verdict, estimate against the budget, the
breakdown as a bar, and suggestions that fit, each applied with one key (1-6). `t` measures
the real peak with a few training steps (a subprocess, in a worker thread).

Then: start now (`s`), add to the queue (`a`), save as a draft (`d`, a configured run), export
the mlx-lm YAML (`e`), import one (`i`), save or load a preset (`p`, `l`). A run that won't fit
asks before it starts, and then starts with the override recorded.

Keys act when no text field has the focus: `esc` leaves a field (a second `esc` goes back),
enter moves to the next field, tab and shift+tab move between fields.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.events import DescendantFocus
from textual.widgets import Footer, Input, Select, Static
from textual.worker import get_current_worker

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.formatting import basename
from zyquo_tui.core.library.datasets import DatasetInfo, DatasetReport, describe_dataset
from zyquo_tui.core.library.models import ModelInfo, inspect_model
from zyquo_tui.core.library.rows import objectives_for, training_refusal
from zyquo_tui.core.library.run_checks import DataTraits, check_run, fit_default_layers
from zyquo_tui.core.memory.advisor import MemoryAdvisor, Plan, Verdict
from zyquo_tui.core.memory.disk_verdict import DiskAssessment, assess_disk
from zyquo_tui.core.memory.duration import DurationEstimate
from zyquo_tui.core.memory.estimate import Estimate, TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.host_verdicts import (
    HostVerdict,
    host_verdicts,
    placed_advisor,
    placement_of,
)
from zyquo_tui.core.runs.mlx_config import (
    dump_mlx_yaml,
    load_mlx_yaml,
    run_from_mlx_config,
    run_to_mlx_config,
)
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import OBJECTIVES, SETTINGS, Hyperparameters, Method
from zyquo_tui.core.runs.value_checks import value_text
from zyquo_tui.core.store.paths import presets_dir
from zyquo_tui.core.store.presets import Preset, list_presets, load_preset, save_preset
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.dashboard.dialogs.confirm import ConfirmDialog
from zyquo_tui.dashboard.dialogs.preset_picker import PresetPickerDialog
from zyquo_tui.dashboard.dialogs.text_prompt import TextPromptDialog
from zyquo_tui.dashboard.library_text import (
    dataset_label,
    dataset_problems,
    dataset_summary,
    model_facts_line,
    model_label,
    problem_where,
)
from zyquo_tui.dashboard.messages import SampleChanged
from zyquo_tui.dashboard.screens.zyquo_screen import ZyquoScreen
from zyquo_tui.dashboard.setup_sources import setup_sources
from zyquo_tui.dashboard.widgets.choice_picker import ChoicePicker
from zyquo_tui.dashboard.widgets.hyperparameter_form import (
    FIELD_KEYS,
    FieldInput,
    HyperparameterForm,
)
from zyquo_tui.dashboard.widgets.labeled_line import LabeledLine
from zyquo_tui.dashboard.widgets.memory_panel import (
    MeasureState,
    MemoryPanel,
    duration_line,
    hosts_lines,
)
from zyquo_tui.dashboard.widgets.method_picker import MethodPicker
from zyquo_tui.dashboard.widgets.static_update import PanelText, update_static
from zyquo_tui.dashboard.widgets.title_bar import TitleBar
from zyquo_tui.resources import styles_dir

SUGGESTION_KEYS = ("1", "2", "3", "4", "5", "6")

# What the help line says for the controls above the hyperparameters.
CONTROL_HELP = {
    "run-name": "The run's name in the runs list (left alone, it follows the model and method)",
    "model": "Models found in $ZYQUO_HOME/models, config.toml folders, the Hugging Face cache "
             "and LM Studio (M lists them all)",
    "dataset": "Folders with train.jsonl: $ZYQUO_HOME/datasets and the samples (D lists them)",
    "method": "← → choose: lora and dora adapt a full-precision base, qlora a quantized one; "
              "full trains every weight",
    "objective": "← → choose: dpo learns to prefer chosen over rejected against a reference; "
                 "orpo does so with no reference, beside the chosen answers' loss",
}
# Why an objective is not offered for a dataset of preference rows (the others train sft only,
# and the objective line is hidden for them).
SFT_NOT_OFFERED = "sft is not offered: preference rows train dpo or orpo."


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"


# The settings counted in steps (batches, as mlx-lm counts them), which a suggestion that
# splits the batch over accumulation steps multiplies.
STEP_COUNTS = ("iters", "save_every", "steps_per_eval", "steps_per_report")


class NewRunScreen(ZyquoScreen):
    """Set up a new run (see the module docstring). `like` prefills it from an existing run;
    `model` and `data` preselect a model or dataset folder."""

    AREA = "Setup"
    CSS_PATH = str(styles_dir() / "setup.tcss")
    NARROW_BELOW = 110  # columns: below this the form drops its help column
    AUTO_FOCUS = "#model"
    BINDINGS = [
        Binding("s,ctrl+s", "start", "Start", id="setup.start",
                tooltip="Create the run and start it now (queued if another run is active)"),
        Binding("a", "queue", "Queue", id="setup.queue",
                tooltip="Create the run and add it to the end of the queue"),
        Binding("d", "draft", "Draft", id="setup.draft",
                tooltip="Save the run as configured, to start later from the runs list"),
        Binding("t", "measure", "Measure", id="setup.measure",
                tooltip="Train a few real steps in a subprocess and show the measured peak "
                        "beside the estimate"),
        Binding("e", "export_yaml", "Export", id="setup.export", show=False,
                tooltip="Write the mlx-lm YAML config of this run (mlx_lm lora -c FILE)"),
        Binding("i", "import_yaml", "Import", id="setup.import", show=False,
                tooltip="Fill the form from an mlx-lm YAML config"),
        Binding("p", "save_preset", "Preset", id="setup.preset.save",
                tooltip="Save these settings as a preset (TOML in $ZYQUO_HOME/presets)"),
        Binding("l", "load_preset", "Load", id="setup.preset.load", show=False,
                tooltip="Fill the form from a saved preset"),
        *[Binding(key, f"apply_suggestion({index})", f"Apply suggestion {key}", show=False,
                  id=f"setup.suggestion.{key}",
                  tooltip=f"Apply memory suggestion {key} to the form")
          for index, key in enumerate(SUGGESTION_KEYS)],
        Binding("escape", "back", "Back", id="setup.back", show=False,
                tooltip="Leave the text field; outside one, back to where you were"),
    ]

    def __init__(self, *, like: Run | None = None, model: str | None = None,
                 data: str | None = None, preset: Preset | None = None) -> None:
        super().__init__()
        self.like = like
        self.start_model = model
        self.start_data = data
        self.start_preset = preset
        self.models: list[ModelInfo] = []
        self.model_by_path: dict[str, ModelInfo] = {}
        self.unready_models = 0
        self.datasets: list[DatasetInfo] = []
        self.model_path: str | None = None
        self.facts: ModelFacts | None = None
        self.facts_error: str | None = None
        self.data_path: str | None = None
        self.report: DatasetReport | None = None
        self.report_error: str | None = None
        self.method = Method.LORA
        self.objective = "sft"
        self.advisor: MemoryAdvisor | None = None
        self.advisor_error: str | None = None
        self.lengths: list[int] | None = None
        self.lengths_key: tuple | None = None
        self.lengths_error: str | None = None
        self.extra_config: dict[str, Any] = {}
        self.base_hp = Hyperparameters()
        self.name_touched = False
        self.hp = Hyperparameters()
        self.plan: Plan | None = None
        self.disk: DiskAssessment | None = None  # the disk verdict beside the memory one
        self.disk_free: int | None = None
        self.disk_settings: Settings | None = None
        self.field_errors: dict[str, str] = {}
        self.field_warnings: dict[str, str] = {}
        self.measure_state = MeasureState()
        # Replicas measured for this screen's configs (core/memory/replica.py): the estimate
        # each gives, or why none could be measured. The verdict judges by a config's replica
        # once it is here, by the terms until then.
        self.replicas: dict[tuple, Estimate | str] = {}
        self.replica_key: tuple | None = None  # the config whose replica is on its way
        self._replica_timer: Any = None
        # The duration beside the verdict: estimated in a worker (it reads the store's
        # finished runs) whenever what it depends on changes; the last one stays shown.
        self.duration: DurationEstimate | None = None
        self.duration_key: tuple | None = None
        # A distributed run's other hosts: their free memory as `hosts check` found it.
        self.known_hosts: dict[str, dict[str, Any]] = {}
        self.host_verdicts: list[HostVerdict] = []
        self.submitting = False
        self.method_note = ""
        self.ready = False  # models and datasets discovered
        self.shown_before = False

    # -- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        self._fit_width()  # before the children exist: restyling them all costs time
        yield TitleBar("new", "New run", id="title")
        with Horizontal(id="setup-body"):
            with VerticalScroll(id="setup-form"):
                yield Static("Run", classes="form-heading")
                with LabeledLine("Name", classes="setup-line"):
                    yield FieldInput(placeholder="model and method", compact=True,
                                     id="run-name", select_on_focus=False)
                with LabeledLine("Model", classes="setup-line"):
                    yield Select([], prompt="looking for models…", compact=True, id="model")
                yield PanelText("", id="model-facts", classes="setup-detail", markup=False)
                with LabeledLine("Dataset", classes="setup-line"):
                    yield Select([], prompt="looking for datasets…", compact=True, id="dataset")
                yield PanelText("", id="dataset-summary", classes="setup-detail", markup=False)
                yield PanelText("", id="dataset-problems", classes="setup-detail", markup=False)
                with LabeledLine("Method", classes="setup-line"):
                    yield MethodPicker(id="method")
                yield PanelText("", id="method-note", classes="setup-detail", markup=False)
                # Shown for a preference dataset only: other data trains sft alone.
                with LabeledLine("Objective", classes="setup-line", id="objective-line"):
                    yield ChoicePicker(OBJECTIVES, id="objective")
                yield PanelText("", id="objective-note", classes="setup-detail", markup=False)
                yield HyperparameterForm(id="hp", on_edit=self.hyperparameters_edited)
            yield MemoryPanel(id="memory")
        yield Static("", id="focus-help", markup=False)
        yield Footer(compact=True)

    def _detail(self, name: str, content: str | Text) -> None:
        """Fill a detail line under a control; an empty one takes no room."""
        update_static(self.query_one(f"#{name}", Static), content)

    @property
    def form(self) -> HyperparameterForm:
        return self.query_one(HyperparameterForm)

    @property
    def panel(self) -> MemoryPanel:
        return self.query_one(MemoryPanel)

    @property
    def sources(self):
        return setup_sources(self.app)

    def _fit_width(self) -> None:
        self.set_class(self.app.size.width < self.NARROW_BELOW, "-narrow")

    def on_resize(self) -> None:
        self._fit_width()

    def on_screen_resume(self) -> None:
        self._fit_width()
        if self.shown_before:  # back from the models screen, say: a folder may be new
            self._rediscover()
        self.shown_before = True

    def on_sample_changed(self, message: SampleChanged) -> None:
        self._rediscover()  # the sample model was just built (ctrl+p: Sample)

    def on_mount(self) -> None:
        for detail in self.query(".setup-detail"):
            detail.display = False  # shown when they have something to say
        self.query_one("#objective-line").display = False
        self.form.set_objective(self.objective)
        self.panel.show_message("reading this machine",
                                "The memory budget comes from a short MLX probe the first "
                                "time (seconds); it is remembered afterwards.")
        self._set_focus_help("model")
        # The lists of the last look show at once, and a worker looks again. The first look
        # of a session is made here: tens of milliseconds for 50 models (headers only), and
        # far faster than a worker thread competing with the first layout for the GIL.
        known = self.sources.known_models
        if known is None:
            models, datasets, error = self._find()
            if error:
                self.notify(error, severity="error", title="New run")
        else:
            models, datasets = known, self.sources.datasets(self._extra_datasets())
            self.run_worker(self._discover, thread=True, group="discover",
                            exit_on_error=False, name="discover models and datasets")
        self._fill_lists(models, datasets)
        self._apply_start()
        self.run_worker(self._make_advisor, thread=True, group="advisor", exit_on_error=False,
                        name="read the memory budget")

    # -- discovery ------------------------------------------------------------------------------

    def _extra_datasets(self) -> list[str]:
        extra = [self.start_data] if self.start_data else []
        if self.like is not None:
            extra.append(self.like.data)
        if self.start_preset is not None and self.start_preset.data:
            extra.append(self.start_preset.data)
        return [p for p in extra if p and Path(p).is_dir()]

    def _find(self) -> tuple[list[ModelInfo], list[DatasetInfo], str | None]:
        try:
            return self.sources.models(), self.sources.datasets(self._extra_datasets()), None
        except Exception as error:  # discovery fails soft: empty lists and the reason
            return [], [], f"Looking for models and datasets failed: {error}"

    def _rediscover(self) -> None:
        self.run_worker(self._discover, thread=True, group="discover", exclusive=True,
                        exit_on_error=False, name="discover models and datasets")

    def _discover(self) -> None:
        """Look again (a worker thread): a model added since the last look appears."""
        models, datasets, error = self._find()
        if error is None:
            self.app.call_from_thread(self._fill_lists, models, datasets)

    def _fill_lists(self, models: list[ModelInfo], datasets: list[DatasetInfo]) -> None:
        """Show the models mlx-lm can train and the datasets (keeping the current choice)."""
        if not self.is_attached:
            return
        ready = [m for m in models if m.ready]
        chosen = [self.model_path] if self.model_path in self.model_by_path else []
        extra_models = [self.model_by_path[p] for p in chosen
                        if p not in {str(m.path) for m in ready}]
        listed = [*ready, *extra_models]
        data_paths = {str(d.path) for d in datasets}
        extra_data = [d for d in self.datasets if str(d.path) == self.data_path
                      and self.data_path not in data_paths]
        data_listed = [*datasets, *extra_data]
        if ([str(m.path) for m in listed] == [str(m.path) for m in self.models]
                and [str(d.path) for d in data_listed] == [str(d.path) for d in self.datasets]
                and self.ready):
            return  # nothing new: leave the controls alone
        self.unready_models = len(models) - len(ready)
        self.models = listed
        self.model_by_path = {str(m.path): m for m in listed}
        self.datasets = data_listed
        model_select = self.query_one("#model", Select)
        data_select = self.query_one("#dataset", Select)
        with self.prevent(Select.Changed):
            model_select.set_options([(model_label(m), str(m.path)) for m in listed])
            model_select.prompt = "pick a model" if listed else "no models found"
            if self.model_path in self.model_by_path:
                model_select.value = self.model_path
            data_select.set_options([(dataset_label(d), str(d.path)) for d in data_listed])
            data_select.prompt = "pick a dataset" if data_listed else "no datasets found"
            if self.data_path in {str(d.path) for d in data_listed}:
                data_select.value = self.data_path
        if not listed:
            hint = ("no model found that mlx-lm can train here. Build the sample model "
                    "(ctrl+p: Sample) or add a folder on the Models screen (M).")
            if self.unready_models:
                hint += f" {self.unready_models} found need converting: see the Models screen."
            self._detail("model-facts", hint)
        elif self.model_path is None and not self.facts_error:
            self._detail("model-facts", "")  # a hint from an earlier, empty look
            if self.ready and len(listed) == 1:  # the first model appeared: take it
                self.choose_model(str(listed[0].path))
                self.recompute()

    def _apply_start(self) -> None:
        """Fill the form from what the screen was opened with (once, after the lists)."""
        ready = self.models
        if self.like is not None:
            run = self.like
            self.apply_settings(model=run.model, data=run.data, method=run.method,
                                hp=run.hyperparameters, name=f"{run.name} (again)",
                                extra=dict(run.extra_config))
        elif self.start_preset is not None:
            self.apply_preset(self.start_preset)
        else:
            if self.start_model:
                self.choose_model(self.start_model)
            elif len(ready) == 1:
                self.choose_model(str(ready[0].path))
            if self.start_data:
                self.choose_dataset(self.start_data)
        self.ready = True
        self.recompute()

    def _make_advisor(self) -> None:
        try:
            self.disk_free, self.disk_settings = self.sources.disk()
            self.known_hosts = self.sources.known_hosts()
            advisor = self.sources.advisor()
        except Exception as error:
            self.app.call_from_thread(self._advisor_made, None, str(error))
            return
        self.app.call_from_thread(self._advisor_made, advisor, None)

    def _advisor_made(self, advisor: MemoryAdvisor | None, error: str | None) -> None:
        if not self.is_attached:
            return
        self.advisor = advisor
        self.advisor_error = error
        self.recompute()

    # -- choosing model, dataset, method --------------------------------------------------------

    def choose_model(self, path: str | None) -> None:
        """Select a model folder (adding it to the list when discovery did not find it)."""
        if path and path not in self.model_by_path and Path(path).is_dir():
            info = inspect_model(path)
            self.model_by_path[path] = info
            self.models.append(info)
            select = self.query_one("#model", Select)
            with self.prevent(Select.Changed):
                select.set_options([(model_label(m), str(m.path)) for m in self.models])
        select = self.query_one("#model", Select)
        with self.prevent(Select.Changed):
            select.value = path if path in self.model_by_path else Select.NULL
        self._model_chosen(path if path in self.model_by_path else None, requested=path)

    def _model_chosen(self, path: str | None, requested: str | None = None) -> None:
        self.model_path = path
        self.facts = None
        self.facts_error = None
        if path is None:
            if requested:
                self.facts_error = f"{requested}: no such model folder."
                self._detail("model-facts", self.facts_error)
            self._update_methods()
            return
        info = self.model_by_path[path]
        try:
            self.facts = ModelFacts.from_folder(path)
        except UserError as error:
            self.facts_error = error.message
        line = model_facts_line(info)
        if not info.ready:
            line += f"\n✗ {info.status}: {info.status_detail}"
        if self.facts_error:
            line += f"\n✗ {self.facts_error}"
        self._detail("model-facts", line)
        # A num_layers nobody chose that is more than a small model has trains all of them
        # (the rule `runs new` follows too).
        if self.facts is not None and "num_layers" not in self.form.touched:
            hp = self.form.hyperparameters(self.base_hp)
            if fit_default_layers(hp, self.facts.traits()):
                self.form.set_values({"num_layers": value_text(hp.num_layers)})
        self._update_methods()
        self._update_name()
        self._start_lengths()

    def choose_dataset(self, path: str | None) -> None:
        if path and path not in {str(d.path) for d in self.datasets} and Path(path).is_dir():
            self.datasets.append(describe_dataset(Path(path)))
            select = self.query_one("#dataset", Select)
            with self.prevent(Select.Changed):
                select.set_options([(dataset_label(d), str(d.path)) for d in self.datasets])
        select = self.query_one("#dataset", Select)
        known = path in {str(d.path) for d in self.datasets}
        with self.prevent(Select.Changed):
            select.value = path if known else Select.NULL
        if path and not known:
            self.data_path = None
            self.report = None
            self._detail("dataset-summary", 
                f"✗ {path}: no such dataset folder (a folder with train.jsonl).")
            return
        self._dataset_chosen(path)

    def _dataset_chosen(self, path: str | None) -> None:
        self.data_path = path
        self.report = None
        self.report_error = None
        self.lengths = None
        self.lengths_key = None
        self._detail("dataset-problems", "")
        if path is None:
            self._detail("dataset-summary", "")
            self._update_objectives()
            return
        cached = self.sources.cached_validation(path)
        if cached is not None:
            self._validated(path, cached, None)
            return
        self._detail("dataset-summary", "checking every row…")
        self.run_worker(lambda: self._validate(path), thread=True, group="validate",
                        exclusive=True, exit_on_error=False, name=f"validate {path}")

    def _validate(self, path: str) -> None:
        try:
            report, error = self.sources.validation(path), None
        except (OSError, UserError) as problem:
            report, error = None, str(problem)
        self.app.call_from_thread(self._validated, path, report, error)

    def _validated(self, path: str, report: DatasetReport | None, error: str | None) -> None:
        if not self.is_attached or path != self.data_path:
            return
        self.report = report
        self.report_error = error
        if report is None:
            self._detail("dataset-summary", f"✗ cannot check {path}: {error}")
        else:
            self._detail("dataset-summary", dataset_summary(report))
            self._detail("dataset-problems", dataset_problems(
                report, more_hint=" (the Datasets screen lists them all)")
                if report.problems else "")
        self._update_objectives()
        self._start_lengths()
        self.recompute()

    def _update_methods(self) -> None:
        """Offer qlora only on a quantized base, refuse full on one, and say why."""
        picker = self.query_one(MethodPicker)
        info = self.model_by_path.get(self.model_path or "")
        if self.facts is not None:
            quantized = self.facts.quantized
        else:
            quantized = bool(info and info.quantization)
        if info is None:
            picker.allowed = frozenset({Method.LORA, Method.DORA, Method.FULL})
            self.method_note = ("qlora is for quantized models, full for unquantized ones: "
                                "pick a model first.")
            if self.method is Method.QLORA:
                self.set_method(Method.LORA)
        elif quantized:
            bits = info.quantization.bits if info.quantization else self.facts.quantization_bits
            picker.allowed = frozenset({Method.QLORA, Method.DORA})
            self.method_note = (f"full is refused: {info.name} is quantized ({bits}-bit); full "
                                "fine-tuning needs an unquantized model.")
            if self.method in (Method.LORA, Method.FULL):
                self.set_method(Method.QLORA)
        else:
            picker.allowed = frozenset({Method.LORA, Method.DORA, Method.FULL})
            self.method_note = (f"qlora is not offered: {info.name} is not quantized "
                                "(mlx_lm convert -q makes a copy that is).")
            if self.method is Method.QLORA:
                self.set_method(Method.LORA)
        self._show_method_problem(self.field_errors.get("method"))

    def _update_objectives(self) -> None:
        """Offer the objectives the dataset trains: dpo (the default) and orpo for preference
        rows, with why sft is not; sft alone, and no objective line, for other rows."""
        data_format = self.report.format if self.report is not None else None
        offered = objectives_for(data_format) or ("sft",)
        preference = "sft" not in offered
        picker = self.query_one("#objective", ChoicePicker)
        picker.allowed = frozenset(offered)
        self.query_one("#objective-line").display = preference
        self._detail("objective-note", SFT_NOT_OFFERED if preference else "")
        if self.objective not in offered:
            self.set_objective(offered[0])

    def set_objective(self, objective: str) -> None:
        self.objective = objective
        self.query_one("#objective", ChoicePicker).choose(objective)
        self.form.set_objective(objective)

    def set_method(self, method: Method) -> None:
        self.method = method
        self.query_one(MethodPicker).choose(method)
        self.form.set_method(method)
        self._update_name()

    def _auto_name(self) -> str:
        model = basename(self.model_path) if self.model_path else "new run"
        return f"{model} {self.method.value}"

    def _update_name(self) -> None:
        if self.name_touched:
            return
        field = self.query_one("#run-name", Input)
        with self.prevent(Input.Changed):
            field.value = self._auto_name()

    @property
    def data_trainable(self) -> bool:
        """The chosen dataset is checked, has no errors, and is of a format mlx-lm trains."""
        report = self.report
        return report is not None and report.ok and not training_refusal(report.format)

    # -- token lengths (worker thread) ----------------------------------------------------------

    def _start_lengths(self) -> None:
        """Count the dataset's rows in tokens with the model's tokenizer: batches are as wide
        as their longest row, so this, not max_seq_length, decides the verdict."""
        if not (self.model_path and self.data_path and self.facts is not None
                and self.data_trainable):
            return
        key = (self.model_path, self.data_path)
        if key == self.lengths_key:
            return
        self.lengths_key = key
        self.lengths = None
        self.lengths_error = None
        model, data = key
        extra = dict(self.extra_config)
        mask = bool(self.form.values.get("mask_prompt"))

        def count() -> None:
            worker = get_current_worker()
            try:
                lengths, error = self.sources.token_lengths(
                    model, data, extra, mask, cancelled=lambda: worker.is_cancelled), None
            except Exception as problem:  # the verdict falls back to max_seq_length
                lengths, error = None, getattr(problem, "message", str(problem))
            if not worker.is_cancelled:
                self.app.call_from_thread(self._lengths_counted, key, lengths, error)
        self.run_worker(count, thread=True, group="lengths", exclusive=True,
                        exit_on_error=False, name="count tokens")

    def _lengths_counted(self, key: tuple, lengths: list[int] | None, error: str | None) -> None:
        if not self.is_attached or key != self.lengths_key:
            return
        self.lengths = lengths or None
        self.lengths_error = error if not lengths else None
        self.recompute()

    # -- the check on every change --------------------------------------------------------------

    def hyperparameters_edited(self, key: str) -> None:
        """A field changed (called within the key press: see HyperparameterForm)."""
        if not self.measure_state.running:
            self.measure_state = MeasureState()  # a measurement belongs to the old settings
        self.recompute()

    def recompute(self) -> None:
        """Check every field and judge the memory; called on every change (kept fast).

        The checks are `runs new`'s (core/library/run_checks.py), with the model's facts and the
        dataset's report this screen has: each problem names its field."""
        hp = self.form.hyperparameters(self.base_hp)
        self.hp = hp
        info = self.model_by_path.get(self.model_path or "")
        model = self.facts.traits(positions=info.context_length if info else None
                                  ) if self.facts is not None else None
        data = DataTraits.from_report(self.report) if self.report is not None else None
        errors: dict[str, str] = {}
        warnings: dict[str, str] = {}
        for problem in check_run(self.method, hp, model=model, data=data):
            (errors if problem.is_error else warnings).setdefault(problem.key, problem.sentence)
        plan = None
        # The memory verdict waits for the marked fields and the method; a dataset that cannot
        # be trained is said at the dataset and when the run is made.
        hp_ok = not any(key != "dataset" for key in errors)
        if hp_ok and self.facts is not None and self.advisor is not None:
            longest = max(self.lengths) if self.lengths else None
            config = TrainingConfig.from_hyperparameters(self.method, hp, longest)
            advisor = self._placed_advisor(hp)
            plan = self._judged_by_replica(advisor.plan(self.facts, config, self.lengths),
                                           advisor, hp)
        self.plan = plan
        self.host_verdicts = self._other_hosts(plan, hp)
        self.disk = None
        if plan is not None and self.disk_settings is not None:
            self.disk = assess_disk(self.facts, plan.estimate.config, hp,
                                    home=self.service.store.home, settings=self.disk_settings,
                                    free=self.disk_free)
        self.field_errors = errors
        self.field_warnings = warnings
        self.form.show_problems({k: v for k, v in errors.items() if k in FIELD_KEYS},
                                {k: v for k, v in warnings.items() if k in FIELD_KEYS})
        self._show_method_problem(errors.get("method"))
        if plan is not None:
            self._estimate_duration(hp)
        # No refresh_bindings here: the suggestion keys are not in the footer, and
        # check_action is asked again at each key press.
        self._show_memory(hp_ok)

    # A replica is measured once the form has stood still this long (seconds): typing a
    # number would otherwise start one per keystroke.
    REPLICA_DELAY = 1.0

    def _judged_by_replica(self, plan: Plan, advisor: MemoryAdvisor, hp) -> Plan:
        """The plan judged by its config's replica when measured; else by the terms, and the
        replica's measurement starts once the form settles."""
        if (plan.estimate.problems or self.facts is None or self.model_path is None
                or not self.sources.measures_replicas):
            return plan
        config = advisor.training_config(self.facts, plan.estimate.config)
        key = (self.model_path, repr(config))
        found = self.replicas.get(key)
        if isinstance(found, Estimate):
            assessment = advisor.judge(found)
            suggestions = [] if assessment.verdict is Verdict.FITS else plan.suggestions
            return Plan(assessment, suggestions, plan.token_lengths_known)
        if found is not None:
            plan.estimate.notes.append(found)
            return plan
        plan.estimate.notes.insert(0, "a replica of this config is being measured: the "
                                      "terms' estimate until it is")
        if key != self.replica_key:
            self.replica_key = key
            if self._replica_timer is not None:
                self._replica_timer.stop()
            terms, extra = plan.estimate, dict(self.extra_config)
            self._replica_timer = self.set_timer(
                self.REPLICA_DELAY,
                lambda: self._measure_replica(key, advisor, terms, hp, extra))
        return plan

    def _measure_replica(self, key: tuple, advisor: MemoryAdvisor, terms: Estimate, hp,
                         extra: dict[str, Any]) -> None:
        if key != self.replica_key or not self.is_attached:
            return
        facts = self.facts

        def measure() -> None:
            # Leaving the screen, or a newer config's replica, cancels this worker, and that
            # stops the measuring subprocess.
            worker = get_current_worker()
            try:
                estimate, why_not = self.sources.replica(
                    advisor, facts, terms, hyperparameters=hp, extra_config=extra,
                    cancelled=lambda: worker.is_cancelled)
            except Exception as error:  # a replica's failure costs the replica, not the form
                estimate, why_not = None, f"no replica: {error}"
            if not worker.is_cancelled:
                self.app.call_from_thread(self._replica_measured, key, estimate or why_not)
        self.run_worker(measure, thread=True, group="replica", exclusive=True,
                        exit_on_error=False, name="measure a replica")

    def _replica_measured(self, key: tuple, result: Estimate | str) -> None:
        if not self.is_attached:
            return
        self.replicas[key] = result
        if key == self.replica_key:
            self.replica_key = None
        self.recompute()

    def _placed_advisor(self, hp) -> MemoryAdvisor:
        """The advisor for where the run trains: a distributed run's settings (from a preset,
        a config or a fork) are judged on one rank's share of the batch, and --ranks N puts N
        of them in this machine's memory (core/memory/host_verdicts.py). Worked out once per
        placement: a hostfile is read and this machine's names looked up."""
        assert self.advisor is not None
        own = hp.zyquo_tui or {}
        key = (own.get("ranks"), tuple(own.get("hosts") or ()), own.get("hostfile"))
        if key == (None, (), None):
            return self.advisor
        key = (*key, id(self.advisor))
        if getattr(self, "_placement", (None,))[0] != key:
            placement = placement_of(own)
            self._placement = (key, placed_advisor(self.advisor, placement), placement)
        return self._placement[1]

    def _other_hosts(self, plan: Plan | None, hp) -> list[HostVerdict]:
        """The verdicts of a distributed run's other hosts (this machine's is the panel's)."""
        own = hp.zyquo_tui or {}
        if plan is None or not (own.get("hosts") or own.get("hostfile")):
            return []
        _, advisor, placement = self._placement
        return [verdict for verdict in host_verdicts(plan.assessment, advisor, placement,
                                                     self.known_hosts) if not verdict.local]

    def _show_method_problem(self, sentence: str | None) -> None:
        self.query_one("#method-note", Static).set_class(bool(sentence), "-error")
        self._detail("method-note", f"✗ {sentence}" if sentence else self.method_note)

    def _show_memory(self, hp_ok: bool) -> None:
        panel = self.panel
        if self.advisor is None:
            if self.advisor_error:
                panel.show_message("no budget", f"This machine's memory budget could not be "
                                                f"read: {self.advisor_error}")
            return  # still reading: the message from on_mount stands
        if self.model_path is None:
            panel.show_message("pick a model", "The verdict appears when a model is chosen "
                                               "and follows every change you make.")
            return
        if self.facts is None:
            panel.show_message("cannot read the model", self.facts_error or "")
            return
        if not hp_ok or self.plan is None:
            sentence = next((sentence for key, sentence in self.field_errors.items()
                             if key != "dataset"), "")
            panel.show_message("fix the marked field", sentence)
            return
        plan = self.plan
        assert plan is not None
        applicable = [not s.config.quantize_base for s in plan.suggestions]
        panel.show_plan(plan, rows_line=self._rows_line(plan),
                        suggestion_keys=list(SUGGESTION_KEYS), applicable=applicable,
                        measure=self.measure_state, disk=self.disk,
                        duration=duration_line(self.duration, self.data_path is not None),
                        hosts=hosts_lines(self.host_verdicts))

    def _estimate_duration(self, hp: Hyperparameters) -> None:
        """Start the duration's estimate in a worker when what it depends on changed."""
        measured = self.measure_state.measurement
        speed = measured.tokens_per_second if measured and not self.measure_state.stale \
            else None
        data = self.data_path if self.data_trainable else None
        key = (self.model_path, self.method, data, id(self.lengths), speed,
               repr(hp.to_dict()))
        if key == self.duration_key or self.facts is None or self.model_path is None:
            return
        self.duration_key = key
        model, facts, method, lengths = self.model_path, self.facts, self.method, self.lengths
        hp = Hyperparameters.from_dict(hp.to_dict())  # the worker's own copy

        def estimate() -> None:
            try:
                found = self.sources.duration(model, facts, method, hp, data, lengths, speed)
            except Exception as error:  # a store that cannot be read costs the duration
                found = DurationEstimate(None, {"source": None,
                                                "sentence": f"unknown: {error}"})
            self.app.call_from_thread(self._duration_estimated, key, found)
        self.run_worker(estimate, thread=True, group="duration", exclusive=True,
                        exit_on_error=False, name="estimate the duration")

    def _duration_estimated(self, key: tuple, found: DurationEstimate) -> None:
        if not self.is_attached or key != self.duration_key:
            return
        self.duration = found
        self._show_memory(self.plan is not None)

    def _rows_line(self, plan: Plan) -> str:
        width = plan.estimate.batch_width
        if self.lengths:
            return f"Rows ≤ {max(self.lengths)} tokens: batches {width} wide."
        assumed = f"rows assumed {width} tokens (max_seq_length)"
        if self.data_path is None:
            return f"No dataset yet: {assumed}."
        if self.lengths_error:
            return f"Rows not counted ({self.lengths_error}): {assumed}."
        if self.lengths_key is not None:
            return f"Counting the rows' tokens…; until then {assumed}."
        return f"Rows not counted: {assumed}."

    # -- events from the controls ---------------------------------------------------------------

    @on(Select.Changed, "#model")
    def model_selected(self, event: Select.Changed) -> None:
        value = event.value
        self._model_chosen(None if value == Select.NULL else str(value))
        self.recompute()

    @on(Select.Changed, "#dataset")
    def dataset_selected(self, event: Select.Changed) -> None:
        value = event.value
        self._dataset_chosen(None if value == Select.NULL else str(value))
        self.recompute()

    @on(MethodPicker.Changed)
    def method_chosen(self, event: MethodPicker.Changed) -> None:
        self.set_method(event.method)
        self.recompute()

    @on(ChoicePicker.Changed, "#objective")
    def objective_chosen(self, event: ChoicePicker.Changed) -> None:
        self.set_objective(event.value)
        self.recompute()

    @on(Input.Changed, "#run-name")
    def name_changed(self, event: Input.Changed) -> None:
        self.name_touched = bool(event.value.strip()) and event.value != self._auto_name()

    @on(Input.Submitted)
    def next_field(self, event: Input.Submitted) -> None:
        event.stop()
        self.focus_next()

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        widget = event.widget
        spec = self.form.spec_of(widget)
        if spec is not None:
            self._set_focus_help(spec.key, self.form.help_of(spec.key))
        else:
            self._set_focus_help(widget.id or "")

    def _set_focus_help(self, key: str, text: str | None = None) -> None:
        help_line = self.query_one("#focus-help", Static)
        typing = isinstance(self.focused, Input)
        line = Text()
        line.append("esc: keys · " if typing else "tab: next · ", style="dim")
        body = text or CONTROL_HELP.get(key, "")
        if body:
            label = SETTINGS[key].label if key in FIELD_KEYS else key.replace("-", " ")
            line.append(f"{label}: ", style="bold")
            line.append(body)
        help_line.update(line)

    # -- keys -----------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "apply_suggestion":
            index = parameters[0] if parameters else 0
            return self.plan is not None and isinstance(index, int) and \
                index < len(self.plan.suggestions)
        return True

    def action_back(self) -> None:
        if isinstance(self.focused, Input):
            self.query_one("#setup-form").focus()
            self._set_focus_help("")
            return
        self.app.pop_screen()

    def action_apply_suggestion(self, index: int) -> None:
        plan = self.plan
        if plan is None or index >= len(plan.suggestions):
            return
        suggestion = plan.suggestions[index]
        changes = suggestion.changes
        if suggestion.config.quantize_base:
            bits = suggestion.config.quantize_base[0]
            self.notify(f"This one needs a {bits}-bit copy of the model first: `mlx_lm convert "
                        f"--hf-path {self.model_path} --mlx-path OUT -q --q-bits {bits}`, then "
                        "pick OUT as the model.", title="Memory", timeout=12)
            return
        values: dict[str, Any] = {}
        for key in ("batch_size", "grad_accumulation_steps", "max_seq_length", "num_layers",
                    "rank"):
            if key in changes:
                values[key] = str(changes[key])
        for key in ("grad_checkpoint", "optimizer"):
            if key in changes:
                values[key] = changes[key]
        if suggestion.iters_factor > 1 and self.hp is not None:
            # The same updates, saves and validations: every count of steps grows alike.
            for key in STEP_COUNTS:
                count = getattr(self.hp, key)
                if isinstance(count, int) and count > 0:
                    values[key] = str(count * suggestion.iters_factor)
        if "method" in changes:
            self.set_method(Method(changes["method"]))
        self.form.set_values(values, touched=values)
        self.notify(f"Applied: {suggestion.title}.", title="Memory", timeout=4)

    # -- building the run -----------------------------------------------------------------------

    def blocker(self, *, need_data: bool = True) -> tuple[str, str | None] | None:
        """Why the run cannot be made yet, and the control to focus (None when it can)."""
        if self.model_path is None:
            return "Pick a model first.", "model"
        if self.facts_error:
            return self.facts_error, "model"
        if need_data:
            if self.data_path is None:
                return "Pick a dataset first.", "dataset"
            if self.report is None:
                if self.report_error:
                    return f"The dataset cannot be checked: {self.report_error}", "dataset"
                return "The dataset is still being checked; try again in a moment.", "dataset"
            if not self.report.ok:
                first = next(p for p in self.report.problems if p.severity == "error") \
                    if any(p.severity == "error" for p in self.report.problems) else None
                where = f" The first: {problem_where(first)}: {first.message}." if first else ""
                count = self.report.errors
                return (f"The dataset has {count} error{'s' if count != 1 else ''}, which "
                        f"would stop the run; fix them first.{where}"), "dataset"
            if "dataset" in self.field_errors:  # rows mlx-lm does not train (preference)
                return self.field_errors["dataset"], "dataset"
        marked = [(key, sentence) for key, sentence in self.field_errors.items()
                  if need_data or key != "dataset"]
        if marked:
            key, sentence = marked[0]
            return sentence, key
        return None

    def _focus_control(self, key: str | None) -> None:
        if key in ("model", "dataset", "run-name"):
            self.query_one(f"#{key}").focus()
        elif key == "method":
            self.query_one(MethodPicker).focus()
        elif key == "objective":
            self.query_one("#objective", ChoicePicker).focus()
        elif key in FIELD_KEYS:
            async def reveal_and_focus() -> None:
                (await self.form.reveal(key)).control.focus()
            self.run_worker(reveal_and_focus(), group="focus", exclusive=True)

    def build_run(self) -> Run:
        name = self.query_one("#run-name", Input).value.strip() or None
        run = Run.new(model=self.model_path or "", data=self.data_path or "", method=self.method,
                      name=name, hyperparameters=Hyperparameters.from_dict(self.hp.to_dict()))
        run.extra_config = dict(self.extra_config)
        return run

    def action_start(self) -> None:
        self._launch("start")

    def action_queue(self) -> None:
        self._launch("queue")

    def action_draft(self) -> None:
        self._launch("draft")

    def _launch(self, how: str) -> None:
        if self.submitting:
            return
        blocked = self.blocker()
        if blocked is not None:
            sentence, control = blocked
            self.notify(sentence, title="Cannot create the run yet", severity="error",
                        timeout=8)
            self._focus_control(control)
            return
        run = self.build_run()
        plan = self.plan
        verb = "Start" if how == "start" else "Queue"
        disk_wont_fit = self.disk is not None and self.disk.verdict is Verdict.WONT_FIT
        if how != "draft" and plan is not None and plan.assessment.verdict is Verdict.WONT_FIT:

            def answered(confirmed: bool | None) -> None:
                if confirmed:
                    self._submit(run, how, override=True, override_disk=disk_wont_fit)
            if plan.suggestions:
                fix = (f"Key 1 in the form makes it fit: {plan.suggestions[0].title}.")
            else:
                fix = "No change of settings found that fits this machine."
            self.app.push_screen(ConfirmDialog(
                f"{run.name} won't fit in memory. {verb} it anyway?",
                f"It {plan.assessment.reason} Past the budget, macOS swaps, and training can "
                f"freeze the machine or crash the GPU driver. {fix}",
                confirm_label=f"{verb} anyway", keep_label="Back to the form"), answered)
            return
        if how != "draft" and disk_wont_fit:
            assert self.disk is not None

            def disk_answered(confirmed: bool | None) -> None:
                if confirmed:
                    self._submit(run, how, override=False, override_disk=True)
            self.app.push_screen(ConfirmDialog(
                f"{run.name} won't fit on disk. {verb} it anyway?",
                f"It {self.disk.reason} The trainer will stop with a last checkpoint when the "
                "disk reaches its floor; free space, then resume it. A larger save_every "
                "saves fewer checkpoints.",
                confirm_label=f"{verb} anyway", keep_label="Back to the form"), disk_answered)
            return
        self._submit(run, how, override=False)

    def _submit(self, run: Run, how: str, *, override: bool,
                override_disk: bool = False) -> None:
        service = self.service
        store = service.store
        supervisor = service.supervisor
        self.submitting = True

        def operation() -> Run:
            try:
                store.ensure()
                store.create(run)
                if how == "draft":
                    return run
                try:
                    if how == "start":
                        return supervisor.start(run.id, queue_if_busy=True,
                                                override_memory=override,
                                                override_disk=override_disk)
                    return supervisor.enqueue(run.id, override_memory=override,
                                              override_disk=override_disk)
                except UserError:
                    # Refused before anything started: the form still holds the settings,
                    # so leave no half-made run behind.
                    if store.get(run.id).state is RunState.CONFIGURED:
                        store.delete(run.id)
                    raise
            finally:
                self.app.call_from_thread(self._submitted)

        def done(made: Run) -> None:
            if how == "start":
                position = supervisor.queue.position(made.id)
                self.app.notify(f"{made.name} is {made.state.value}"
                                + (f" (queue position {position})" if position else "")
                                + (" with the memory override" if override else "") + ".",
                                title="Start")
                self.app.show_view("run", made.id)
                return
            if how == "queue":
                position = supervisor.queue.position(made.id)
                self.app.notify(f"{made.name} is {made.state.value}"
                                + (f" at queue position {position}" if position else "") + ".",
                                title="Queue")
            else:
                self.app.notify(f"{made.name} is saved as configured: start it with s on the "
                                "runs list.", title="Draft")
            if self.app.screen is self:
                self.app.pop_screen()
        service.act({"start": "Start", "queue": "Queue", "draft": "Save draft"}[how],
                    operation, done)

    def _submitted(self) -> None:
        self.submitting = False

    # -- measure --------------------------------------------------------------------------------

    def action_measure(self) -> None:
        if self.measure_state.running:
            self.notify("A measurement is already running.", timeout=4)
            return
        blocked = self.blocker(need_data=False)
        if blocked is not None:
            self.notify(blocked[0], title="Cannot measure yet", severity="error", timeout=8)
            self._focus_control(blocked[1])
            return
        plan = self.plan
        if plan is None:
            self.notify("The memory budget is still being read.", timeout=4)
            return
        if plan.assessment.verdict is Verdict.WONT_FIT:
            def answered(confirmed: bool | None) -> None:
                if confirmed:
                    self._measure(plan)
            self.app.push_screen(ConfirmDialog(
                "Measure a config that won't fit?",
                "Measuring trains a few real steps: past the budget the machine swaps and may "
                "freeze. Apply a suggestion first, or measure anyway.",
                confirm_label="Measure anyway", keep_label="Back to the form"), answered)
            return
        self._measure(plan)

    def _measure(self, plan: Plan) -> None:
        model, facts, config = self.model_path, self.facts, plan.estimate.config
        data = self.data_path if self.data_trainable else None
        hp, extra = self.hp, dict(self.extra_config)
        estimate = plan.estimate
        self.measure_state = MeasureState(running=True, estimate_bytes=estimate.total_bytes)
        self._show_memory(True)
        advisor = self.advisor

        def measure() -> None:
            # Leaving the screen cancels this worker, and that stops the measuring subprocess.
            worker = get_current_worker()
            try:
                measured = self.sources.measure(model, config, data=data, hyperparameters=hp,
                                                extra_config=extra,
                                                cancelled=lambda: worker.is_cancelled)
            except Exception as error:
                state = MeasureState(error=getattr(error, "message", str(error)))
            else:
                state = MeasureState(measurement=measured, estimate_bytes=estimate.total_bytes)
                try:
                    advisor.record_measurement(facts, estimate, measured)
                except OSError:
                    pass  # an unwritable history costs future corrections only
            if not worker.is_cancelled:
                self.app.call_from_thread(self._measured, state, config)
        self.run_worker(measure, thread=True, group="measure", exit_on_error=False,
                        name="measure the peak")

    def _measured(self, state: MeasureState, config: TrainingConfig) -> None:
        if not self.is_attached:
            return
        state.stale = self.plan is None or self.plan.estimate.config != config
        self.measure_state = state
        if state.error:
            self.notify(state.error, title="Measure", severity="error", timeout=10)
        self.recompute()

    # -- import, export, presets ----------------------------------------------------------------

    def apply_settings(self, *, model: str | None, data: str | None, method: Method,
                       hp: Hyperparameters, name: str | None = None,
                       extra: dict[str, Any] | None = None) -> None:
        """Fill the whole form (a run to copy, a preset, an imported config)."""
        self.base_hp = Hyperparameters.from_dict(hp.to_dict())
        self.extra_config = dict(extra or {})
        self.form.load(hp, touched=FIELD_KEYS)
        # The dataset's report, when it arrives, keeps this objective if it trains it.
        self.set_objective(SETTINGS["objective"].get(hp))
        if model:
            self.choose_model(model)
        if data:
            self.choose_dataset(data)
        picker = self.query_one(MethodPicker)
        if method in picker.allowed or self.model_path is None:
            self.set_method(method)
        else:
            self.notify(f"{method.value} does not suit this model: {self.method.value} is "
                        "chosen instead.", title="Method", severity="warning")
        if name:
            field = self.query_one("#run-name", Input)
            with self.prevent(Input.Changed):
                field.value = name
            self.name_touched = True
        else:
            self._update_name()
        self.recompute()

    def apply_preset(self, preset: Preset) -> None:
        self.apply_settings(model=preset.model or self.model_path,
                            data=preset.data or self.data_path, method=preset.method,
                            hp=preset.hyperparameters, extra=preset.extra_config)

    def action_export_yaml(self) -> None:
        blocked = self.blocker(need_data=False)
        if blocked is not None and blocked[1] not in ("dataset",):
            self.notify(blocked[0], title="Cannot export yet", severity="error", timeout=8)
            self._focus_control(blocked[1])
            return
        if self.data_path is None:
            self.notify("Pick a dataset first: the config names it.", title="Cannot export yet",
                        severity="error")
            return
        run = self.build_run()
        default = Path.cwd() / f"{slug(run.name)}.yaml"

        def chosen(path: str | None) -> None:
            if not path:
                return
            target = Path(path).expanduser()
            try:
                target.write_text(dump_mlx_yaml(run_to_mlx_config(run)), encoding="utf-8")
            except OSError as error:
                self.notify(f"{target}: cannot write ({error.strerror}).", title="Export",
                            severity="error")
                return
            self.notify(f"Wrote {target}: `mlx_lm lora -c {target}` trains this run.",
                        title="Export", timeout=8)
        self.app.push_screen(TextPromptDialog(
            "Export the mlx-lm config to", "mlx_lm lora -c FILE trains this run as it is.",
            str(default)), chosen)

    def action_import_yaml(self) -> None:
        def chosen(path: str | None) -> None:
            if not path:
                return
            source = Path(path).expanduser()
            try:
                config = load_mlx_yaml(source)
                placeholders = {key: "-" for key in ("model", "data") if not config.get(key)}
                run, unknown = run_from_mlx_config({**config, **placeholders},
                                                   source=str(source), base_dir=source.parent)
            except UserError as error:
                self.notify(error.message, title="Import", severity="error", timeout=10)
                return
            self.apply_settings(
                model=None if "model" in placeholders else run.model,
                data=None if "data" in placeholders else run.data, method=run.method,
                hp=run.hyperparameters, extra=run.extra_config)
            kept = f"; kept {len(unknown)} other keys as they are: {', '.join(unknown)}" \
                if unknown else ""
            self.notify(f"Filled the form from {source}{kept}.", title="Import", timeout=8)
        self.app.push_screen(TextPromptDialog(
            "Import an mlx-lm YAML config", "Its model, data, method and settings fill the form; "
            "keys this form has no field for are kept and exported again.",
            str(Path.cwd()) + "/", placeholder="path/to/config.yaml"), chosen)

    def action_save_preset(self) -> None:
        if any(key in FIELD_KEYS or key == "method" for key in self.field_errors):
            key, sentence = next((k, s) for k, s in self.field_errors.items()
                                 if k in FIELD_KEYS or k == "method")
            self.notify(sentence, title="Fix the field before saving", severity="error")
            self._focus_control(key)
            return
        home = self.app.store.home
        default = slug(self.query_one("#run-name", Input).value.strip() or self._auto_name())

        def chosen(name: str | None) -> None:
            if not name:
                return
            preset = Preset(name=name, method=self.method,
                            hyperparameters=Hyperparameters.from_dict(self.hp.to_dict()),
                            model=self.model_path, data=self.data_path,
                            extra_config=dict(self.extra_config))
            try:
                path = save_preset(preset, home)
            except UserError as error:
                self.notify(error.message, title="Preset", severity="error", timeout=8)
                return
            self.notify(f"Saved preset {name} ({path}).", title="Preset")
        self.app.push_screen(TextPromptDialog(
            "Save these settings as a preset named", "Method, hyperparameters, model and "
            "dataset; l loads it into a new form later.", default), chosen)

    def action_load_preset(self) -> None:
        home = self.app.store.home
        names = list_presets(home)
        if not names:
            self.notify("No presets yet: p saves the form as one.", title="Preset")
            return

        def chosen(name: str | None) -> None:
            if not name:
                return
            try:
                preset = load_preset(name, home)
            except UserError as error:
                self.notify(error.message, title="Preset", severity="error", timeout=8)
                return
            self.apply_preset(preset)
            self.notify(f"Loaded preset {name}.", title="Preset", timeout=4)
        self.app.push_screen(PresetPickerDialog(names, str(presets_dir(home))), chosen)
