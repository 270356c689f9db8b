"""NewRunScreen: set up a run, with its memory verdict beside the form as you type.

The screen holds one RunDraft (core/setup/draft.py) and renders it: a name, a model (size,
quantization, architecture), a dataset (format, validation summary, problems at file:line),
the methods and objectives the draft offers (and why not the others), and the
hyperparameters, each value the draft finds wrong marked at its field. The memory panel shows
the draft's verdicts (core/setup/verdicts.py) on every change; suggestions apply with one key
(1-6), `t` measures the real peak. The slow work (discovery, the budget, validation, token
counts, replicas, the duration, measurements) is the SetupService's (dashboard/setup_service.py):
its answers arrive as messages, and one asked for an older draft is dropped.

Then: start now (`s`), add to the queue (`a`), save as a draft (`d`, a configured run), export
the mlx-lm YAML (`e`), import one (`i`), save or load a preset (`p`, `l`). A run that won't fit
asks before it starts, and then starts with the override recorded.

Keys act when no text field has the focus: `esc` leaves a field (a second `esc` goes back),
enter moves to the next field, tab and shift+tab move between fields.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.events import DescendantFocus
from textual.widgets import Footer, Input, Select, Static

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.run_checks import DataTraits
from zyquo_tui.core.memory.advisor import Plan, Verdict
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import OBJECTIVES, SETTINGS, Hyperparameters, Method
from zyquo_tui.core.runs.value_checks import value_text
from zyquo_tui.core.setup.draft import Base, RunDraft, default_method
from zyquo_tui.core.setup.verdicts import (
    DraftVerdicts,
    advisor_for,
    assess,
    judged_by_replica,
)
from zyquo_tui.core.store.presets import Preset
from zyquo_tui.dashboard.dialogs.confirm import ConfirmDialog
from zyquo_tui.dashboard.library_text import dataset_problems, dataset_summary, model_facts_line
from zyquo_tui.dashboard.messages import SampleChanged
from zyquo_tui.dashboard.screens.setup_panel import SetupPanel
from zyquo_tui.dashboard.screens.zyquo_screen import ZyquoScreen
from zyquo_tui.dashboard.setup_files import SetupFiles
from zyquo_tui.dashboard.setup_service import (
    BudgetRead,
    DatasetValidated,
    DurationEstimated,
    LengthsCounted,
    PeakMeasured,
    ReplicaMeasured,
    SetupService,
    SourcesFound,
)
from zyquo_tui.dashboard.setup_sources import setup_sources
from zyquo_tui.dashboard.source_lists import SourceLists
from zyquo_tui.dashboard.widgets.choice_picker import ChoicePicker
from zyquo_tui.dashboard.widgets.hyperparameter_form import (
    FIELD_KEYS,
    FieldInput,
    HyperparameterForm,
)
from zyquo_tui.dashboard.widgets.labeled_line import LabeledLine
from zyquo_tui.dashboard.widgets.memory_panel import MeasureState, MemoryPanel
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
# The form's short note for a preference dataset (the draft's reason speaks the CLI's flags).
SFT_NOT_OFFERED = "sft is not offered: preference rows train dpo or orpo."


class NewRunScreen(SetupPanel, ZyquoScreen):
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
        self.like, self.start_model, self.start_data = like, model, data
        self.start_preset = preset
        self.draft = RunDraft()  # the one draft this screen renders
        self.revision = 0  # grows with every change of the draft
        self.base_hp = Hyperparameters()  # what the form's fields are read over
        self.lists = SourceLists(self)
        self.files = SetupFiles(self)
        self.setup: SetupService | None = None
        # What the service found out, for the draft as it stands.
        self.facts: ModelFacts | None = None
        self.facts_error: str | None = None
        self.report = None
        self.report_error: str | None = None
        self.lengths: list[int] | None = None
        self.lengths_key: tuple | None = None
        self.lengths_error: str | None = None
        self.verdicts = DraftVerdicts(None)
        self.field_errors: dict[str, str] = {}
        self.field_warnings: dict[str, str] = {}
        self.measure_state = MeasureState()
        self.name_touched = False
        self.submitting = False
        self.method_note = ""
        self.ready = False  # models and datasets discovered
        self.shown_before = False
        self.init_panel()

    # -- what the tests and the panel read -----------------------------------------------------

    @property
    def models(self):
        return self.lists.models

    @property
    def datasets(self):
        return self.lists.datasets

    @property
    def model_path(self) -> str | None:
        return self.draft.model_path

    @property
    def data_path(self) -> str | None:
        return self.draft.data_path

    @property
    def method(self) -> Method:
        return self.draft.method

    @property
    def objective(self) -> str:
        return self.form.objective

    @property
    def hp(self) -> Hyperparameters:
        return self.draft.hyperparameters

    @property
    def extra_config(self) -> dict[str, Any]:
        return self.draft.extra_config

    @property
    def plan(self) -> Plan | None:
        return self.verdicts.plan

    @property
    def sources(self):
        return setup_sources(self.app)

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
        self.setup = SetupService(self, self.sources)
        for detail in self.query(".setup-detail"):
            detail.display = False  # shown when they have something to say
        self.query_one("#objective-line").display = False
        self.form.set_objective("sft")
        self.panel.show_message("reading this machine",
                                "The memory budget comes from a short MLX probe the first "
                                "time (seconds); it is remembered afterwards.")
        self._set_focus_help("model")
        # The lists of the last look show at once, and the service looks again. The first
        # look of a session is made here: tens of milliseconds for 50 models (headers only),
        # far faster than a worker thread competing with the first layout for the GIL.
        known = self.sources.known_models
        if known is None:
            try:
                models, datasets = self.sources.models(), \
                    self.sources.datasets(self._extra_datasets())
            except Exception as error:  # discovery fails soft: empty lists and the reason
                models, datasets = [], []
                self.notify(f"Looking for models and datasets failed: {error}",
                            severity="error", title="New run")
        else:
            models, datasets = known, self.sources.datasets(self._extra_datasets())
            self._rediscover()
        self._fill_lists(models, datasets)
        self._apply_start()
        self.setup.read_budget(self.revision)

    def on_unmount(self) -> None:
        if self.setup is not None:
            self.setup.close()  # leaving cancels every worker, and their subprocesses

    # -- discovery ------------------------------------------------------------------------------

    def _extra_datasets(self) -> list[str]:
        from pathlib import Path

        extra = [self.start_data] if self.start_data else []
        if self.like is not None:
            extra.append(self.like.data)
        if self.start_preset is not None and self.start_preset.data:
            extra.append(self.start_preset.data)
        return [p for p in extra if p and Path(p).is_dir()]

    def _rediscover(self) -> None:
        if self.setup is not None:
            self.setup.discover(self.revision, self._extra_datasets())

    def on_sources_found(self, answer: SourcesFound) -> None:
        if answer.error is None and self.setup.is_current(answer):
            self._fill_lists(answer.models, answer.datasets)

    def _fill_lists(self, models, datasets) -> None:
        if not self.is_attached or not self.lists.fill(
                models, datasets, model_path=self.model_path, data_path=self.data_path,
                ready=self.ready):
            return
        listed = self.lists.models
        if not listed:
            hint = ("no model found that mlx-lm can train here. Build the sample model "
                    "(ctrl+p: Sample) or add a folder on the Models screen (M).")
            if self.lists.unready_models:
                hint += (f" {self.lists.unready_models} found need converting: see the "
                         "Models screen.")
            self._detail("model-facts", hint)
        elif self.model_path is None and not self.facts_error:
            self._detail("model-facts", "")  # a hint from an earlier, empty look
            if self.ready and len(listed) == 1:  # the first model appeared: take it
                self.choose_model(str(listed[0].path))
                self.recompute()

    def _apply_start(self) -> None:
        """Fill the form from what the screen was opened with (once, after the lists)."""
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
            elif len(self.models) == 1:
                self.choose_model(str(self.models[0].path))
            if self.start_data:
                self.choose_dataset(self.start_data)
        self.ready = True
        self.recompute()

    def on_budget_read(self, answer: BudgetRead) -> None:
        if not self.setup.is_current(answer):
            return
        self.advisor, self.advisor_error = answer.advisor, answer.error
        self.disk_free, self.disk_settings = answer.disk_free, answer.disk_settings
        self.known_hosts = answer.known_hosts
        self.recompute()

    # -- choosing model, dataset, method, objective ---------------------------------------------

    def _change(self, **changes: Any) -> None:
        """A new draft (a new revision): answers asked for the old one become stale."""
        self.draft = self.draft.replace(**changes)
        self.revision += 1

    def choose_model(self, path: str | None) -> None:
        """Select a model folder (adding it to the list when discovery did not find it)."""
        info = self.lists.select_model(path)
        self._model_chosen(str(info.path) if info is not None else None, requested=path)

    def _model_chosen(self, path: str | None, requested: str | None = None) -> None:
        info = self.lists.model_by_path.get(path or "")
        self.facts, self.facts_error = None, None
        self._change(model_path=path if info is not None else None,
                     base=Base.from_info(info) if info is not None else None)
        if info is None:
            if requested:
                self.facts_error = f"{requested}: no such model folder."
                self._detail("model-facts", self.facts_error)
            self._update_methods()
            return
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
        # (the draft's rule, which `runs new` follows too).
        fitted = self.draft.replace(hyperparameters=self.form.hyperparameters(self.base_hp),
                                    chosen=frozenset(self.form.touched) | {"objective"})
        fitted.fit_defaults()
        layers = fitted.hyperparameters.num_layers
        if "num_layers" not in self.form.touched and layers != self.form_layers():
            self.form.set_values({"num_layers": value_text(layers)})
        self._update_methods()
        self._update_name()
        self._start_lengths()

    def form_layers(self) -> Any:
        return self.form.hyperparameters(self.base_hp).num_layers

    def choose_dataset(self, path: str | None) -> None:
        if path and not self.lists.select_dataset(path):
            self._change(data_path=None, data=None)
            self.report = None
            self._detail("dataset-summary",
                         f"✗ {path}: no such dataset folder (a folder with train.jsonl).")
            return
        self.lists.select_dataset(path)
        self._dataset_chosen(path)

    def _dataset_chosen(self, path: str | None) -> None:
        from pathlib import Path

        self._change(data_path=str(Path(path).expanduser().resolve()) if path else None,
                     data=None)
        self.report, self.report_error = None, None
        self.lengths, self.lengths_key = None, None
        self._detail("dataset-problems", "")
        if path is None:
            self._detail("dataset-summary", "")
            self._update_objectives()
            return
        self._change(data_path=path)
        cached = self.sources.cached_validation(path)
        if cached is not None:
            self._validated(path, cached, None)
            return
        self._detail("dataset-summary", "checking every row…")
        self.setup.validate(self.revision, path)

    def on_dataset_validated(self, answer: DatasetValidated) -> None:
        if self.setup.is_current(answer):
            self._validated(answer.path, answer.report, answer.error)

    def _validated(self, path: str, report, error: str | None) -> None:
        if not self.is_attached or path != self.data_path:
            return
        self.report, self.report_error = report, error
        self._change(data=DataTraits.from_report(report) if report is not None else None)
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
        """Offer the methods the draft offers, say why not the others, and leave a method
        the base does not allow for its default."""
        offered = self.draft.offered_methods()
        picker = self.query_one(MethodPicker)
        picker.allowed = frozenset(m for m, why in offered.items() if why is None)
        self.method_note = self.draft.method_note()
        if self.draft.method not in picker.allowed:
            self.set_method(default_method(bool(self.draft.base and self.draft.base.quantized)))
        else:
            picker.choose(self.draft.method)
            self.form.set_method(self.draft.method)
        self._show_method_problem(self.field_errors.get("method"))

    def _update_objectives(self) -> None:
        """Offer the objectives the dataset trains: dpo (the default) and orpo for preference
        rows, with why sft is not; sft alone, and no objective line, for other rows."""
        offered = [o for o, why in self.draft.offered_objectives().items() if why is None] \
            if self.draft.data is not None else ["sft"]
        preference = "sft" not in offered
        picker = self.query_one("#objective", ChoicePicker)
        picker.allowed = frozenset(offered)
        self.query_one("#objective-line").display = preference
        self._detail("objective-note", SFT_NOT_OFFERED if preference else "")
        if self.objective not in offered:
            self.set_objective(offered[0])

    def set_objective(self, objective: str) -> None:
        self.query_one("#objective", ChoicePicker).choose(objective)
        self.form.set_objective(objective)

    def set_method(self, method: Method) -> None:
        self._change(chosen_method=method)
        self.query_one(MethodPicker).choose(self.draft.method)
        self.form.set_method(self.draft.method)
        self._update_name()

    def _update_name(self) -> None:
        if self.name_touched:
            return
        field = self.query_one("#run-name", Input)
        with self.prevent(Input.Changed):
            field.value = self.draft.default_name

    @property
    def data_trainable(self) -> bool:
        """The chosen dataset is checked, has no errors, and is of a format some objective
        trains."""
        report = self.report
        return report is not None and report.ok and \
            any(why is None for why in self.draft.offered_objectives().values())

    def _start_lengths(self) -> None:
        """Count the dataset's rows in tokens with the model's tokenizer: batches are as wide
        as their longest row, so this, not max_seq_length, decides the verdict."""
        if not (self.model_path and self.data_path and self.facts is not None
                and self.data_trainable):
            return
        key = (self.model_path, self.data_path)
        if key == self.lengths_key:
            return
        self.lengths_key, self.lengths, self.lengths_error = key, None, None
        self.setup.count_lengths(self.revision, *key, dict(self.extra_config),
                                 bool(self.form.values.get("mask_prompt")))

    def on_lengths_counted(self, answer: LengthsCounted) -> None:
        if not self.setup.is_current(answer) or answer.key != self.lengths_key:
            return
        self.lengths = answer.lengths or None
        self.lengths_error = answer.error if not answer.lengths else None
        self.recompute()

    # -- the check on every change --------------------------------------------------------------

    def hyperparameters_edited(self, key: str) -> None:
        """A field changed (called within the key press: see HyperparameterForm)."""
        if not self.measure_state.running:
            self.measure_state = MeasureState()  # a measurement belongs to the old settings
        self.recompute()

    def recompute(self) -> None:
        """The form's values into the draft, its problems at their fields and its verdicts in
        the panel; called on every change (kept fast: the slow parts are the service's)."""
        self._change(hyperparameters=self.form.hyperparameters(self.base_hp),
                     chosen=frozenset(self.form.touched) | {"objective"},
                     name=self.query_one("#run-name", Input).value.strip() or None)
        errors: dict[str, str] = {}
        warnings: dict[str, str] = {}
        for problem in self.draft.problems():
            (errors if problem.is_error else warnings).setdefault(problem.key, problem.sentence)
        self.field_errors, self.field_warnings = errors, warnings
        self.verdicts = assess(
            self.draft, self.facts, self.advisor, lengths=self.lengths,
            home=self.service.store.home if self.disk_settings is not None else None,
            disk_settings=self.disk_settings, disk_free=self.disk_free,
            known_hosts=self.known_hosts)
        plan = self.plan
        if plan is not None:  # judged by its replica once measured, by the terms until then
            replica = self.replica_for(plan.estimate.config)
            if replica is None:
                self.note_replica(plan)
            else:
                self.verdicts.plan = judged_by_replica(plan, self._placed(), replica)
        self.form.show_problems({k: v for k, v in errors.items() if k in FIELD_KEYS},
                                {k: v for k, v in warnings.items() if k in FIELD_KEYS})
        self._show_method_problem(errors.get("method"))
        if self.plan is not None:
            self._estimate_duration()
        # No refresh_bindings here: the suggestion keys are not in the footer, and
        # check_action is asked again at each key press.
        self._show_memory(not any(key != "dataset" for key in errors))

    def _placed(self):
        assert self.advisor is not None
        return advisor_for(self.draft, self.advisor)

    def on_replica_measured(self, answer: ReplicaMeasured) -> None:
        self.replica_measured(answer.key, answer.result)

    def _estimate_duration(self) -> None:
        """Ask for the duration's estimate when what it depends on changed."""
        measured = self.measure_state.measurement
        speed = measured.tokens_per_second if measured and not self.measure_state.stale \
            else None
        data = self.data_path if self.data_trainable else None
        key = (self.model_path, self.method, data, id(self.lengths), speed,
               repr(self.hp.to_dict()))
        if key == self.duration_key or self.facts is None or self.model_path is None:
            return
        self.duration_key = key
        self.setup.estimate_duration(self.revision, key, self.model_path, self.facts,
                                     self.method, self.hp, data, self.lengths, speed)

    def on_duration_estimated(self, answer: DurationEstimated) -> None:
        if answer.key != self.duration_key:
            return
        self.duration = answer.duration
        self._show_memory(self.plan is not None)

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
        self.name_touched = bool(event.value.strip()) and \
            event.value != self.draft.default_name

    @on(Input.Submitted)
    def next_field(self, event: Input.Submitted) -> None:
        event.stop()
        self.focus_next()

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        spec = self.form.spec_of(event.widget)
        if spec is not None:
            self._set_focus_help(spec.key, self.form.help_of(spec.key))
        else:
            self._set_focus_help(event.widget.id or "")

    def _set_focus_help(self, key: str, text: str | None = None) -> None:
        line = Text()
        line.append("esc: keys · " if isinstance(self.focused, Input) else "tab: next · ",
                    style="dim")
        body = text or CONTROL_HELP.get(key, "")
        if body:
            label = SETTINGS[key].label if key in FIELD_KEYS else key.replace("-", " ")
            line.append(f"{label}: ", style="bold")
            line.append(body)
        self.query_one("#focus-help", Static).update(line)

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
        if suggestion.config.quantize_base:
            bits = suggestion.config.quantize_base[0]
            self.notify(f"This one needs a {bits}-bit copy of the model first: `mlx_lm convert "
                        f"--hf-path {self.model_path} --mlx-path OUT -q --q-bits {bits}`, then "
                        "pick OUT as the model.", title="Memory", timeout=12)
            return
        values = {key: value if isinstance(value, (bool, str)) else str(value)
                  for key, value in self.draft.suggested_settings(suggestion).items()}
        if "method" in suggestion.changes:
            self.set_method(Method(suggestion.changes["method"]))
        self.form.set_values(values, touched=values)
        self.notify(f"Applied: {suggestion.title}.", title="Memory", timeout=4)

    # -- building the run -----------------------------------------------------------------------

    def build_run(self) -> Run:
        """The draft as a Run, as it stands (the blocker has said what stops it)."""
        draft = self.draft
        return Run.new(model=draft.model_path or "", data=draft.data_path or "",
                       method=draft.method, name=draft.name,
                       hyperparameters=draft.replace().hyperparameters) \
            if draft.errors() else draft.to_run(need_data=False)

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
            self.notify(blocked[0], title="Cannot create the run yet", severity="error",
                        timeout=8)
            self._focus_control(blocked[1])
            return
        run = self.build_run()
        plan, disk = self.plan, self.verdicts.disk
        verb = "Start" if how == "start" else "Queue"
        disk_wont_fit = disk is not None and disk.verdict is Verdict.WONT_FIT
        if how != "draft" and plan is not None and plan.assessment.verdict is Verdict.WONT_FIT:
            fix = (f"Key 1 in the form makes it fit: {plan.suggestions[0].title}."
                   if plan.suggestions else
                   "No change of settings found that fits this machine.")
            self.app.push_screen(ConfirmDialog(
                f"{run.name} won't fit in memory. {verb} it anyway?",
                f"It {plan.assessment.reason} Past the budget, macOS swaps, and training can "
                f"freeze the machine or crash the GPU driver. {fix}",
                confirm_label=f"{verb} anyway", keep_label="Back to the form"),
                lambda yes: yes and self._submit(run, how, override=True,
                                                 override_disk=disk_wont_fit))
            return
        if how != "draft" and disk_wont_fit:
            self.app.push_screen(ConfirmDialog(
                f"{run.name} won't fit on disk. {verb} it anyway?",
                f"It {disk.reason} The trainer will stop with a last checkpoint when the "
                "disk reaches its floor; free space, then resume it. A larger save_every "
                "saves fewer checkpoints.",
                confirm_label=f"{verb} anyway", keep_label="Back to the form"),
                lambda yes: yes and self._submit(run, how, override=False, override_disk=True))
            return
        self._submit(run, how, override=False)

    def _submit(self, run: Run, how: str, *, override: bool,
                override_disk: bool = False) -> None:
        service = self.service
        store, supervisor = service.store, service.supervisor
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
                self.app.call_from_thread(setattr, self, "submitting", False)

        def done(made: Run) -> None:
            position = supervisor.queue.position(made.id)
            if how == "start":
                self.app.notify(f"{made.name} is {made.state.value}"
                                + (f" (queue position {position})" if position else "")
                                + (" with the memory override" if override else "") + ".",
                                title="Start")
                self.app.show_view("run", made.id)
                return
            if how == "queue":
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
            self.app.push_screen(ConfirmDialog(
                "Measure a config that won't fit?",
                "Measuring trains a few real steps: past the budget the machine swaps and may "
                "freeze. Apply a suggestion first, or measure anyway.",
                confirm_label="Measure anyway", keep_label="Back to the form"),
                lambda yes: yes and self._measure(plan))
            return
        self._measure(plan)

    def _measure(self, plan: Plan) -> None:
        estimate = plan.estimate
        self.measure_state = MeasureState(running=True, estimate_bytes=estimate.total_bytes)
        self._show_memory(True)
        self.setup.measure_peak(
            self.revision, self.model_path, estimate.config,
            data=self.data_path if self.data_trainable else None, hp=self.hp,
            extra=dict(self.extra_config), advisor=self.advisor, facts=self.facts,
            estimate=estimate)

    def on_peak_measured(self, answer: PeakMeasured) -> None:
        state = MeasureState(error=answer.error) if answer.error else \
            MeasureState(measurement=answer.measurement,
                         estimate_bytes=self.measure_state.estimate_bytes)
        state.stale = self.plan is None or self.plan.estimate.config != answer.config
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
        self._change(extra_config=dict(extra or {}))
        self.form.load(hp, touched=FIELD_KEYS)
        # The dataset's report, when it arrives, keeps this objective if it trains it.
        self.set_objective(SETTINGS["objective"].get(hp))
        if model:
            self.choose_model(model)
        if data:
            self.choose_dataset(data)
        if method in self.query_one(MethodPicker).allowed or self.model_path is None:
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
        elif self.data_path is None:
            self.notify("Pick a dataset first: the config names it.", title="Cannot export yet",
                        severity="error")
        else:
            self.files.export_yaml()

    def action_import_yaml(self) -> None:
        self.files.import_yaml()

    def action_save_preset(self) -> None:
        marked = [(k, s) for k, s in self.field_errors.items() if k in FIELD_KEYS or k == "method"]
        if marked:
            self.notify(marked[0][1], title="Fix the field before saving", severity="error")
            self._focus_control(marked[0][0])
            return
        self.files.save_preset(self.query_one("#run-name", Input).value.strip()
                               or self.draft.default_name)

    def action_load_preset(self) -> None:
        self.files.load_preset()
