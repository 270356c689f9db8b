"""SetupService: the setup form's slow work, off the screen, answering in typed messages.

The new-run screen holds one RunDraft (core/setup/draft.py) and renders it; everything that
takes more than a keystroke's time happens here, in worker threads the service owns: looking
for models and datasets, reading the memory budget, validating a dataset, counting its rows'
tokens, measuring a replica or a real peak, estimating the duration. Each answer is a message
posted to the screen that asked, carrying the revision of the draft it was asked for; a newer
question of the same kind makes the older answer stale (`is_current`), and the screen drops it.
A new question of a kind cancels the worker still answering the old one, and `close()`
(the screen leaving) cancels them all, which stops their subprocesses.

The facts come from the App's SetupSources (dashboard/setup_sources.py), so snapshots and
tests swap in fixed figures there, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.message import Message
from textual.worker import Worker, get_current_worker

from zyquo_tui.core.library.datasets import DatasetInfo, DatasetReport
from zyquo_tui.core.library.models import ModelInfo
from zyquo_tui.core.memory.advisor import MemoryAdvisor
from zyquo_tui.core.memory.duration import DurationEstimate
from zyquo_tui.core.memory.estimate import Estimate, TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.measure import Measurement
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.dashboard.setup_sources import SetupSources


class SetupAnswer(Message, bubble=False):
    """An answer of the SetupService: `kind` says which question, `revision` for which
    draft it was asked."""

    kind = ""

    def __init__(self, revision: int) -> None:
        super().__init__()
        self.revision = revision


class SourcesFound(SetupAnswer):
    """Models and datasets were looked for; `error` says why the look failed."""

    kind = "discover"

    def __init__(self, revision: int, models: list[ModelInfo], datasets: list[DatasetInfo],
                 error: str | None) -> None:
        super().__init__(revision)
        self.models, self.datasets, self.error = models, datasets, error


class BudgetRead(SetupAnswer):
    """The machine's memory budget (the advisor), the store's free disk and its floor, and
    other hosts' free memory; `error` when the budget could not be read."""

    kind = "budget"

    def __init__(self, revision: int, advisor: MemoryAdvisor | None, error: str | None,
                 disk_free: int | None = None, disk_settings: Settings | None = None,
                 known_hosts: dict[str, dict[str, Any]] | None = None) -> None:
        super().__init__(revision)
        self.advisor, self.error = advisor, error
        self.disk_free, self.disk_settings = disk_free, disk_settings
        self.known_hosts = known_hosts or {}


class DatasetValidated(SetupAnswer):
    """Every row of a dataset was checked (`report`), or could not be (`error`)."""

    kind = "validate"

    def __init__(self, revision: int, path: str, report: DatasetReport | None,
                 error: str | None) -> None:
        super().__init__(revision)
        self.path, self.report, self.error = path, report, error


class LengthsCounted(SetupAnswer):
    """Every train row's token count under the model's tokenizer, or why not."""

    kind = "lengths"

    def __init__(self, revision: int, key: tuple, lengths: list[int] | None,
                 error: str | None) -> None:
        super().__init__(revision)
        self.key, self.lengths, self.error = key, lengths, error


class ReplicaMeasured(SetupAnswer):
    """A config's replica was measured: the estimate it gives, or why there is none."""

    kind = "replica"

    def __init__(self, revision: int, key: tuple, result: Estimate | str) -> None:
        super().__init__(revision)
        self.key, self.result = key, result


class DurationEstimated(SetupAnswer):
    """How long the draft's run would take here."""

    kind = "duration"

    def __init__(self, revision: int, key: tuple, duration: DurationEstimate) -> None:
        super().__init__(revision)
        self.key, self.duration = key, duration


class PeakMeasured(SetupAnswer):
    """A few real training steps measured the peak (`measurement`), or failed (`error`)."""

    kind = "measure"

    def __init__(self, revision: int, config: TrainingConfig,
                 measurement: Measurement | None, error: str | None) -> None:
        super().__init__(revision)
        self.config, self.measurement, self.error = config, measurement, error


