"""RunDraft: a person's choices on their way to becoming a run, the one road to a Run.

Every door that makes a run goes through a draft: `runs new`, `runs import-config`, `runs
grid`, `plan` (which judges a draft and makes no run), the step-level client's `from_model`,
the setup form (which only renders a draft) and `runs start` (which checks the run's draft
again). A draft holds the choices (model, dataset, method, objective, settings, the config's
other keys, a name) and what is known of the model and the dataset; it says which methods and
objectives it offers and why not the others, what is wrong with it, and becomes a Run.

The two rules every door used to restate live here and nowhere else:
- the method a base allows: LoRA on a quantized base is QLoRA (the same training; mlx-lm's
  `fine_tune_type` is lora for both), qlora needs a quantized base and full an unquantized
  one (`offered_methods`);
- the objective a dataset trains: preference rows dpo or orpo, other rows sft, taken from
  core/library/rows.py's `objectives_for`, with the first one as the default when none was
  chosen (`offered_objectives`).

And it makes epochs into iterations: a draft with epochs set trains epochs x the whole batches
of the dataset's train rows at its batch size (core/runs/epochs.py, in mlx-lm's batch order),
made again whenever the draft changes (its dataset, its batch size). Iterations and epochs are
one or the other: iterations chosen over a draft that had epochs unset them.

How a draft is judged (memory, disk, hosts, duration) is core/setup/verdicts.py.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.data_argument import resolve_data
from zyquo_tui.core.library.rows import objectives_for, training_refusal
from zyquo_tui.core.library.run_checks import (
    DataTraits,
    ModelTraits,
    config_name,
    fit_default_layers,
    fit_default_packing,
    problems_with_data,
    problems_with_model,
)
from zyquo_tui.core.runs.epochs import EpochPlan
from zyquo_tui.core.runs.problems import WARNING, Problem, errors_in, warnings_in
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import OBJECTIVES, SETTINGS, Hyperparameters, Method
from zyquo_tui.core.runs.value_checks import is_whole
from zyquo_tui.core.setup.distillation import distillation_problems, teacher_folder

if TYPE_CHECKING:
    from zyquo_tui.core.library.models import ModelInfo
    from zyquo_tui.core.memory.advisor import Suggestion

# The settings counted in steps (batches, as mlx-lm counts them), which a suggestion that
# splits the batch over accumulation steps multiplies, so the run makes the same updates.
STEP_COUNTS = ("iters", "save_every", "steps_per_eval", "steps_per_report")
# What a memory suggestion may change, beside the method and the step counts.
SUGGESTED_SETTINGS = ("batch_size", "grad_accumulation_steps", "max_seq_length", "num_layers",
                      "rank", "grad_checkpoint", "optimizer")
# mlx-lm's nested settings, taken whole (the client passes them as dicts).
NESTED_SETTINGS = ("lora_parameters", "lr_schedule", "optimizer_config")


@dataclass(frozen=True)
class Base:
    """What a draft knows of its base model: the checks' traits and its quantization."""

    path: str
    traits: ModelTraits
    bits: int | None = None  # the quantization's bits, when quantized

    @property
    def quantized(self) -> bool:
        return self.traits.quantized

    @property
    def name(self) -> str:
        return self.traits.name

    @classmethod
    def from_info(cls, info: "ModelInfo") -> "Base":
        bits = info.quantization.bits if info.quantization is not None else None
        return cls(str(Path(info.path).expanduser().resolve()), ModelTraits.from_info(info),
                   bits)


def absolute_reward_files(hp: Hyperparameters, base_dir: Path) -> None:
    """A grpo run's FILE.py:FUNCTION rewards with the file's path made absolute (from
    `base_dir`), so the trainer, which runs elsewhere, finds them; built-in names stay."""
    rewards = SETTINGS["reward_functions"].get(hp)
    if not isinstance(rewards, list):
        return
    resolved = []
    for name in rewards:
        path, colon, function = str(name).rpartition(":")
        if colon and path.endswith(".py"):
            name = f"{os.path.abspath(base_dir / Path(path).expanduser())}:{function}"
        resolved.append(name)
    if resolved != rewards:
        SETTINGS["reward_functions"].set(hp, resolved)


def default_method(quantized: bool) -> Method:
    """The method a base trains with when none is chosen: qlora on a quantized one, else lora."""
    return Method.QLORA if quantized else Method.LORA


