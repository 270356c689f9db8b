"""HyperparameterForm: a run's hyperparameters as fields, with mlx-lm's names, defaults and help.

Fields come in three groups: basic (always shown), advanced and the learning-rate schedule
(each folded away until opened). Every field shows mlx-lm's default as its placeholder (an
empty field means the default) and one line of help; a value the run cannot train with is
marked under its field with the sentence `Hyperparameters.problems` gives.

The form only parses and shows. Whoever holds it decides what is wrong (it knows the model and
the dataset too) and calls `show_problems`; the form posts `Edited` on every change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Checkbox, Collapsible, Input, Select, Static

from zyquo_tui.core.runs.settings import LR_SCHEDULES, OPTIMIZERS, Hyperparameters, Method
from zyquo_tui.dashboard.widgets.static_update import OneLayoutPass, PanelText, update_static

BASIC = "basic"
ADVANCED = "advanced"
SCHEDULE = "schedule"

NO_SCHEDULE = "none"

# What each schedule's arguments are (mlx.optimizers.schedulers), for the help line and for
# a first guess when the user picks one.
SCHEDULE_ARGUMENTS = {
    "cosine_decay": "initial lr, decay steps, final lr",
    "linear_schedule": "initial lr, final lr, steps",
    "exponential_decay": "initial lr, decay rate per step",
    "step_decay": "initial lr, decay rate, step size",
}


@dataclass(frozen=True)
class FieldSpec:
    """One field: its key (an mlx-lm name, or lora_*/schedule_* for nested settings), label,
    kind (int, float, bool, choice, text), group and one line of help."""

    key: str
    label: str
    kind: str
    group: str
    help: str
    choices: tuple[str, ...] = ()
    lora_only: bool = False


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("iters", "Iterations", "int", BASIC, "training steps"),
    FieldSpec("batch_size", "Batch size", "int", BASIC,
              "rows per step; memory grows with it"),
    FieldSpec("learning_rate", "Learning rate", "float", BASIC,
              "the optimizer's step size (a schedule replaces it)"),
    FieldSpec("num_layers", "Layers", "int", BASIC,
              "blocks trained, counted from the last; -1 trains all"),
    FieldSpec("max_seq_length", "Max seq length", "int", BASIC,
              "tokens a row may have; longer rows are cut"),
    FieldSpec("rank", "LoRA rank", "int", BASIC,
              "adapter size: capacity and memory grow with it", lora_only=True),
    FieldSpec("grad_checkpoint", "Grad checkpoint", "bool", BASIC,
              "recompute activations: far less memory, slower steps"),
    FieldSpec("mask_prompt", "Mask prompt", "bool", BASIC,
              "train on the completions only, not the prompts"),
    FieldSpec("optimizer", "Optimizer", "choice", ADVANCED,
              "how updates are made from gradients", choices=OPTIMIZERS),
    FieldSpec("grad_accumulation_steps", "Grad accum steps", "int", ADVANCED,
              "batches summed per update: a bigger effective batch in the same memory"),
    FieldSpec("lora_scale", "LoRA scale", "float", ADVANCED,
              "multiplies the adapter's output", lora_only=True),
    FieldSpec("lora_dropout", "LoRA dropout", "float", ADVANCED,
              "dropout on the adapter's input, from 0 up to 1", lora_only=True),
    FieldSpec("steps_per_report", "Report every", "int", ADVANCED,
              "steps between training-loss reports"),
    FieldSpec("steps_per_eval", "Validate every", "int", ADVANCED,
              "steps between validation losses"),
    FieldSpec("val_batches", "Val batches", "int", ADVANCED,
              "batches per validation; -1 uses the whole set"),
    FieldSpec("save_every", "Save every", "int", ADVANCED, "steps between checkpoints"),
    FieldSpec("seed", "Seed", "int", ADVANCED, "same seed, same data order and init"),
    FieldSpec("schedule", "Schedule", "choice", SCHEDULE,
              "how the learning rate changes; none keeps it constant",
              choices=(NO_SCHEDULE, *LR_SCHEDULES)),
    FieldSpec("schedule_arguments", "Arguments", "text", SCHEDULE,
              "comma-separated; the first is the initial learning rate"),
    FieldSpec("warmup", "Warmup steps", "int", SCHEDULE,
              "steps rising linearly to the initial learning rate"),
    FieldSpec("warmup_init", "Warmup start", "float", SCHEDULE,
              "the learning rate the warmup starts from"),
)
FIELD_BY_KEY = {spec.key: spec for spec in FIELDS}


def default_values() -> dict[str, Any]:
    """mlx-lm's defaults as form values."""
    return form_values(Hyperparameters())


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def form_values(hp: Hyperparameters) -> dict[str, Any]:
    """The form's value of every field for these hyperparameters (text, bool or choice)."""
    lora = hp.lora_parameters or {}
    schedule = hp.lr_schedule if isinstance(hp.lr_schedule, dict) else None
    values: dict[str, Any] = {}
    for spec in FIELDS:
        if spec.key == "rank":
            value = lora.get("rank", 8)
        elif spec.key == "lora_scale":
            value = lora.get("scale", 20.0)
        elif spec.key == "lora_dropout":
            value = lora.get("dropout", 0.0)
        elif spec.key == "schedule":
            value = schedule.get("name", NO_SCHEDULE) if schedule else NO_SCHEDULE
        elif spec.key == "schedule_arguments":
            arguments = schedule.get("arguments") if schedule else None
            value = ", ".join(_text(a) for a in arguments) if isinstance(arguments, list) else ""
        elif spec.key == "warmup":
            value = schedule.get("warmup", 0) if schedule else 0
        elif spec.key == "warmup_init":
            value = schedule.get("warmup_init", 0.0) if schedule else 0.0
        else:
            value = getattr(hp, spec.key)
        values[spec.key] = value if spec.kind in ("bool", "choice") else _text(value)
    return values


