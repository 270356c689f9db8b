"""SetupPanel: the new-run screen's side of its verdicts and of what blocks its run.

The memory panel shows the draft's verdicts (core/setup/verdicts.py) as the screen last
assessed them, judged by the config's replica once one is measured (a replica is asked for
once the form has stood still for REPLICA_DELAY); `blocker` says why the run cannot be made
yet and which control to focus. A base of NewRunScreen, kept apart so the screen's module holds
the form and its flow; it imports nothing of the screen.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from textual.widgets import Static

from zyquo_tui.core.memory.advisor import Plan
from zyquo_tui.core.memory.duration import DurationEstimate
from zyquo_tui.core.memory.estimate import Estimate, TrainingConfig
from zyquo_tui.dashboard.library_text import problem_where
from zyquo_tui.dashboard.setup_service import BudgetRead, PeakMeasured
from zyquo_tui.dashboard.widgets.choice_picker import ChoicePicker
from zyquo_tui.dashboard.widgets.hyperparameter_form import FIELD_KEYS
from zyquo_tui.dashboard.widgets.memory_panel import (
    MeasureState,
    duration_line,
    hosts_lines,
)
from zyquo_tui.dashboard.widgets.method_picker import MethodPicker

SUGGESTION_KEYS = ("1", "2", "3", "4", "5", "6")


class SetupPanel:
    """What the new-run screen shows beside its form (see the module docstring)."""

    # A replica is measured once the form has stood still this long (seconds): typing a
    # number would otherwise start one per keystroke.
    REPLICA_DELAY = 1.0

    @property
    def plan(self) -> Plan | None:
        return self.verdicts.plan

    def init_panel(self) -> None:
        self.advisor = None
        self.advisor_error: str | None = None
        self.disk_free: int | None = None
        self.disk_settings = None
        # A distributed run's other hosts: their free memory as `hosts check` found it.
        self.known_hosts: dict[str, dict[str, Any]] = {}
        # Replicas measured for this screen's configs (core/memory/replica.py): the estimate
        # each gives, or why none could be measured.
        self.replicas: dict[tuple, Estimate | str] = {}
        self.replica_key: tuple | None = None  # the config whose replica is on its way
        self._replica_timer: Any = None
        # The duration beside the verdict, estimated whenever what it depends on changes;
        # the last one stays shown.
        self.duration: DurationEstimate | None = None
        self.duration_key: tuple | None = None

    def on_budget_read(self, answer: BudgetRead) -> None:
        if not self.setup.is_current(answer):
            return
        self.advisor, self.advisor_error = answer.advisor, answer.error
        self.disk_free, self.disk_settings = answer.disk_free, answer.disk_settings
        self.known_hosts = answer.known_hosts
        self.recompute()

    def on_peak_measured(self, answer: PeakMeasured) -> None:
        state = MeasureState(error=answer.error) if answer.error else \
            MeasureState(measurement=answer.measurement,
                         estimate_bytes=self.measure_state.estimate_bytes)
        state.stale = self.plan is None or self.plan.estimate.config != answer.config
        self.measure_state = state
        if state.error:
            self.notify(state.error, title="Measure", severity="error", timeout=10)
        self.recompute()

    # -- replicas -------------------------------------------------------------------------------

    def _replica_key(self, config: TrainingConfig) -> tuple | None:
        if self.facts is None or self.model_path is None \
                or not self.sources.measures_replicas:
            return None
        return (self.model_path, repr(self._placed().training_config(self.facts, config)))

    def replica_for(self, config: TrainingConfig) -> Estimate | None:
        """The estimate of this config's replica, when it has been measured."""
        key = self._replica_key(config)
        found = self.replicas.get(key) if key is not None else None
        return found if isinstance(found, Estimate) else None

    def note_replica(self, plan: Plan) -> None:
        """The plan is the terms': say why (no replica, or one on its way) and ask for one
        once the form settles."""
        key = self._replica_key(plan.estimate.config)
        if key is None or plan.estimate.problems:
            return
        found = self.replicas.get(key)
        if found is not None:
            plan.estimate.notes.append(found)
            return
        # The replica starts from the terms as they are, not from this screen's note about it
        # (which its estimate would otherwise carry on after it is measured).
        terms = dataclasses.replace(plan.estimate, notes=list(plan.estimate.notes))
        plan.estimate.notes.insert(0, "this config's peak is being measured (on a replica, "
                                      "or whole when small): the terms' estimate until it is")
        if key != self.replica_key:
            self.replica_key = key
            if self._replica_timer is not None:
                self._replica_timer.stop()
            advisor, facts = self._placed(), self.facts
            hp, extra, revision = self.hp, dict(self.extra_config), self.revision
            self._replica_timer = self.set_timer(
                self.REPLICA_DELAY,
                lambda: key == self.replica_key and self.is_attached and
                self.setup.measure_replica(revision, key, advisor, facts, terms, hp, extra))

    def replica_measured(self, key: tuple, result: Estimate | str) -> None:
        if not self.is_attached:
            return
        self.replicas[key] = result
        if key == self.replica_key:
            self.replica_key = None
        self.recompute()

    # -- the panel ------------------------------------------------------------------------------

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
        plan = self.plan
        if not hp_ok or plan is None:
            sentence = next((sentence for key, sentence in self.field_errors.items()
                             if key != "dataset"), "")
            panel.show_message("fix the marked field", sentence)
            return
        applicable = [not s.config.quantize_base for s in plan.suggestions]
        panel.show_plan(plan, rows_line=self._rows_line(plan),
                        suggestion_keys=list(SUGGESTION_KEYS), applicable=applicable,
                        measure=self.measure_state, disk=self.verdicts.disk,
                        duration=duration_line(self.duration, self.data_path is not None),
                        hosts=hosts_lines(self.verdicts.hosts))

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

    # -- what blocks the run --------------------------------------------------------------------

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
                first = next((p for p in self.report.problems if p.severity == "error"), None)
                where = f" The first: {problem_where(first)}: {first.message}." if first else ""
                count = self.report.errors
                return (f"The dataset has {count} error{'s' if count != 1 else ''}, which "
                        f"would stop the run; fix them first.{where}"), "dataset"
            refusal = self.objective_refusal()
            if refusal:  # an objective asked for that these rows do not train
                return refusal, "objective"
            if "dataset" in self.field_errors:  # rows mlx-lm does not train (preference)
                return self.field_errors["dataset"], "dataset"
        marked = [(key, sentence) for key, sentence in self.field_errors.items()
                  if need_data or key != "dataset"]
        return (marked[0][1], marked[0][0]) if marked else None

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
            self.call_later(reveal_and_focus)  # after this key's handling: no worker needed
