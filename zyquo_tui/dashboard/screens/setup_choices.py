"""SetupChoices: what the new-run screen's draft is made of, as the person chooses it.

The model and dataset lists (what discovery found, dashboard/source_lists.py), a model chosen
(its facts line, num_layers fitted to it), a dataset chosen (validated by the SetupService;
its summary and problems), the methods and objectives the draft offers, the name that follows
them, and the rows' token counts the verdict needs. A base of NewRunScreen, kept apart so the
screen's module holds the form and its flow; it imports nothing of the screen, and every change
goes into the screen's draft (`_change`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual.events import DescendantFocus
from textual.widgets import Input, Static

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.rows import PREFERENCE, PROMPTS
from zyquo_tui.core.library.run_checks import DataTraits
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.runs.settings import OBJECTIVES, SETTINGS, Method
from zyquo_tui.core.runs.value_checks import value_text
from zyquo_tui.core.setup.draft import Base, default_method
from zyquo_tui.dashboard.library_text import (
    dataset_problems,
    dataset_summary,
    model_facts_line,
)
from zyquo_tui.dashboard.setup_service import (
    DatasetValidated,
    LengthsCounted,
    SourcesFound,
)
from zyquo_tui.dashboard.widgets.choice_picker import ChoicePicker
from zyquo_tui.dashboard.widgets.hyperparameter_form import FIELD_KEYS
from zyquo_tui.dashboard.widgets.method_picker import MethodPicker

# What the help line says for the controls above the hyperparameters.
CONTROL_HELP = {
    "run-name": "The run's name in the runs list (left alone, it follows the model and method)",
    "model": "Models found in $ZYQUO_HOME/models, config.toml folders, the Hugging Face cache "
             "and LM Studio (M lists them all)",
    "dataset": "Folders with train.jsonl: $ZYQUO_HOME/datasets and the samples (D lists them)",
    "method": "← → choose: lora and dora adapt a full-precision base, qlora a quantized one; "
              "full trains every weight",
    "objective": "← → choose: sft learns the responses; dpo and orpo prefer chosen over "
                 "rejected; grpo learns from rewards of its own answers; distill learns a "
                 "teacher's distribution",
}
# The form's short note for data that does not train sft (the draft's reasons speak the CLI's
# flags, and are shown only for an objective asked for that the data refuses).
SFT_NOT_OFFERED = {
    PREFERENCE: "sft is not offered: preference rows train dpo or orpo.",
    PROMPTS: "sft is not offered: prompt rows with answers train grpo (rewards of the "
             "model's own answers).",
}


def in_form_words(sentence: str) -> str:
    """A draft's sentence for the form, where the picker, not a flag, chooses the objective."""
    return sentence.replace("--objective ", "the objective ")


class SetupChoices:
    """The choices of the new-run screen's draft (see the module docstring)."""

    @property
    def models(self):
        return self.lists.models

    @property
    def datasets(self):
        return self.lists.datasets

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

    def _extra_datasets(self) -> list[str]:
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

    # -- model, dataset, method, objective -----------------------------------------------------

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
        self._change(data_path=path, data=None)
        self.report, self.report_error = None, None
        self.lengths, self.lengths_key = None, None
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
        """Offer the objectives the dataset trains (the others struck through): dpo and orpo
        for preference rows, grpo for prompts with answers, sft and distill for the others.
        An objective asked for (picked, or from the run, preset or config the form was filled
        from) stays even where the data refuses it, and the draft's refusal shows under the
        picker; otherwise the data's first is taken. No line before the data is read."""
        known = self.draft.data is not None
        offered = [o for o, why in self.draft.offered_objectives().items() if why is None] \
            if known else list(OBJECTIVES)
        picker = self.query_one("#objective", ChoicePicker)
        picker.allowed = frozenset(offered)
        self.query_one("#objective-line").display = known
        wanted = self.objective_wanted
        if wanted is not None:
            objective = wanted
        elif known:
            objective = self.objective if self.objective in offered else offered[0]
        else:
            objective = "sft"
        self.set_objective(objective)

    def objective_refusal(self) -> str | None:
        """Why the dataset does not train the objective chosen (None: it does, or it is not
        read yet), in the draft's words."""
        if self.draft.data is None:
            return None
        why = self.draft.offered_objectives().get(self.objective)
        return in_form_words(why) if why else None

    def _show_objective_note(self) -> None:
        """Under the picker: the refusal of an objective the data does not train, else why
        sft is not offered for data that trains something else."""
        refusal = self.objective_refusal()
        note = self.query_one("#objective-note", Static)
        note.set_class(bool(refusal), "-error")
        data_format = self.draft.data.format if self.draft.data is not None else None
        self._detail("objective-note", f"✗ {refusal}" if refusal
                     else SFT_NOT_OFFERED.get(data_format or "", ""))

    def set_objective(self, objective: str, *, wanted: bool = False) -> None:
        """Choose the objective; `wanted`: a person asked for it (sft, every run's default,
        is never held against the data)."""
        if wanted:
            self.objective_wanted = None if objective == "sft" else objective
        self.query_one("#objective", ChoicePicker).choose(objective)
        self.form.set_objective(objective)
        self._show_objective_note()

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