def offered_methods_for(base: Base | None) -> dict[Method, str | None]:
    """Each method, with None when the base allows it, else why not (the QLoRA rule)."""
    if base is None:
        why = "qlora is for quantized models, full for unquantized ones: pick a model first."
        return {Method.LORA: None, Method.DORA: None, Method.QLORA: why, Method.FULL: None}
    if base.quantized:
        bits = f" ({base.bits}-bit)" if base.bits else ""
        return {
            # The same training as qlora: mlx-lm's fine_tune_type is lora for both.
            Method.LORA: f"lora on a quantized model is qlora: {base.name} is quantized{bits}.",
            Method.DORA: None,
            Method.QLORA: None,
            Method.FULL: f"full is refused: {base.name} is quantized{bits}; full fine-tuning "
                         "needs an unquantized model.",
        }
    return {Method.LORA: None, Method.DORA: None, Method.FULL: None,
            Method.QLORA: f"qlora is not offered: {base.name} is not quantized (mlx_lm convert "
                          "-q makes a copy that is)."}


def method_problem(method: Method, base: Base | None) -> Problem | None:
    """A method chosen that the base cannot train (LoRA on a quantized base is not one: it
    is QLoRA)."""
    if base is None:
        return None
    if method is Method.FULL and base.quantized:
        return Problem("method", f"full fine-tuning needs an unquantized model, and "
                                 f"{base.name} is quantized; use qlora (or lora) on it.")
    if method is Method.QLORA and not base.quantized:
        return Problem("method", f"qlora needs a quantized base model, and {base.name} is not "
                                 "quantized; use lora, or quantize it first (`mlx_lm convert "
                                 "-q`).")
    return None


def settled_method(chosen: Method | None, base: Base | None) -> Method:
    """The method a draft trains with: the base's default when none was chosen, QLoRA for
    LoRA on a quantized base; any other choice as chosen (a wrong one is a problem)."""
    if chosen is None:
        return default_method(bool(base and base.quantized))
    if chosen is Method.LORA and base is not None and base.quantized:
        return Method.QLORA
    return chosen