_INT = re.compile(r"^[+-]?\d+$")


def _parse(kind: str, text: str, default: Any) -> Any:
    """A typed value; text that is not one is kept as text for problems() to name."""
    text = text.strip().replace("_", "")
    if not text:
        return default
    if kind == "int":
        return int(text) if _INT.match(text) else text
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if kind == "int" else value


def _number(text: str) -> int | float | None:
    text = text.strip()
    if _INT.match(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return None


def hyperparameters_from(values: dict[str, Any], base: Hyperparameters | None = None
                         ) -> tuple[Hyperparameters, dict[str, str]]:
    """Hyperparameters from form values, on top of `base` (keeps what the form has no field
    for, such as optimizer_config). Returns them with the form's own problems by field: the
    few that Hyperparameters cannot hold (schedule arguments that are not numbers)."""
    defaults = Hyperparameters()
    hp = Hyperparameters.from_dict((base or defaults).to_dict())
    local: dict[str, str] = {}
    for spec in FIELDS:
        if spec.group == SCHEDULE or spec.key in ("rank", "lora_scale", "lora_dropout"):
            continue
        value = values.get(spec.key)
        if spec.kind == "bool":
            setattr(hp, spec.key, bool(value))
        elif spec.kind == "choice":
            setattr(hp, spec.key, value)
        else:
            setattr(hp, spec.key, _parse(spec.kind, str(value or ""), getattr(defaults, spec.key)))
    lora = dict(hp.lora_parameters)
    lora["rank"] = _parse("int", str(values.get("rank", "")), 8)
    lora["scale"] = _parse("float", str(values.get("lora_scale", "")), 20.0)
    lora["dropout"] = _parse("float", str(values.get("lora_dropout", "")), 0.0)
    hp.lora_parameters = lora

    name = values.get("schedule") or NO_SCHEDULE
    if name == NO_SCHEDULE:
        hp.lr_schedule = None
    else:
        schedule: dict[str, Any] = {"name": name}
        text = str(values.get("schedule_arguments") or "")
        parts = [part for part in (p.strip() for p in text.split(",")) if part]
        numbers = [_number(part) for part in parts]
        bad = [part for part, number in zip(parts, numbers) if number is None]
        if bad:
            local["schedule_arguments"] = (f"lr_schedule.arguments must be numbers separated by "
                                           f"commas, not {bad[0]!r}.")
        schedule["arguments"] = [n for n in numbers if n is not None]
        warmup = _parse("int", str(values.get("warmup", "")), 0)
        if isinstance(warmup, str) or warmup < 0:
            local["warmup"] = f"warmup must be a whole number of 0 or more, not {warmup!r}."
        elif warmup:
            schedule["warmup"] = warmup
        warmup_init = _parse("float", str(values.get("warmup_init", "")), 0.0)
        if isinstance(warmup_init, str) or warmup_init < 0:
            local["warmup_init"] = (f"warmup_init must be a learning rate of 0 or more, not "
                                    f"{warmup_init!r}.")
        elif warmup_init and warmup:
            schedule["warmup_init"] = warmup_init
        hp.lr_schedule = schedule
    return hp, local


def schedule_guess(name: str, learning_rate: Any, iters: Any) -> str:
    """First arguments for a schedule the user just picked, from the form's lr and iters."""
    lr = learning_rate if isinstance(learning_rate, (int, float)) else 1e-5
    steps = iters if isinstance(iters, int) and iters > 0 else 1000
    guesses = {
        "cosine_decay": [lr, steps, 0.0],
        "linear_schedule": [lr, 0.0, steps],
        "exponential_decay": [lr, 0.999],
        "step_decay": [lr, 0.5, max(1, steps // 4)],
    }
    return ", ".join(_text(v) for v in guesses.get(name, [lr]))


_SENTENCE_FIELDS = {
    "rank": "rank",
    "lora_parameters.scale": "lora_scale",
    "lora_parameters.dropout": "lora_dropout",
    "lr_schedule": "schedule",
    "lr_schedule.arguments": "schedule_arguments",
    "warmup": "warmup",
    "warmup_init": "warmup_init",
}


def field_of(sentence: str) -> str | None:
    """The field a problem sentence is about (sentences start with the setting's name)."""
    head = sentence.split(" ", 1)[0].rstrip(":,")
    if head in _SENTENCE_FIELDS:
        key = _SENTENCE_FIELDS[head]
        if key == "schedule" and "arguments" in sentence:
            return "schedule_arguments"
        return key
    if head in FIELD_BY_KEY:
        return head
    if sentence.startswith(("full fine-tuning", "qlora needs")):
        return "method"
    return None


class FieldInput(Input):
    """A one-line Input of a fixed size, made for typing fast.

    - It never asks for a layout pass: Input resets its virtual size on every change of
      value, which asks Textual to lay out the whole screen again (on the new-run screen,
      most of what a key press cost). A field of fixed width and height cannot change the
      layout around it; a repaint is all it needs.
    - It tells the form of a new value at once (`on_value`), in the same key press, not by a
      message a few hops later: what the value changes (the verdict) is then drawn in the
      same frame as the character typed.
    """

    on_value: Any = None  # callable(input, value), set by the form (a class default: the
    # watcher may run while Input.__init__ sets the first value)

    def refresh(self, *regions, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> "FieldInput":
        super().refresh(*regions, repaint=repaint, layout=False, recompose=recompose)
        return self

    def watch_value(self, value: str) -> None:
        if self.on_value is not None:
            self.on_value(self, value)


class ProblemLine(PanelText):
    """The reason under a field that is wrong (hidden otherwise)."""


class FieldRow(OneLayoutPass, Widget):
    """A label, the control, its help, and (when wrong) the reason under them.

    The row draws its label and help itself, under its children: a Static for each would
    double the widgets of the form, and every widget costs time in each layout pass and
    each frame while the user types. Its children are the control (after the label's
    columns) and the reason, hidden until there is one.
    """

    COMPONENT_CLASSES = {"field-row--label", "field-row--help"}
    DEFAULT_CSS = """
    FieldRow { layout: vertical; height: auto; }
    FieldRow > .field-control { margin-left: 17; width: 18; }
    /* Fixed sizes: an Input with an auto dimension asks for a layout pass at every key. */
    FieldRow > Input.field-control { height: 1; }
    FieldRow > Input.field-control.-invalid-value { color: $text-error; text-style: bold; }
    FieldRow > .field-problem { display: none; color: $text-error; padding-left: 17;
                                height: auto; }
    FieldRow > .field-problem.-warning { color: $text-warning; }
    FieldRow.-shown-problem > .field-problem { display: block; }
    FieldRow > .field-row--label { color: $text; }
    FieldRow > .field-row--help { color: $text-muted; }
    """
    # The help shows right of the control only where this many columns are left for it;
    # on a narrow screen the form's owner shows the focused field's help elsewhere.
    MIN_HELP_COLUMNS = 24

    def __init__(self, spec: FieldSpec, control: Widget, help_text: str,
                 problem: tuple[str, bool] | None = None) -> None:
        super().__init__(id=f"row-{spec.key}", classes="field-row")
        self.spec = spec
        self.control = control
        self.help_text = help_text
        self._problem: tuple[str, bool] | None = None
        self._wanted = problem

    def compose(self) -> ComposeResult:
        yield self.control
        # Hidden until needed; mounting it then would cost a key press two more frames.
        yield ProblemLine("", classes="field-problem", markup=False,
                          id=f"problem-{self.spec.key}")

    def render(self) -> Text:
        """The label, and right of the control its help (cut to the width left)."""
        width = self.size.width
        label_width = self.control.styles.margin.left
        line = Text(self.spec.label[:label_width].ljust(label_width),
                    style=self.get_component_rich_style("field-row--label"), no_wrap=True)
        help_at = label_width + self.control.outer_size.width
        room = width - help_at - 1
        if room >= self.MIN_HELP_COLUMNS:
            help_text = self.help_text if len(self.help_text) <= room else \
                self.help_text[:room - 1] + "…"
            line.append(" " * (help_at + 1 - len(line)))
            line.append(help_text, style=self.get_component_rich_style("field-row--help"))
        return line

    def on_mount(self) -> None:
        if self._wanted:
            self.show_problem(*self._wanted)

    def set_help(self, text: str) -> None:
        self.help_text = text
        self.refresh()

    def show_problem(self, sentence: str | None, warning: bool = False) -> None:
        """Mark the field (or clear the mark): `sentence` is the reason, shown under it."""
        wanted = (sentence, warning) if sentence else None
        if not self.is_mounted:
            self._wanted = wanted
            return
        if wanted == self._problem:
            return
        self._problem = wanted
        problem = self.query_one(".field-problem", Static)
        if sentence:
            update_static(problem, ("⚠ " if warning else "✗ ") + sentence,
                          show=problem.display)
        problem.set_class(warning, "-warning")
        self.set_class(bool(sentence), "-shown-problem")
        self.control.set_class(bool(sentence) and not warning, "-invalid-value")


def _help_with_default(spec: FieldSpec, defaults: dict[str, Any]) -> str:
    default = defaults[spec.key]
    if spec.kind == "bool":
        shown = "on" if default else "off"
    elif spec.key == "schedule_arguments":
        return spec.help
    else:
        shown = str(default)
    return f"{spec.help} (mlx-lm: {shown})"


GROUP_TITLES = {ADVANCED: "Advanced: optimizer, accumulation, LoRA, reports, seed",
                SCHEDULE: "Learning-rate schedule"}


class HyperparameterForm(OneLayoutPass, Vertical):
    """Every hyperparameter of a run as a field (see the module docstring).

    The folded groups are filled when first opened: a screen with fewer widgets opens and
    lays out faster, and most runs never change those settings.
    """

    DEFAULT_CSS = """
    HyperparameterForm { height: auto; }
    HyperparameterForm > .form-heading { text-style: bold; color: $accent; margin-top: 1; }
    HyperparameterForm Collapsible { padding: 0; margin: 0; border: none;
                                     background: transparent; }
    HyperparameterForm Collapsible > Contents { padding: 0; }
    HyperparameterForm CollapsibleTitle { padding: 0; color: $accent; text-style: bold; }
    """

    class Edited(Message):
        """A field changed (`key`), by the user or the program."""

        def __init__(self, form: "HyperparameterForm", key: str) -> None:
            super().__init__()
            self.form = form
            self.key = key

        @property
        def control(self) -> "HyperparameterForm":
            return self.form

    def __init__(self, values: dict[str, Any] | None = None, *, id: str | None = None,
                 on_edit: Any = None) -> None:
        """`on_edit(key)`, when given, is called at once on every change instead of posting
        Edited (the new-run screen recomputes its verdict within the key press)."""
        super().__init__(id=id)
        self.on_edit = on_edit
        self._setting = False
        self.defaults = default_values()
        self.values: dict[str, Any] = dict(self.defaults)
        if values:
            self.values.update(values)
        self.touched: set[str] = set()  # fields the user edited
        self._rows: dict[str, FieldRow] = {}  # the rows mounted so far
        self._problems: dict[str, tuple[str, bool]] = {}
        self._filled: set[str] = {BASIC}
        self._hidden: set[str] = set()  # lora-only rows for full fine-tuning

    # -- building -------------------------------------------------------------------------------

    def _control(self, spec: FieldSpec) -> Widget:
        value = self.values[spec.key]
        control_id = f"hp-{spec.key}"
        if spec.kind == "bool":  # says on or off in words too: readable without colour
            return Checkbox("on" if value else "off", bool(value), compact=True, id=control_id,
                            classes="field-control", tooltip=spec.help)
        if spec.kind == "choice":
            return Select([(choice, choice) for choice in spec.choices], value=value,
                          allow_blank=False, compact=True, id=control_id,
                          classes="field-control", tooltip=spec.help)
        placeholder = str(self.defaults[spec.key]) if spec.key != "schedule_arguments" else ""
        field = FieldInput(str(value), placeholder=placeholder, compact=True, id=control_id,
                           classes="field-control", select_on_focus=False, tooltip=spec.help)
        field.on_value = self._typed
        return field

    def _row(self, spec: FieldSpec) -> FieldRow:
        row = FieldRow(spec, self._control(spec), _help_with_default(spec, self.defaults),
                       self._problems.get(spec.key))
        if spec.key in self._hidden:
            row.display = False
        self._rows[spec.key] = row
        return row

    def compose(self) -> ComposeResult:
        yield Static("Hyperparameters", classes="form-heading")
        for spec in FIELDS:
            if spec.group == BASIC:
                yield self._row(spec)
        for group, title in GROUP_TITLES.items():
            yield Collapsible(title=title, id=group, collapsed=True)

    @on(Collapsible.Expanded)
    async def _group_opened(self, event: Collapsible.Expanded) -> None:
        await self.fill(event.collapsible.id or "")

    async def fill(self, group: str) -> None:
        """Mount a folded group's rows (once)."""
        if group in self._filled or group not in GROUP_TITLES:
            return
        self._filled.add(group)
        rows = [self._row(spec) for spec in FIELDS if spec.group == group]
        await self.query_one(f"#{group}", Collapsible).query_one(Collapsible.Contents).mount(
            *rows)
        if group == SCHEDULE:
            self._update_schedule_rows()

    async def reveal(self, key: str) -> FieldRow:
        """The row of `key`, its group opened (and filled) first."""
        group = FIELD_BY_KEY[key].group
        if group != BASIC:
            self.query_one(f"#{group}", Collapsible).collapsed = False
            await self.fill(group)
        return self._rows[key]

    def open_group_of(self, key: str) -> None:
        group = FIELD_BY_KEY[key].group
        if group != BASIC:
            self.query_one(f"#{group}", Collapsible).collapsed = False

    # -- reading and writing --------------------------------------------------------------------

    def row(self, key: str) -> FieldRow:
        """The row of `key` (KeyError while its folded group was never opened)."""
        return self._rows[key]

    def spec_of(self, widget: Widget | None) -> FieldSpec | None:
        """The field a control belongs to (for the help line of the focused control)."""
        node = widget
        while node is not None and node is not self:
            if isinstance(node, FieldRow):
                return node.spec
            node = node.parent  # type: ignore[assignment]
        return None

    def help_of(self, key: str) -> str:
        row = self._rows.get(key)
        return row.help_text if row is not None else FIELD_BY_KEY[key].help

    def hyperparameters(self, base: Hyperparameters | None = None
                        ) -> tuple[Hyperparameters, dict[str, str]]:
        return hyperparameters_from(self.values, base)

    def load(self, hp: Hyperparameters, *, touched: Iterable[str] = ()) -> None:
        """Show these hyperparameters in every field (no Edited per field: one at the end)."""
        self.set_values(form_values(hp), touched=touched)

    def set_values(self, values: dict[str, Any], *, touched: Iterable[str] = ()) -> None:
        """Set some fields from the program (a suggestion, a preset); posts one Edited."""
        changed = [key for key, value in values.items() if self.values.get(key) != value]
        self.values.update(values)
        self.touched.update(touched)
        self._setting = True
        with self.prevent(Input.Changed, Checkbox.Changed, Select.Changed):
            for key in changed:
                row = self._rows.get(key)
                if row is None:
                    continue  # not mounted yet: built from self.values when it is
                control, value = row.control, values[key]
                if isinstance(control, Input):
                    control.value = str(value)
                elif isinstance(control, Checkbox):
                    control.value = bool(value)
                    control.label = "on" if value else "off"
                elif isinstance(control, Select):
                    control.value = value
        self._setting = False
        if "schedule" in changed:
            self._update_schedule_rows()
        if (self.values.get("schedule") != NO_SCHEDULE
                and {"schedule", "schedule_arguments", "warmup", "warmup_init"} & set(changed)):
            self.query_one(f"#{SCHEDULE}", Collapsible).collapsed = False
        self._edited(changed[0] if changed else "")

    def _edited(self, key: str) -> None:
        if self.on_edit is not None:
            self.on_edit(key)
        else:
            self.post_message(self.Edited(self, key))

    def set_method(self, method: Method | None) -> None:
        """LoRA's own fields are hidden for full fine-tuning."""
        full = method is Method.FULL
        for spec in FIELDS:
            if spec.lora_only:
                if full:
                    self._hidden.add(spec.key)
                else:
                    self._hidden.discard(spec.key)
                row = self._rows.get(spec.key)
                if row is not None:
                    row.display = not full

    def show_problems(self, errors: dict[str, str], warnings: dict[str, str]) -> None:
        """Mark each field with its error (or else its warning); clear the others."""
        problems = {key: (sentence, True) for key, sentence in warnings.items()}
        problems.update({key: (sentence, False) for key, sentence in errors.items()})
        self._problems = problems
        for key, row in self._rows.items():
            row.show_problem(*problems.get(key, (None, False)))
        # An error in a folded group opens it, so the mark is seen.
        for key in errors:
            if key in FIELD_BY_KEY and FIELD_BY_KEY[key].group != BASIC:
                self.open_group_of(key)

    # -- events ---------------------------------------------------------------------------------

    def _changed(self, control: Widget, value: Any) -> None:
        spec = self.spec_of(control)
        if spec is None or self.values.get(spec.key) == value:
            return  # not a change (controls announce their first value too)
        self.values[spec.key] = value
        self.touched.add(spec.key)
        if spec.key == "schedule":
            self._update_schedule_rows()
            if value != NO_SCHEDULE and not str(self.values.get("schedule_arguments")).strip():
                lr = _parse("float", str(self.values["learning_rate"]), 1e-5)
                iters = _parse("int", str(self.values["iters"]), 1000)
                self.set_values({"schedule_arguments": schedule_guess(value, lr, iters)})
                return
        self._edited(spec.key)

    def _typed(self, field: FieldInput, value: str) -> None:
        if not self._setting:
            self._changed(field, value)

    @on(Input.Changed)
    def _input_changed(self, event: Input.Changed) -> None:
        event.stop()  # FieldInput told the form already (_typed)

    @on(Checkbox.Changed)
    def _checkbox_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        event.checkbox.label = "on" if event.value else "off"
        self._changed(event.checkbox, event.value)

    @on(Select.Changed)
    def _select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._changed(event.select, event.value)

    def _update_schedule_rows(self) -> None:
        name = self.values.get("schedule") or NO_SCHEDULE
        for key in ("schedule_arguments", "warmup", "warmup_init"):
            row = self._rows.get(key)
            if row is not None:
                row.display = name != NO_SCHEDULE
        row = self._rows.get("schedule_arguments")
        if row is not None and name in SCHEDULE_ARGUMENTS:
            row.set_help(SCHEDULE_ARGUMENTS[name])
