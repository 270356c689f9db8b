"""HyperparameterForm: a run's hyperparameters as fields, made from the settings' definition.

Each field is one setting of core/runs/settings.py SETTINGS (those with `in_form`): its label,
help, kind, group and default come from there. Fields come in three groups: basic (always
shown), advanced and the learning-rate schedule (each folded away until opened); above the
basic ones, an objective's own (preference, reinforcement, distillation) for the objectives
that use them (`Setting.used_by`). Every field
shows mlx-lm's default as its placeholder (an empty field means the default) and one line of
help; a value the run cannot train with is marked under its field with its problem's sentence.

The form only parses and shows. Whoever holds it decides what is wrong (core/library/run_checks.py
`check_run`, with the model and the dataset) and calls `show_problems` with the problems by
field key; the form posts `Edited` on every change.

Iterations and epochs are one or the other: typing iterations clears the epochs. The holder's
draft makes epochs into iterations (it knows the dataset's rows), and `show_epochs` puts them
in the Iterations field and says in each field's help what one makes of the other.
"""

from __future__ import annotations

from typing import Any, Iterable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Checkbox, Collapsible, Input, Select, Static

from zyquo_tui.core.runs.settings import (
    ADVANCED,
    BASIC,
    BOOL,
    CHOICE,
    DISTILLATION,
    NUMBERS,
    PREFERENCE,
    REINFORCEMENT,
    SCHEDULE,
    SETTINGS,
    Hyperparameters,
    Method,
    Setting,
    default_of,
    form_settings,
)
from zyquo_tui.core.runs.value_checks import is_number, is_whole, value_text
from zyquo_tui.dashboard.widgets.static_update import (
    OneLayoutPass,
    PanelText,
    update_static,
)

NO_SCHEDULE = "none"  # the schedule field's choice for no lr_schedule: a constant rate

# The keys of the settings the form has a field for.
FIELD_KEYS = frozenset(setting.key for setting in form_settings())

# What each schedule's arguments are (mlx.optimizers.schedulers), for the help line and for
# a first guess when the user picks one.
SCHEDULE_ARGUMENTS = {
    "cosine_decay": "initial lr, decay steps, final lr",
    "linear_schedule": "initial lr, final lr, steps",
    "exponential_decay": "initial lr, decay rate per step",
    "step_decay": "initial lr, decay rate, step size",
}


def field_choices(setting: Setting) -> tuple[str, ...]:
    """The choices of a choice field (the schedule's begin with none)."""
    return (NO_SCHEDULE, *setting.choices) if setting.optional else setting.choices


def default_values() -> dict[str, Any]:
    """mlx-lm's defaults as form values."""
    return form_values(Hyperparameters())


def form_values(hp: Hyperparameters) -> dict[str, Any]:
    """The form's value of every field for these hyperparameters (text, bool or choice)."""
    values: dict[str, Any] = {}
    for setting in form_settings():
        value = setting.get(hp)
        if setting.kind == CHOICE:
            values[setting.key] = NO_SCHEDULE if value is None else value
        elif setting.kind == BOOL:
            values[setting.key] = value
        else:
            values[setting.key] = value_text(value)
    return values


def _field_text(values: dict[str, Any], key: str) -> str:
    value = values.get(key)
    return "" if value is None else str(value)


def hyperparameters_from(values: dict[str, Any], base: Hyperparameters | None = None,
                         objective: str | None = None) -> Hyperparameters:
    """Hyperparameters from form values, on top of `base` (keeps what the form has no field
    for, such as optimizer_config). A text that is no value of its field's kind is kept as it
    is, for the definition's check to name. With an `objective`, it is the run's, and the
    settings it does not use (beta for sft) are left at their defaults."""
    hp = Hyperparameters.from_dict((base or Hyperparameters()).to_dict())
    if objective is not None:
        SETTINGS["objective"].set(hp, objective)
    for setting in form_settings():
        if setting.group == SCHEDULE:
            continue
        if objective is not None and not setting.used_by(objective):
            setting.set(hp, setting.default_value())
            continue
        value = values.get(setting.key)
        if setting.kind == BOOL:
            value = bool(value)
        elif setting.kind != CHOICE:
            value = setting.parse(_field_text(values, setting.key))
        setting.set(hp, value)
    hp.lr_schedule = _schedule_from(values)
    return hp