class SetupService:
    """The setup screen's workers (see the module docstring). `owner` is the screen the
    answers go to; the workers run on the App, so they are the service's, not the screen's."""

    def __init__(self, owner: Any, sources: SetupSources) -> None:
        self.owner = owner
        self.sources = sources
        self.asked: dict[str, int] = {}  # the revision each kind was last asked for
        self._workers: dict[str, Worker] = {}

    @property
    def workers(self) -> list[Worker]:
        return list(self._workers.values())

    def is_current(self, answer: SetupAnswer) -> bool:
        """The answer is to the latest question of its kind (else a newer one is on its way,
        or was answered)."""
        return self.asked.get(answer.kind) == answer.revision

    def close(self) -> None:
        """Cancel every worker still answering (the screen is leaving)."""
        for worker in self._workers.values():
            worker.cancel()
        self._workers.clear()

    def _ask(self, kind: str, revision: int, work: Callable[[Callable[[], bool]], SetupAnswer],
             name: str) -> None:
        """Answer in a worker thread; the previous worker of this kind is cancelled (that
        stops its subprocess), and a cancelled worker posts nothing."""
        self.asked[kind] = revision
        previous = self._workers.get(kind)
        if previous is not None and not previous.is_finished:
            previous.cancel()

        def answer() -> None:
            worker = get_current_worker()
            found = work(lambda: worker.is_cancelled)
            if not worker.is_cancelled:
                self.owner.post_message(found)
        self._workers[kind] = self.owner.app.run_worker(
            answer, thread=True, group=f"setup-{kind}-{id(self)}", exit_on_error=False,
            name=name)

    # -- the questions -------------------------------------------------------------------------

    def discover(self, revision: int, extra_datasets: list[str]) -> None:
        """Look for models and datasets again (a folder added since the last look appears)."""
        def work(_cancelled) -> SetupAnswer:
            try:
                return SourcesFound(revision, self.sources.models(),
                                    self.sources.datasets(extra_datasets), None)
            except Exception as error:  # discovery fails soft: empty lists and the reason
                return SourcesFound(revision, [], [],
                                    f"Looking for models and datasets failed: {error}")
        self._ask("discover", revision, work, "discover models and datasets")

    def read_budget(self, revision: int) -> None:
        def work(_cancelled) -> SetupAnswer:
            try:
                disk_free, disk_settings = self.sources.disk()
                known_hosts = self.sources.known_hosts()
                advisor = self.sources.advisor()
            except Exception as error:
                return BudgetRead(revision, None, str(error))
            return BudgetRead(revision, advisor, None, disk_free, disk_settings, known_hosts)
        self._ask("budget", revision, work, "read the memory budget")

    def validate(self, revision: int, path: str) -> None:
        def work(_cancelled) -> SetupAnswer:
            try:
                return DatasetValidated(revision, path, self.sources.validation(path), None)
            except Exception as problem:  # said at the dataset, never a traceback
                return DatasetValidated(revision, path, None,
                                        getattr(problem, "message", str(problem)))
        self._ask("validate", revision, work, f"validate {path}")

    def count_lengths(self, revision: int, model: str, data: str, extra: dict[str, Any],
                      mask_prompt: bool) -> None:
        key = (model, data)

        def work(cancelled) -> SetupAnswer:
            try:
                lengths = self.sources.token_lengths(model, data, extra, mask_prompt,
                                                     cancelled=cancelled)
                return LengthsCounted(revision, key, lengths, None)
            except Exception as problem:  # the verdict falls back to max_seq_length
                return LengthsCounted(revision, key, None,
                                      getattr(problem, "message", str(problem)))
        self._ask("lengths", revision, work, "count tokens")

    def measure_replica(self, revision: int, key: tuple, advisor: MemoryAdvisor,
                        facts: ModelFacts, terms: Estimate, hp: Hyperparameters,
                        extra: dict[str, Any]) -> None:
        def work(cancelled) -> SetupAnswer:
            try:
                estimate, why_not = self.sources.replica(
                    advisor, facts, terms, hyperparameters=hp, extra_config=extra,
                    cancelled=cancelled)
            except Exception as error:  # a replica's failure costs the replica, not the form
                estimate, why_not = None, f"no replica: {error}"
            return ReplicaMeasured(revision, key, estimate or why_not or "no replica")
        self._ask("replica", revision, work, "measure a replica")

    def estimate_duration(self, revision: int, key: tuple, model: str, facts: ModelFacts,
                          method: Method, hp: Hyperparameters, data: str | None,
                          lengths: list[int] | None, speed: float | None) -> None:
        hp = Hyperparameters.from_dict(hp.to_dict())  # the worker's own copy

        def work(_cancelled) -> SetupAnswer:
            try:
                found = self.sources.duration(model, facts, method, hp, data, lengths, speed)
            except Exception as error:  # a store that cannot be read costs the duration
                found = DurationEstimate(None, {"source": None, "sentence": f"unknown: {error}"})
            return DurationEstimated(revision, key, found)
        self._ask("duration", revision, work, "estimate the duration")

    def measure_peak(self, revision: int, model: str, config: TrainingConfig, *,
                     data: str | None, hp: Hyperparameters, extra: dict[str, Any],
                     advisor: MemoryAdvisor | None, facts: ModelFacts,
                     estimate: Estimate) -> None:
        def work(cancelled) -> SetupAnswer:
            try:
                measured = self.sources.measure(model, config, data=data, hyperparameters=hp,
                                                extra_config=extra, cancelled=cancelled)
            except Exception as error:
                return PeakMeasured(revision, config, None,
                                    getattr(error, "message", str(error)))
            if advisor is not None:
                try:
                    advisor.record_measurement(facts, estimate, measured)
                except OSError:
                    pass  # an unwritable history costs future corrections only
            return PeakMeasured(revision, config, measured, None)
        self._ask("measure", revision, work, "measure the peak")
