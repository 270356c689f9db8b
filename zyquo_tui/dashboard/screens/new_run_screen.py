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
from textual.widgets import Footer, Input, Select, Static

from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import OBJECTIVES, SETTINGS, Hyperparameters, Method
from zyquo_tui.core.runs.value_checks import is_whole
from zyquo_tui.core.setup.draft import RunDraft
from zyquo_tui.core.setup.verdicts import (
    DraftVerdicts,
    advisor_for,
    assess,
    judged_by_replica,
)
from zyquo_tui.core.store.presets import Preset
from zyquo_tui.dashboard.messages import SampleChanged
from zyquo_tui.dashboard.screens.setup_choices import SetupChoices
from zyquo_tui.dashboard.screens.setup_panel import SUGGESTION_KEYS, SetupPanel
from zyquo_tui.dashboard.screens.zyquo_screen import ZyquoScreen
from zyquo_tui.dashboard.setup_files import SetupFiles
from zyquo_tui.dashboard.setup_launch import SetupLaunch
from zyquo_tui.dashboard.setup_service import (
    DurationEstimated,
    ReplicaMeasured,
    SetupService,
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


class NewRunScreen(SetupChoices, SetupPanel, ZyquoScreen):
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
        self.launcher = SetupLaunch(self)
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
        # An objective a person asked for (None: the data's first); it stays where the data
        # refuses it, with the refusal under the picker.
        self.objective_wanted: str | None = None
        self.ready = False  # models and datasets discovered
        self.shown_before = False
        self.init_panel()

    # -- the draft's parts, by the names the panel and the tests read --------------------------

    model_path = property(lambda self: self.draft.model_path)
    data_path = property(lambda self: self.draft.data_path)
    method = property(lambda self: self.draft.method)
    hp = property(lambda self: self.draft.hyperparameters)
    extra_config = property(lambda self: self.draft.extra_config)
    objective = property(lambda self: self.form.objective)

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
                # Shown once the dataset is read: it decides which objectives are offered.
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

    # -- the check on every change --------------------------------------------------------------

    def hyperparameters_edited(self, key: str) -> None:
        """A field changed (called within the key press: see HyperparameterForm)."""
        if not self.measure_state.running:
            self.measure_state = MeasureState()  # a measurement belongs to the old settings
        self.recompute()

    def _change(self, **changes: Any) -> None:
        """A new draft (a new revision): answers asked for the old one become stale."""
        self.draft = self.draft.replace(**changes)
        self.revision += 1

    def recompute(self) -> None:
        """The form's values into the draft, its problems at their fields and its verdicts in
        the panel; called on every change (kept fast: the slow parts are the service's)."""
        self._change(hyperparameters=self.form.hyperparameters(self.base_hp),
                     chosen=frozenset(self.form.touched) | {"objective"},
                     name=self.query_one("#run-name", Input).value.strip() or None)
        errors: dict[str, str] = {}
        warnings: dict[str, str] = {}
        problems = self.draft.problems()
        for problem in problems:
            (errors if problem.is_error else warnings).setdefault(problem.key, problem.sentence)
        self.field_errors, self.field_warnings = errors, warnings
        self.verdicts = assess(
            self.draft, self.facts, self.advisor, lengths=self.lengths,
            home=self.service.store.home if self.disk_settings is not None else None,
            disk_settings=self.disk_settings, disk_free=self.disk_free,
            known_hosts=self.known_hosts, problems=problems)
        plan = self.plan
        if plan is not None:  # judged by its replica once measured, by the terms until then
            replica = self.replica_for(plan.estimate.config)
            if replica is None:
                self.note_replica(plan)
            else:
                self.verdicts.plan = judged_by_replica(plan, self._placed(), replica)
        self.form.show_problems({k: v for k, v in errors.items() if k in FIELD_KEYS},
                                {k: v for k, v in warnings.items() if k in FIELD_KEYS})
        self._show_epochs()
        self._show_method_problem(errors.get("method"))
        if self.plan is not None:
            self._estimate_duration()
        # No refresh_bindings here: the suggestion keys are not in the footer, and
        # check_action is asked again at each key press.
        self._show_memory(not any(key != "dataset" for key in errors))

    def _show_epochs(self) -> None:
        """The iterations the draft made of the epochs in their field, or the epochs the
        iterations make in the Epochs field's help (once the dataset's rows are known)."""
        draft, plan = self.draft, self.draft.epoch_plan()
        iters = draft.hyperparameters.iters
        if plan is None or not isinstance(iters, int):
            self.form.show_epochs(None)
        elif is_whole(draft.epochs) and draft.epochs >= 1:
            # Short enough for the help column (the rows are in the dataset's line).
            self.form.show_epochs(iters, f"{draft.epochs} epochs × {plan.batches_per_epoch} "
                                         f"batches of {plan.batch_size}")
        else:
            self.form.show_epochs(None, None, f"{iters} iterations = "
                                              f"{plan.epochs_in(iters):.2f} epochs")

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
        self.set_objective(event.value, wanted=True)
        self.recompute()

    @on(Input.Changed, "#run-name")
    def name_changed(self, event: Input.Changed) -> None:
        self.name_touched = bool(event.value.strip()) and \
            event.value != self.draft.default_name

    @on(Input.Submitted)
    def next_field(self, event: Input.Submitted) -> None:
        event.stop()
        self.focus_next()

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
        return self.draft.to_run(check=False)

    def action_start(self) -> None:
        self.launcher.launch("start")

    def action_queue(self) -> None:
        self.launcher.launch("queue")

    def action_draft(self) -> None:
        self.launcher.launch("draft")

    def action_measure(self) -> None:
        self.launcher.measure()

    # -- import, export, presets ----------------------------------------------------------------

    def apply_settings(self, *, model: str | None, data: str | None, method: Method,
                       hp: Hyperparameters, name: str | None = None,
                       extra: dict[str, Any] | None = None) -> None:
        """Fill the whole form (a run to copy, a preset, an imported config)."""
        self.base_hp = Hyperparameters.from_dict(hp.to_dict())
        self._change(extra_config=dict(extra or {}))
        self.form.load(hp, touched=FIELD_KEYS)
        # Kept when the dataset's report arrives; refused there (said under the picker) if the
        # data does not train it.
        self.set_objective(SETTINGS["objective"].get(hp), wanted=True)
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