@dataclass
class RunDraft:
    """A run being set up (see the module docstring). Build one with `from_choices`,
    `from_mlx_config` or `from_run`; `to_run()` makes the Run or says why not."""

    model_path: str | None = None
    base: Base | None = None  # None: no model chosen, or its folder could not be read
    data_path: str | None = None
    data: DataTraits | None = None
    chosen_method: Method | None = None
    hyperparameters: Hyperparameters = field(default_factory=Hyperparameters)
    extra_config: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    lineage: dict[str, Any] | None = None
    # The settings somebody chose (a flag, a field, a config key): the others may be fitted
    # to the model (num_layers) and the data (objective).
    chosen: frozenset[str] = frozenset()
    # Where a setting that came from a config file is, for a problem's file:line.
    config_file: Path | None = None
    config_lines: dict[str, int] = field(default_factory=dict)
    # What the command line gave over the config file (setting keys, and "dataset"): a
    # problem with one of those is not the file's.
    command_line: frozenset[str] = frozenset()

    # -- making one --------------------------------------------------------------------------

    @classmethod
    def from_choices(cls, *, model: str | None = None, data: str | None = None,
                     method: Method | str | None = None,
                     settings: dict[str, Any] | None = None, name: str | None = None,
                     extra_config: dict[str, Any] | None = None,
                     model_info: "ModelInfo | None" = None,
                     data_traits: DataTraits | None = None,
                     hyperparameters: Hyperparameters | None = None,
                     chosen: frozenset[str] | set[str] = frozenset()) -> "RunDraft":
        """A draft from what a person chose: a model (a folder, or a name `zyquo-tui models`
        lists; UserError when there is none), a dataset (a folder, parquet files or a cached
        Hugging Face id: `resolve_data`), a method, settings by key
        (SETTINGS' keys, and mlx-lm's nested ones whole) over `hyperparameters`, and a name.

        `model_info` and `data_traits` pass what the caller already read (the form has both);
        `chosen` names settings chosen beyond `settings` (the form's touched fields). iters
        and epochs are one or the other: both in `settings` is a UserError, and iters alone
        unsets the epochs `hyperparameters` had."""
        from zyquo_tui.core.library.models import resolve_model

        settings = dict(settings or {})
        unknown = sorted(key for key in settings
                         if key not in SETTINGS and key not in NESTED_SETTINGS)
        if unknown:
            names = ", ".join([*SETTINGS, *NESTED_SETTINGS])
            raise UserError(f"{unknown[0]!r} is not a run setting; the settings are {names}.")
        if settings.get("epochs") is not None and "iters" in settings:
            raise UserError("iters and epochs were both given; give one of them (epochs makes "
                            "the iterations from the dataset's rows and the batch size).")
        if "iters" in settings:
            settings["epochs"] = None  # iterations chosen: they decide, not inherited epochs
        hp = Hyperparameters.from_dict((hyperparameters or Hyperparameters()).to_dict())
        for key in NESTED_SETTINGS:
            if key in settings:
                value = settings[key]
                setattr(hp, key, {**getattr(hp, key), **value} if key == "lora_parameters"
                        and isinstance(value, dict) else value)
        for key, setting in SETTINGS.items():  # the definition's order: optimizer first
            if key in settings:
                setting.set(hp, settings[key])
        absolute_reward_files(hp, Path.cwd())
        base = None
        model_path = None
        if model_info is not None:
            base = Base.from_info(model_info)
            model_path = base.path
        elif model:
            base = Base.from_info(resolve_model(str(model)))
            model_path = base.path
        if data:
            # Parquet and cached Hugging Face datasets become a folder in the store here, the
            # one place every door's dataset argument passes (core/library/data_argument.py).
            data = resolve_data(str(data))
        if data_traits is None and data:
            data_traits = DataTraits.read(data)
        draft = cls(model_path=model_path, base=base,
                    data_path=str(Path(data).expanduser().resolve()) if data else None,
                    data=data_traits, chosen_method=Method(method) if method else None,
                    hyperparameters=hp, extra_config=dict(extra_config or {}), name=name,
                    chosen=frozenset(chosen) | frozenset(settings))
        draft.fit_defaults()
        draft.resolve_epochs()
        draft.resolve_teacher()
        return draft

    @classmethod
    def from_mlx_config(cls, config: dict[str, Any], *, source: str,
                        base_dir: Path | None = None, config_file: Path | None = None,
                        model: str | None = None, data: str | None = None,
                        method: Method | str | None = None,
                        settings: dict[str, Any] | None = None,
                        name: str | None = None) -> "RunDraft":
        """A draft from an mlx-lm config (its paths relative to `base_dir`), with the command
        line's model, data, method and settings over it. Problems with a value that came from
        `config_file` are said at its file:line."""
        from zyquo_tui.core.runs.mlx_config import choices_from_mlx_config, yaml_key_lines

        lines = yaml_key_lines(config_file) if config_file is not None else {}
        # Paths given on the command line are the user's, from the working directory; those
        # in the config may be relative to its file (choices_from_mlx_config resolves them).
        given = {key: "-" for key, value in (("model", model), ("data", data)) if value}
        draft = cls(config_file=config_file, config_lines=lines)
        run, _unknown = choices_from_mlx_config({**config, **given}, source=source,
                                            base_dir=base_dir, locate=draft.locate)
        # A config's reward files are where its other paths are: beside it.
        absolute_reward_files(run.hyperparameters, base_dir or Path.cwd())
        defaults = Hyperparameters()
        from_config = frozenset(
            key for key in SETTINGS
            if config.get(config_name(key).split(".")[0]) is not None
            or SETTINGS[key].get(run.hyperparameters) != SETTINGS[key].get(defaults))
        made = cls.from_choices(
            model=model or run.model, data=data or run.data,
            method=method or (run.method if "fine_tune_type" in config
                              or "train_type" in config else None),
            settings=settings, name=name, extra_config=run.extra_config,
            hyperparameters=run.hyperparameters, chosen=from_config)
        made.lineage = run.lineage
        made.config_file, made.config_lines = config_file, lines
        made.command_line = frozenset(settings or {}) | ({"dataset"} if data else set())
        return made

    @classmethod
    def from_run(cls, run: Run) -> "RunDraft":
        """The draft a stored run was made from, read afresh (its model or its data may have
        changed since): `runs start` checks it again. A model folder that is gone leaves no
        base (the memory gate says so)."""
        from zyquo_tui.core.library.models import inspect_model

        folder = Path(run.model).expanduser()
        base = Base.from_info(inspect_model(folder)) if folder.is_dir() else None
        return cls(model_path=run.model, base=base, data_path=run.data,
                    data=DataTraits.read(run.data), chosen_method=run.method,
                    hyperparameters=Hyperparameters.from_dict(run.hyperparameters.to_dict()),
                    extra_config=dict(run.extra_config), name=run.name,
                    lineage=run.lineage, chosen=frozenset(SETTINGS))

    def fit_defaults(self) -> None:
        """Fit what nobody chose: num_layers to a smaller model's layers (mlx-lm's default of
        16 trains all of them, as mlx-lm itself would), the objective to the data's first."""
        if self.base is not None and "num_layers" not in self.chosen:
            fit_default_layers(self.hyperparameters, self.base.traits)
        if self.base is not None and "pack" not in self.chosen:
            fit_default_packing(self.hyperparameters, self.base.traits)
        if "objective" not in self.chosen:
            offered = [o for o, why in self.offered_objectives().items() if why is None]
            objective = SETTINGS["objective"]
            if offered and objective.get(self.hyperparameters) not in offered:
                objective.set(self.hyperparameters, offered[0])

    def replace(self, **changes: Any) -> "RunDraft":
        """A copy with some fields changed (its settings copied, never shared), its epochs
        made into iterations again (a new dataset or batch size makes others)."""
        hp = changes.pop("hyperparameters", self.hyperparameters)
        draft = dataclasses.replace(self, hyperparameters=Hyperparameters.from_dict(hp.to_dict()),
                                    extra_config=dict(changes.pop("extra_config",
                                                                  self.extra_config)),
                                    **changes)
        draft.resolve_epochs()
        draft.resolve_teacher()
        return draft

    def resolve_teacher(self) -> None:
        """A teacher named as a model (as --model takes one) becomes its folder."""
        teacher = SETTINGS["teacher"]
        named = teacher.get(self.hyperparameters)
        folder = teacher_folder(named)
        if folder != named:
            teacher.set(self.hyperparameters, folder)

    # -- epochs ------------------------------------------------------------------------------

    @property
    def epochs(self) -> Any:
        """The epochs set (None: iterations decide)."""
        return SETTINGS["epochs"].get(self.hyperparameters)

    def epoch_plan(self) -> EpochPlan | None:
        """The whole batches one epoch of the dataset makes at the batch size; None while the
        dataset's rows are unknown (or too few for a batch: a problem says so)."""
        rows = self.data.rows.get("train") if self.data is not None else None
        hp = self.hyperparameters
        # A grpo run trains each batch grpo_iterations iterations: an epoch takes that many
        # more.
        reuses = (SETTINGS["grpo_iterations"].get(hp)
                  if SETTINGS["objective"].get(hp) == "grpo" else 1)
        return EpochPlan.of(rows, hp.batch_size, reuses)

    def resolve_epochs(self) -> None:
        """With epochs set, iters becomes epochs x the batches of an epoch; left as it is
        while the dataset's rows are unknown."""
        epochs, plan = self.epochs, self.epoch_plan()
        if is_whole(epochs) and epochs >= 1 and plan is not None:
            self.hyperparameters.iters = plan.iters_for(epochs)

    def epoch_problems(self) -> list[Problem]:
        """Epochs with no dataset to count, and the rows no epoch trains."""
        epochs = self.epochs
        if not (is_whole(epochs) and epochs >= 1):
            return []  # unset, or wrong (the setting's own check says so)
        if self.data_path is None:
            return [Problem("epochs", "epochs counts passes over a dataset's rows: give a "
                                      "dataset to make them into iterations, or give iters "
                                      "instead.")]
        plan = self.epoch_plan()
        data = self.data
        if plan is None and data is not None and data.has_train \
                and data.rows.get("train") is None:
            return [Problem("epochs", f"{data.name}: the rows of train.jsonl could not be "
                                      "counted, so epochs cannot be made into iterations; "
                                      "give iters instead.")]
        if plan is not None and data is not None and plan.rows_left_out:
            return [Problem("epochs", plan.left_out_sentence(data.name), WARNING)]
        return []

    # -- what it offers ----------------------------------------------------------------------

    @property
    def method(self) -> Method:
        """The method it trains with (see `settled_method`)."""
        return settled_method(self.chosen_method, self.base)

    @property
    def objective(self) -> str:
        return str(SETTINGS["objective"].get(self.hyperparameters))

    def offered_methods(self) -> dict[Method, str | None]:
        """Each method, None when offered, else why not."""
        return offered_methods_for(self.base)

    def method_note(self) -> str:
        """The sentence about the methods not offered (the form shows it under the picker)."""
        offered = self.offered_methods()
        if self.base is None:
            return offered[Method.QLORA] or ""
        shown = Method.FULL if self.base.quantized else Method.QLORA
        return offered[shown] or ""

    def offered_objectives(self) -> dict[str, str | None]:
        """Each objective, None when the dataset trains it, else why not. With no dataset
        read, every objective is offered (the data decides when it comes)."""
        data_format = self.data.format if self.data is not None else None
        trains = objectives_for(data_format)
        if not trains:
            return {objective: None for objective in OBJECTIVES}
        return {objective: None if objective in trains else training_refusal(data_format,
                                                                             objective)
                for objective in OBJECTIVES}

    @property
    def default_name(self) -> str:
        model = self.model_path or "new run"
        return Run.default_name(model, self.method)

    # -- what is wrong -----------------------------------------------------------------------

    def problems(self) -> list[Problem]:
        """Every problem: the settings, the method against the base, the settings against
        the model and the dataset (each when known). Errors stop the run; warnings let it go."""
        method, hp = self.method, self.hyperparameters
        found = hp.problems(method)
        if self.base is not None:
            found += problems_with_model(method, hp, self.base.traits)
        wrong_method = method_problem(method, self.base)
        if wrong_method is not None:
            found.append(wrong_method)
        if self.data is not None:
            found += problems_with_data(hp, self.data)
        found += self.epoch_problems()
        found += distillation_problems(hp, self.base.path if self.base else None,
                                       self.base.name if self.base else None,
                                       self.data.format if self.data else None)
        return found

    def errors(self) -> list[Problem]:
        return errors_in(self.problems())

    def warnings(self) -> list[str]:
        return [problem.sentence for problem in warnings_in(self.problems())]

    def locate(self, key: str) -> str:
        """file:line of a config key, for a value that came from the config file; a nested
        key the file lacks (lr_schedule.name) at the line of the key it belongs under."""
        source = str(self.config_file) if self.config_file is not None else "the config"
        lines = self.config_lines
        while key not in lines and "." in key:
            key = key.rsplit(".", 1)[0]
        return f"{source}:{lines[key]}" if key in lines else source

    def where(self, problem: Problem) -> str:
        """'FILE:LINE: ' for a problem with a value the config file gave, else ''."""
        if self.config_file is None or problem.key in self.command_line:
            return ""
        return f"{self.locate(config_name(problem.key))}: "

    # -- becoming a run ----------------------------------------------------------------------

    def apply(self, suggestion: "Suggestion") -> "RunDraft":
        """The draft with a memory suggestion's changes (core/memory/advisor.py)."""
        settings = self.suggested_settings(suggestion)
        method = suggestion.changes.get("method")
        draft = self.replace(chosen_method=Method(method) if method else self.chosen_method,
                             chosen=self.chosen | frozenset(settings))
        for key, value in settings.items():
            SETTINGS[key].set(draft.hyperparameters, value)
        draft.resolve_epochs()
        return draft

    def suggested_settings(self, suggestion: "Suggestion") -> dict[str, Any]:
        """The settings a suggestion changes, by key. One that splits the batch over
        accumulation steps (`iters_factor`) multiplies every count of steps alike: the same
        updates, saves and validations."""
        values = {key: suggestion.changes[key] for key in SUGGESTED_SETTINGS
                  if key in suggestion.changes}
        if suggestion.iters_factor > 1:
            for key in STEP_COUNTS:
                if key == "iters" and self.epochs is not None:
                    continue  # made from the epochs and the new batch size
                count = SETTINGS[key].get(self.hyperparameters)
                if isinstance(count, int) and count > 0:
                    values[key] = count * suggestion.iters_factor
        return values

    def to_run(self, *, refused: str = "", need_data: bool = True, check: bool = True) -> Run:
        """The Run: its model and data as absolute folders, its settings copied. UserError
        (`refused` and the first error's sentence, at file:line when it came from a config
        file) when it cannot train; with `check` False, the run as it stands (the setup form
        exports a config whose dataset is still being fixed)."""
        if not check:
            return self._run()
        if self.model_path is None or self.base is None:
            raise UserError(f"{refused}pick a model first." if refused else
                            "Pick a model first.")
        if need_data and self.data_path is None:
            raise UserError(f"{refused}give a dataset folder (--data).")
        errors = self.errors()
        if errors:
            first = errors[0]
            raise UserError(f"{refused}{self.where(first)}{first.sentence}")
        return self._run()

    def _run(self) -> Run:
        run = Run.new(model=self.model_path or "", data=self.data_path or "", method=self.method,
                      name=self.name or self.default_name,
                      hyperparameters=Hyperparameters.from_dict(self.hyperparameters.to_dict()))
        run.extra_config = dict(self.extra_config)
        run.lineage = self.lineage
        return run