def _schedule_from(values: dict[str, Any]) -> dict[str, Any] | None:
    name = values.get("schedule") or NO_SCHEDULE
    if name == NO_SCHEDULE:
        return None
    schedule: dict[str, Any] = {
        "name": name,
        "arguments": SETTINGS["schedule_arguments"].parse(
            _field_text(values, "schedule_arguments")),
    }
    warmup = SETTINGS["warmup"].parse(_field_text(values, "warmup"))
    warmup_init = SETTINGS["warmup_init"].parse(_field_text(values, "warmup_init"))
    if warmup != 0:
        schedule["warmup"] = warmup
    # mlx-lm reads warmup_init only with a warmup; a wrong value is kept for the check to name.
    if warmup_init != 0 and (warmup != 0 or SETTINGS["warmup_init"].problems(warmup_init)):
        schedule["warmup_init"] = warmup_init
    return schedule


def schedule_guess(name: str, learning_rate: Any, iters: Any) -> str:
    """First arguments for a schedule the user just picked, from the form's lr and iters."""
    lr = learning_rate if is_number(learning_rate) else default_of("learning_rate")
    steps = iters if is_whole(iters) and iters > 0 else default_of("iters")
    guesses = {
        "cosine_decay": [lr, steps, 0.0],
        "linear_schedule": [lr, 0.0, steps],
        "exponential_decay": [lr, 0.999],
        "step_decay": [lr, 0.5, max(1, steps // 4)],
    }
    return value_text(guesses.get(name, [lr]))


class FieldInput(Input):
    """A one-line Input of a fixed size, made for typing fast.

    - It never asks for a layout pass: Input resets its virtual size on every change of
      value, which asks Textual to lay out the whole screen again (on the new-run screen,
      most of what a key press cost). A field of fixed width and height cannot change the
      layout around it; a repaint is all it needs.
    - It tells the form of a new value at once (`on_value`), in the same key press, not by a
      message a few hops later: what the value changes (the verdict) is then drawn in the
      same frame as the character typed.
    - A value its field refuses is drawn in the error's colour by the field itself
      (`marked`), not by a CSS class: a change of class would match the stylesheet again.
    """

    COMPONENT_CLASSES = Input.COMPONENT_CLASSES | {"field-input--refused"}
    DEFAULT_CSS = """
    FieldInput > .field-input--refused { color: $text-error; text-style: bold; }
    """
    on_value: Any = None  # callable(input, value), set by the form (a class default: the
    # watcher may run while Input.__init__ sets the first value)
    marked = False  # the value is refused (see `mark`)

    def mark(self, refused: bool) -> None:
        """Draw the value in the error's colour (or not)."""
        if refused != self.marked:
            self.marked = refused
            self.refresh()

    @property
    def _value(self) -> Text:
        text = super()._value
        if self.marked:
            text.stylize(self.get_component_rich_style("field-input--refused"))
        return text

    def refresh(self, *regions, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> "FieldInput":
        super().refresh(*regions, repaint=repaint, layout=False, recompose=recompose)
        return self

    def watch_value(self, value: str) -> None:
        if self.on_value is not None:
            self.on_value(self, value)


class ProblemLine(PanelText):
    """The reason under a field that is wrong (hidden otherwise), in the colour of an error or
    a warning.

    The colour is the text's own style, not a CSS class: a change of class has Textual match
    the stylesheet again for the widget and everything in it (about a millisecond a widget),
    in the key press that marks or clears the field."""

    COMPONENT_CLASSES = {"problem-line--error", "problem-line--warning"}
    DEFAULT_CSS = """
    ProblemLine > .problem-line--error { color: $text-error; }
    ProblemLine > .problem-line--warning { color: $text-warning; }
    """
    warning = False

    def show(self, sentence: str | None, warning: bool = False) -> None:
        """Show `sentence` (None: hide the line)."""
        self.warning = warning
        update_static(self, (("⚠ " if warning else "✗ ") + sentence) if sentence else "",
                      show=bool(sentence))

    def render(self) -> Text:
        # Styled when drawn, so a change of theme recolours it.
        return Text(str(self.content), no_wrap=False, style=self.get_component_rich_style(
            "problem-line--warning" if self.warning else "problem-line--error"))


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
    FieldRow > .field-problem { display: none; padding-left: 17; height: auto; }
    FieldRow > .field-row--label { color: $text; }
    FieldRow > .field-row--help { color: $text-muted; }
    """
    # The help shows right of the control only where this many columns are left for it;
    # on a narrow screen the form's owner shows the focused field's help elsewhere.
    MIN_HELP_COLUMNS = 24

    def __init__(self, spec: Setting, control: Widget, help_text: str,
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
        # is_mounted is still False here (Textual sets it after Mount): apply, do not wait.
        if self._wanted:
            self._apply_problem(self._wanted)

    def set_help(self, text: str) -> None:
        self.help_text = text
        self.refresh()

    def show_problem(self, sentence: str | None, warning: bool = False) -> None:
        """Mark the field (or clear the mark): `sentence` is the reason, shown under it."""
        wanted = (sentence, warning) if sentence else None
        if not self.is_mounted:
            self._wanted = wanted
            return
        self._apply_problem(wanted)

    def _apply_problem(self, wanted: tuple[str, bool] | None) -> None:
        if wanted == self._problem:
            return
        self._problem = wanted
        sentence, warning = wanted if wanted else (None, False)
        self.query_one(ProblemLine).show(sentence, warning)
        if isinstance(self.control, FieldInput):  # a checkbox or a choice: its sentence alone
            self.control.mark(bool(sentence) and not warning)


def _help_with_default(spec: Setting, defaults: dict[str, Any]) -> str:
    default = defaults[spec.key]
    if spec.kind == BOOL:
        shown = "on" if default else "off"
    elif spec.kind == NUMBERS:
        return spec.help
    else:
        shown = str(default)
    if spec.own:  # zyquo-tui's own setting: mlx-lm has no default for it
        return f"{spec.help} (default {shown})" if shown else spec.help
    return f"{spec.help} (mlx-lm: {shown})"


# The groups of settings only some objectives use, in the form's order.
OBJECTIVE_GROUPS = (PREFERENCE, REINFORCEMENT, DISTILLATION)

GROUP_TITLES = {ADVANCED: "Advanced: optimizer, accumulation, LoRA, reports, seed",
                SCHEDULE: "Learning-rate schedule"}


class HyperparameterForm(OneLayoutPass, Vertical):
    """Every hyperparameter of a run as a field (see the module docstring).

    The folded groups are filled when first opened, and an objective's own rows when it is
    first chosen: a screen with fewer widgets opens and lays out faster, and most runs never
    change those settings.
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
        self._mounting: list[Any] = []  # an objective's rows being mounted (AwaitMount)
        self._problems: dict[str, tuple[str, bool]] = {}
        self._filled: set[str] = {BASIC}
        self._hidden: set[str] = set()  # lora-only rows for full fine-tuning, and so on
        self._hidden_for_method: set[str] = set()
        self._hidden_for_objective: set[str] = {
            spec.key for spec in form_settings() if not spec.used_by("sft")}
        self._hidden = self._hidden_for_method | self._hidden_for_objective
        self.objective: str | None = None  # None: whatever `base` holds (see hyperparameters)
        self._epoch_help: dict[str, str | None] = {"iters": None, "epochs": None}

    # -- building -------------------------------------------------------------------------------

    def _control(self, spec: Setting) -> Widget:
        value = self.values[spec.key]
        control_id = f"hp-{spec.key}"
        if spec.kind == BOOL:  # says on or off in words too: readable without colour
            return Checkbox("on" if value else "off", bool(value), compact=True, id=control_id,
                            classes="field-control", tooltip=spec.help)
        if spec.kind == CHOICE:
            return Select([(choice, choice) for choice in field_choices(spec)], value=value,
                          allow_blank=False, compact=True, id=control_id,
                          classes="field-control", tooltip=spec.help)
        placeholder = str(self.defaults[spec.key]) if spec.kind != NUMBERS else ""
        field = FieldInput(str(value), placeholder=placeholder, compact=True, id=control_id,
                           classes="field-control", select_on_focus=False, tooltip=spec.help)
        field.on_value = self._typed
        return field

    def _row(self, spec: Setting) -> FieldRow:
        row = FieldRow(spec, self._control(spec), _help_with_default(spec, self.defaults),
                       self._problems.get(spec.key))
        if spec.key in self._hidden:
            row.display = False
        self._rows[spec.key] = row
        return row

    def compose(self) -> ComposeResult:
        yield Static("Hyperparameters", classes="form-heading")
        # An objective's own settings go first, where they matter most, and are mounted when
        # an objective that uses them is chosen (set_objective): beta for dpo and orpo;
        # rewards, group size and the KL weight for grpo; the teacher for distill. Mounting
        # all of them with every form took a third of the time the setup screen takes to open.
        for spec in form_settings():
            if spec.group == BASIC:
                yield self._row(spec)
        for group, title in GROUP_TITLES.items():
            yield Collapsible(title=title, id=group, collapsed=True)

    def on_mount(self) -> None:
        if self.objective is not None:  # chosen before the form was mounted
            self._mount_objective_rows(self.objective)

    def _mount_objective_rows(self, objective: str) -> None:
        """Mount the rows of `objective`'s own settings not mounted yet, each in the form's
        order: before the first mounted row that follows it (the basic rows always are)."""
        order = [spec for group in OBJECTIVE_GROUPS + (BASIC,) for spec in form_settings()
                 if spec.group == group]
        for index, spec in enumerate(order):
            if spec.key in self._rows or not spec.used_by(objective):
                continue
            after = next(self._rows[later.key] for later in order[index + 1:]
                         if later.key in self._rows)
            row = self._row(spec)
            self._mounting.append(self.mount(row, before=after))

    @on(Collapsible.Expanded)
    async def _group_opened(self, event: Collapsible.Expanded) -> None:
        await self.fill(event.collapsible.id or "")

    async def fill(self, group: str) -> None:
        """Mount a folded group's rows (once)."""
        if group in self._filled or group not in GROUP_TITLES:
            return
        self._filled.add(group)
        rows = [self._row(spec) for spec in form_settings() if spec.group == group]
        await self.query_one(f"#{group}", Collapsible).query_one(Collapsible.Contents).mount(
            *rows)
        if group == SCHEDULE:
            self._update_schedule_rows()

    async def reveal(self, key: str) -> FieldRow:
        """The row of `key`, its group opened (and filled) first."""
        group = SETTINGS[key].group
        if group in GROUP_TITLES:
            self.query_one(f"#{group}", Collapsible).collapsed = False
            await self.fill(group)
        while self._mounting:  # an objective's rows, mounting since it was chosen
            await self._mounting.pop()
        return self._rows[key]

    def open_group_of(self, key: str) -> None:
        group = SETTINGS[key].group
        if group in GROUP_TITLES:
            self.query_one(f"#{group}", Collapsible).collapsed = False

    # -- reading and writing --------------------------------------------------------------------

    def row(self, key: str) -> FieldRow:
        """The row of `key` (KeyError while its folded group was never opened, or its
        objective never chosen)."""
        return self._rows[key]

    def shows(self, key: str) -> bool:
        """Whether the field of `key` is on the form now (mounted and not hidden)."""
        row = self._rows.get(key)
        return row is not None and bool(row.display)

    def spec_of(self, widget: Widget | None) -> Setting | None:
        """The field a control belongs to (for the help line of the focused control)."""
        node = widget
        while node is not None and node is not self:
            if isinstance(node, FieldRow):
                return node.spec
            node = node.parent  # type: ignore[assignment]
        return None

    def help_of(self, key: str) -> str:
        row = self._rows.get(key)
        return row.help_text if row is not None else SETTINGS[key].help

    def hyperparameters(self, base: Hyperparameters | None = None) -> Hyperparameters:
        return hyperparameters_from(self.values, base, self.objective)

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
        if "on_policy" in changed:
            self._show_rows()
        if (self.values.get("schedule") != NO_SCHEDULE
                and {"schedule", "schedule_arguments", "warmup", "warmup_init"} & set(changed)):
            self.query_one(f"#{SCHEDULE}", Collapsible).collapsed = False
        self._edited(changed[0] if changed else "")

    def show_epochs(self, iters: int | None, iters_help: str | None = None,
                    epochs_help: str | None = None) -> None:
        """Iterations made from the epochs (`iters`, None: the field is the user's) shown in
        the Iterations field, and the help lines of both fields (None: the definition's).
        Posts no Edited: the holder's draft already has them."""
        if iters is not None and self.values.get("iters") != str(iters):
            self.values["iters"] = str(iters)
            row = self._rows.get("iters")
            if row is not None and isinstance(row.control, Input):
                self._setting = True
                with self.prevent(Input.Changed):
                    row.control.value = str(iters)
                self._setting = False
        for key, text in (("iters", iters_help), ("epochs", epochs_help)):
            if self._epoch_help[key] == text:
                continue
            self._epoch_help[key] = text
            row = self._rows.get(key)
            if row is not None:
                row.set_help(text or _help_with_default(SETTINGS[key], self.defaults))

    def _edited(self, key: str) -> None:
        if self.on_edit is not None:
            self.on_edit(key)
        else:
            self.post_message(self.Edited(self, key))

    def set_method(self, method: Method | None) -> None:
        """LoRA's own fields are hidden for full fine-tuning."""
        self._hidden_for_method = {spec.key for spec in form_settings()
                                   if not spec.applies_to(method)}
        self._show_rows()

    def set_objective(self, objective: str) -> None:
        """The objective's own fields (beta, the DPO loss, the reference; grpo's rewards and
        sampling; distill's teacher) are shown for the objectives that use them; the run is
        built with this objective."""
        self.objective = objective
        self._hidden_for_objective = {spec.key for spec in form_settings()
                                      if not spec.used_by(objective)}
        if self.is_mounted:
            self._mount_objective_rows(objective)
        self._show_rows()

    def _hidden_for_choices(self) -> set[str]:
        """Rows another field makes moot: off-policy distillation samples no answers, so it
        has no answer length."""
        if self.objective == "distill" and not self.values.get("on_policy"):
            return {"max_completion_tokens"}
        return set()

    def _show_rows(self) -> None:
        self._hidden = (self._hidden_for_method | self._hidden_for_objective
                        | self._hidden_for_choices())
        for key, row in self._rows.items():
            if key in ("schedule_arguments", "warmup", "warmup_init"):
                continue  # the schedule decides those
            shown = key not in self._hidden
            if row.display != shown:
                row.display = shown

    def show_problems(self, errors: dict[str, str], warnings: dict[str, str]) -> None:
        """Mark each field with its error (or else its warning); clear the others."""
        problems = {key: (sentence, True) for key, sentence in warnings.items()}
        problems.update({key: (sentence, False) for key, sentence in errors.items()})
        self._problems = problems
        for key, row in self._rows.items():
            row.show_problem(*problems.get(key, (None, False)))
        # An error in a folded group opens it, so the mark is seen.
        for key in errors:
            if key in FIELD_KEYS and SETTINGS[key].group in GROUP_TITLES:
                self.open_group_of(key)

    # -- events ---------------------------------------------------------------------------------

    def _changed(self, control: Widget, value: Any) -> None:
        spec = self.spec_of(control)
        if spec is None or self.values.get(spec.key) == value:
            return  # not a change (controls announce their first value too)
        self.values[spec.key] = value
        self.touched.add(spec.key)
        if spec.key == "iters" and str(self.values.get("epochs") or "").strip():
            self._clear_quietly("epochs")  # iterations typed: they decide, not the epochs
        if spec.key == "on_policy":
            self._show_rows()
        if spec.key == "schedule":
            self._update_schedule_rows()
            if value != NO_SCHEDULE and not str(self.values.get("schedule_arguments")).strip():
                lr = SETTINGS["learning_rate"].parse(str(self.values["learning_rate"]))
                iters = SETTINGS["iters"].parse(str(self.values["iters"]))
                self.set_values({"schedule_arguments": schedule_guess(value, lr, iters)})
                return
        self._edited(spec.key)

    def _clear_quietly(self, key: str) -> None:
        """Empty a text field without an Edited of its own (the change that caused it posts
        one)."""
        self.values[key] = ""
        row = self._rows.get(key)
        if row is not None and isinstance(row.control, Input):
            self._setting = True
            with self.prevent(Input.Changed):
                row.control.value = ""
            self._setting = False

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
