"""The advisor: verdicts against the budget, suggestions that would fit, and the gate
before a run starts (docs/memory.md)."""

from __future__ import annotations

import dataclasses
import enum
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE, UserError
from zyquo_tui.core.formatting import fmt_bytes
from zyquo_tui.core.memory.budget import CPU, MemoryBudget, capped, machine_budget
from zyquo_tui.core.memory.estimate import (
    COEFFICIENTS,
    CPU_COEFFICIENTS,
    TERMS,
    Coefficients,
    Estimate,
    TrainingConfig,
    combine,
    features,
    loss_slice_tokens,
    model_problems,
    resolved_slicing,
    trained_layers,
)
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.history import MemoryHistory
from zyquo_tui.core.memory.measure import (
    Measurement,
    ReplicaMeasurement,
    measure_replica,
)
from zyquo_tui.core.memory.replica import (
    REPLICA_ERROR,
    Replica,
    can_measure_whole,
    plan_replica,
    why_no_replica,
)
from zyquo_tui.core.memory.replica_cache import ReplicaCache
from zyquo_tui.core.runs.out_of_memory import memory_limit
from zyquo_tui.core.runs.problems import Problem
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method
from zyquo_tui.core.runs.value_checks import AUTO_TEXT, OFF_TEXT


def tight_fraction(coefficients: Coefficients) -> float:
    """The share of the budget above which a config is tight (docs/memory.md): within the
    estimate's held-out error of the limit, a model it was not fitted to could cross it."""
    return 1 - coefficients.held_out_error


# The calibrated CPU's (each device's terms carry their own).
TIGHT_FRACTION = tight_fraction(CPU_COEFFICIENTS)


class Verdict(str, enum.Enum):
    """Whether a config fits this machine's memory budget."""

    FITS = "fits"
    TIGHT = "tight"
    WONT_FIT = "won't fit"

    @classmethod
    def of(cls, need: float, limit: float, tight_fraction: float) -> Verdict:
        """won't fit above `limit`, tight above `tight_fraction` of it, else fits: the
        thresholds every verdict (memory, each host's, the disk's) is judged by."""
        if need > limit:
            return cls.WONT_FIT
        return cls.TIGHT if need > tight_fraction * limit else cls.FITS


@dataclass
class Assessment:
    """A verdict on an estimate against the budget, with its one-line reason."""

    verdict: Verdict
    reason: str
    estimate: Estimate
    budget: MemoryBudget
    ranks_here: int = 1  # a distributed run's ranks that share this machine's memory

    @property
    def need_bytes(self) -> int:
        """What this machine needs: the estimate, times the ranks training here."""
        return self.estimate.total_bytes * self.ranks_here

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "reason": self.reason,
                "estimate_bytes": self.estimate.total_bytes,
                "budget_bytes": self.budget.budget_bytes,
                "available_bytes": self.budget.available_bytes}


@dataclass
class Suggestion:
    """A changed config the model says fits, what changed, and its estimate."""

    title: str
    changes: dict[str, Any]
    config: TrainingConfig
    estimate: Estimate
    verdict: Verdict
    truncated_rows: int | None = None  # rows the new max_seq_length cuts, when known
    # How many times the run's step counts to take (iters, and the steps between saves,
    # validations and reports): mlx-lm counts a step per batch, so a batch split over more
    # accumulation steps needs that many more steps for the same updates.
    iters_factor: int = 1

    def to_json(self) -> dict[str, Any]:
        data = {"title": self.title, "changes": dict(self.changes),
                "estimate_bytes": self.estimate.total_bytes, "verdict": self.verdict.value,
                "iters_factor": self.iters_factor}
        if "max_seq_length" in self.changes:
            data["truncated_rows"] = self.truncated_rows
        return data


@dataclass
class Plan:
    """Everything `zyquo-tui plan` shows: estimate, verdict, budget and suggestions."""

    assessment: Assessment
    suggestions: list[Suggestion]
    token_lengths_known: bool

    @property
    def estimate(self) -> Estimate:
        return self.assessment.estimate

    def to_json(self) -> dict[str, Any]:
        budget = self.assessment.budget
        return {
            **self.estimate.to_json(),
            "verdict": self.assessment.verdict.value,
            "reason": self.assessment.reason,
            "budget_bytes": budget.budget_bytes,
            "budget_source": budget.budget_source,
            "available_bytes": budget.available_bytes,
            "used_by_others_bytes": budget.used_by_others_bytes,
            "total_memory_bytes": budget.total_bytes,
            "suggestions": [s.to_json() for s in self.suggestions],
        }


class MemoryAdvisor:
    """Estimates a config's peak memory, judges it against this machine's budget, and
    searches for changed configs that fit."""

    MAX_SUGGESTIONS = 6

    def __init__(self, budget: MemoryBudget | None = None, *, device: str | None = None,
                 history: MemoryHistory | None = None,
                 coefficients: Coefficients | None = None, world_size: int = 1,
                 ranks_here: int = 1, replica_cache: ReplicaCache | None = None) -> None:
        self._budget = budget
        # Where replica measurements are kept, so a config is measured once (None: not kept)
        self.replica_cache = replica_cache
        self.device = device or (budget.device if budget else None)
        self.history = history if history is not None else MemoryHistory()
        self._coefficients = coefficients
        # A distributed run: each of its world_size ranks trains batch_size / world_size rows
        # of every step (as mlx-lm splits a batch), and ranks_here of them share this
        # machine's memory (all of them with --ranks N, one per host with --hosts).
        self.world_size = max(world_size, 1)
        self.ranks_here = max(ranks_here, 1)

    def placed(self, world_size: int, ranks_here: int) -> MemoryAdvisor:
        """This advisor for a run of `world_size` ranks, `ranks_here` of them on this machine
        (the same budget, history and coefficients)."""
        return MemoryAdvisor(self._budget, device=self.device, history=self.history,
                             coefficients=self._coefficients, world_size=world_size,
                             ranks_here=ranks_here,
                             replica_cache=self.replica_cache)

    def within(self, hp: Hyperparameters, machine_limit: int | None) -> MemoryAdvisor:
        """This advisor judging a run with these settings against its memory limit
        (core/runs/out_of_memory.py), where that is below the budget."""
        limit, source = memory_limit(hp, machine_limit)
        budget = capped(self.budget, limit, source)
        if budget is self.budget:
            return self
        return MemoryAdvisor(budget, device=self.device, history=self.history,
                             coefficients=self._coefficients, world_size=self.world_size,
                             ranks_here=self.ranks_here,
                             replica_cache=self.replica_cache)

    def rank_config(self, config: TrainingConfig) -> TrainingConfig:
        """The config one rank trains at once: its share of each batch, or the widest slice
        of that share when the batch is computed in micro-batches."""
        if self.world_size == 1 and config.micro_batches == 1:
            return config
        share = max(config.batch_size // self.world_size, 1)
        return config.replace(batch_size=-(-share // config.micro_batches), micro_batches=1)

    @classmethod
    def for_machine(cls, home: Path | None = None, *, refresh_probe: bool = False
                    ) -> MemoryAdvisor:
        """This machine's budget (probed once, cached) and measured history."""
        budget = machine_budget(home, refresh=refresh_probe)
        return cls(budget, history=MemoryHistory.load(home), replica_cache=ReplicaCache(home))

    @classmethod
    def for_calibration(cls, device: str = CPU) -> MemoryAdvisor:
        """The bare model: no history, a budget that everything fits."""
        return cls(MemoryBudget.fixed(1 << 50, device=device), history=MemoryHistory())

    @property
    def budget(self) -> MemoryBudget:
        if self._budget is None:
            self._budget = machine_budget()
            self.device = self.device or self._budget.device
        return self._budget

    @property
    def coefficients(self) -> Coefficients:
        if self._coefficients is not None:
            return self._coefficients
        return COEFFICIENTS.get(self.device or self.budget.device, CPU_COEFFICIENTS)

    # -- estimate ------------------------------------------------------------------------------

    def training_config(self, model: ModelFacts, config: TrainingConfig) -> TrainingConfig:
        """What one process of the run trains: its share of the batch, its loss slicing
        decided (what a replica must train to stand for it)."""
        return resolved_slicing(model, self.rank_config(config), self.coefficients)

    def with_replica(self, estimate: Estimate, measured: ReplicaMeasurement) -> Estimate:
        """The estimate with its total replaced by what the replica's measured peak predicts:
        the terms stay as the breakdown, and a `replica correction` line takes them to it
        (any history correction is dropped: the replica measured this very config here)."""
        breakdown = {name: value for name, value in estimate.breakdown.items()
                     if name != "history_correction"}
        breakdown["replica_correction"] = measured.peak_bytes - estimate.model_bytes
        notes = [note for note in estimate.notes if not note.startswith("corrected by")]
        took = f"{measured.seconds:.0f} s" + (
            f", kept from {measured.measured_at}" if measured.measured_at else "")
        if measured.replica.whole_config:
            notes.append(f"measured whole (a config this small costs what a replica would, "
                         f"{took}): MLX's own peak, not the terms' sum.")
        else:
            notes.append(f"measured on a replica with every width divided by "
                         f"{measured.replica.scale} ({fmt_bytes(measured.replica_peak_bytes)} "
                         f"peak, {took}): MLX's own schedule, not the terms' sum.")
        return dataclasses.replace(estimate, total_bytes=measured.peak_bytes,
                                   breakdown=breakdown, notes=notes, correction=None,
                                   replica=measured.to_json())

    def replica_estimate(self, model: ModelFacts, estimate: Estimate, *,
                         hyperparameters: Hyperparameters | None = None,
                         extra_config: dict[str, Any] | None = None,
                         cancelled: Callable[[], bool] | None = None,
                         cached_only: bool = False) -> tuple[Estimate | None, str | None]:
        """`estimate` with the peak its config's replica predicts (measured now, in a
        subprocess: seconds, or kept from an earlier measurement of the same config), and
        None; or None and why no replica was measured (a replica that cannot be planned, would
        itself crowd the memory, or fails to train). With `cached_only`, only a kept
        measurement answers."""
        config = self.training_config(model, estimate.config)
        if (hyperparameters is not None and config.objective == "dpo"
                and SETTINGS["reference"].get(hyperparameters) != "base"):
            return None, ("no replica: its DPO reference is another model folder, which a "
                          "replica does not scale")
        if config.objective == "distill":
            return None, ("no replica: its teacher is another model folder, which a replica "
                          "does not scale")
        try:
            model_config = json.loads((Path(model.path) / "config.json").read_text("utf-8"))
        except (OSError, ValueError) as error:
            return None, f"no replica: its config.json could not be read ({error})"
        replica = (Replica.whole(model_config, config)
                   if can_measure_whole(config, estimate.model_bytes)
                   else plan_replica(model_config, config))
        if replica is None:
            return None, f"no replica: {why_no_replica(model_config, config)}"
        need = estimate.model_bytes / replica.scale ** 2
        if need > self.budget.available_bytes / 2:
            how = ("measured whole" if replica.whole_config
                   else f"even with its widths divided by {replica.scale}")
            return None, (f"no replica: {how} it would need about {fmt_bytes(need)}, more "
                          "than half the memory free")
        try:
            measured = measure_replica(model.path, model, config, replica,
                                       hyperparameters=hyperparameters,
                                       extra_config=extra_config, cancelled=cancelled,
                                       cache=self.replica_cache, cached_only=cached_only)
        except UserError as error:  # the terms' estimate stands; say why
            return None, f"no replica: {error.message[:1].lower()}{error.message[1:]}"
        if measured is None:
            return None, "no replica: not measured yet"
        return self.with_replica(estimate, measured), None

    def margin(self, estimate: Estimate) -> float:
        """How far below its real peak the estimate may fall (the tight band): a replica's
        error where the terms are calibrated, else the terms' held-out error."""
        if estimate.replica is not None and self.coefficients.calibrated:
            return REPLICA_ERROR
        return self.coefficients.held_out_error

    def estimate(self, model: ModelFacts, config: TrainingConfig, *,
                 use_history: bool = True) -> Estimate:
        """The peak of one process training `config` (one rank's, for a distributed run)."""
        device = self.device or self.budget.device
        own, with_model = model_problems(model, config)
        if self.world_size > 1 and config.batch_size % self.world_size:
            own.append(Problem("batch_size", f"batch_size ({config.batch_size}) must divide by "
                                             f"the {self.world_size} processes of the run: "
                                             "each trains an equal share of every batch."))
        problems = [problem.sentence for problem in own + with_model]
        if own:  # values no run has: nothing to estimate
            breakdown = dict.fromkeys(TERMS, 0)
            return Estimate(0, breakdown, 0, config, device, 0, 0, 0, list(model.notes),
                            problems)
        coefficients = self.coefficients
        rank = resolved_slicing(model, self.rank_config(config), coefficients)
        quantities = features(model, rank)
        breakdown = combine(quantities, coefficients)
        rounded = {name: int(round(value)) for name, value in breakdown.items()}
        total = sum(rounded.values())
        notes = list(model.notes)
        if self.world_size > 1:
            notes.append(f"one rank of {self.world_size}: each trains "
                         f"{self.rank_config(config).batch_size} of the batch's "
                         f"{config.batch_size} rows per step.")
        if config.micro_batches > 1:
            notes.append(f"each batch in {config.micro_batches} micro-batches: the "
                         f"activations of {self.rank_config(config).batch_size} rows at once.")
        if config.longest_row_tokens is None:
            notes.append(f"row lengths unknown: assumed every batch is {config.max_seq_length} "
                         "tokens wide (give the dataset for its real longest row).")
        if config.quantize_base and not model.quantized:
            bits, group = config.quantize_base
            notes.append(f"base weights as if quantized to {bits} bits (group {group}).")
        if not coefficients.calibrated:
            notes.append(f"the {device} terms are not calibrated on this kind of device yet; "
                         "`zyquo-tui plan --measure` measures the real peak.")
        estimate = Estimate(
            total_bytes=total, breakdown=rounded, model_bytes=total, config=config,
            device=device, trained_layers=int(quantities["_trained_layers"]),
            trainable_parameters=int(quantities["_elements"]),
            batch_width=config.batch_width, notes=notes, problems=problems,
            loss_chunk_tokens=(loss_slice_tokens(rank) or OFF_TEXT),
        )
        if use_history:
            correction = self.history.correction(device, model.path or None)
            if correction is not None:
                corrected = int(round(total * correction.factor))
                estimate.breakdown["history_correction"] = corrected - total
                estimate.total_bytes = corrected
                estimate.correction = round(correction.factor, 4)
                estimate.notes.append(f"corrected by this machine's history: "
                                      f"{correction.sentence()}")
        return estimate

    # -- verdict -------------------------------------------------------------------------------

    def judge(self, estimate: Estimate) -> Assessment:
        """fits, tight or won't fit (thresholds in docs/memory.md), with the reason: this
        machine's need is the estimate times the ranks of the run that train here."""
        budget = self.budget
        need = estimate.total_bytes * self.ranks_here
        limit = budget.budget_bytes
        where = budget.budget_source
        needs = f"needs about {fmt_bytes(need)}"
        if self.ranks_here > 1:
            needs += (f" ({self.ranks_here} ranks here, {fmt_bytes(estimate.total_bytes)} "
                      "each)")
        margin = self.margin(estimate)
        verdict = Verdict.of(need, limit, 1 - margin)
        if verdict is Verdict.WONT_FIT:
            reason = (f"{needs}, more than the {fmt_bytes(limit)} "
                      f"training may use here ({where}).")
        elif verdict is Verdict.TIGHT:
            reason = (f"{needs}, {need / limit:.0%} of the "
                      f"{fmt_bytes(limit)} training may use here ({where}): within the "
                      f"estimate's error ({margin:.0%}) of the limit.")
        elif need > budget.available_bytes:
            verdict = Verdict.TIGHT
            reason = (f"{needs} of the {fmt_bytes(limit)} budget, but "
                      f"other processes use {fmt_bytes(budget.used_by_others_bytes)} now and "
                      f"only {fmt_bytes(budget.available_bytes)} is free: close some or it "
                      "will swap.")
        else:
            reason = (f"{needs} of the {fmt_bytes(limit)} training may "
                      f"use here ({need / limit:.0%}); {fmt_bytes(budget.available_bytes)} "
                      "is free now.")
        return Assessment(verdict, reason, estimate, budget, self.ranks_here)

    def assess(self, model: ModelFacts, config: TrainingConfig) -> Assessment:
        return self.judge(self.estimate(model, config))

    # -- suggestions ---------------------------------------------------------------------------

    def suggest(self, model: ModelFacts, config: TrainingConfig,
                token_lengths: Sequence[int] | None = None) -> list[Suggestion]:
        """Changed configs that the model says fit, least disruptive first.

        The search goes stage by stage: the sliced loss when it is off (the same losses),
        keep the effective batch (halve the batch, double
        grad accumulation), grad checkpointing, shorter sequences, fewer layers, a lower rank,
        LoRA instead of full fine-tuning, a quantized base (QLoRA). Within a stage the mildest
        option that fits is suggested. A stage none of whose options fits hands its most
        saving option on to the next stages, so later suggestions combine changes; each is
        then trimmed of the carried changes it does not need. Only configs judged `fits` are
        suggested.
        """
        if self.judge(self.estimate(model, config)).verdict is Verdict.FITS:
            return []
        lengths = sorted(token_lengths) if token_lengths else None
        suggestions: list[Suggestion] = []
        seen: set[TrainingConfig] = set()
        carried = config
        carried_bytes = self.estimate(model, config).total_bytes
        carried_stages: list[tuple[str, ...]] = []  # the fields each carried stage changed
        for stage, fields in _STAGES:
            fitting = None
            best: tuple[TrainingConfig, int] | None = None
            for candidate in stage(model, carried):
                estimate = self.estimate(model, candidate)
                if estimate.problems:
                    continue
                if best is None or estimate.total_bytes < best[1]:
                    best = (candidate, estimate.total_bytes)
                if self.judge(estimate).verdict is Verdict.FITS:
                    fitting = candidate
                    break
            if fitting is not None:
                fitting = self._trim(model, config, fitting, carried_stages)
                if fitting not in seen:
                    seen.add(fitting)
                    suggestions.append(self._suggestion(model, config, fitting, lengths))
                if len(suggestions) >= self.MAX_SUGGESTIONS:
                    break
            elif best is not None and best[1] < carried_bytes * (1 - MIN_CARRIED_SAVING):
                carried, carried_bytes = best
                carried_stages.append(fields)
        return suggestions

    def _fits(self, model: ModelFacts, config: TrainingConfig) -> bool:
        estimate = self.estimate(model, config)
        return not estimate.problems and self.judge(estimate).verdict is Verdict.FITS

    def _trim(self, model: ModelFacts, original: TrainingConfig, candidate: TrainingConfig,
              carried_stages: list[tuple[str, ...]]) -> TrainingConfig:
        """Undo carried changes the candidate fits without, the most disruptive first."""
        for fields in reversed(carried_stages):
            undone = candidate.replace(**{f: getattr(original, f) for f in fields})
            if undone != candidate and self._fits(model, undone):
                candidate = undone
        return candidate

    def _suggestion(self, model: ModelFacts, original: TrainingConfig, config: TrainingConfig,
                    lengths: Sequence[int] | None) -> Suggestion:
        changes = _changes(original, config)
        truncated = None
        if "max_seq_length" in changes and lengths is not None:
            truncated = _rows_longer(lengths, config.max_seq_length)
        estimate = self.estimate(model, config)
        title = _describe(original, config, truncated, len(lengths) if lengths else None)
        return Suggestion(title, changes, config, estimate, self.judge(estimate).verdict,
                          truncated, _iters_factor(original, config))

    def plan(self, model: ModelFacts, config: TrainingConfig,
             token_lengths: Sequence[int] | None = None) -> Plan:
        if token_lengths and config.longest_row_tokens is None:
            config = config.replace(longest_row_tokens=max(token_lengths))
        assessment = self.assess(model, config)
        suggestions = [] if assessment.estimate.problems else self.suggest(
            model, config, token_lengths)
        return Plan(assessment, suggestions, token_lengths_known=bool(token_lengths))

    # -- measured history ------------------------------------------------------------------------

    def record_measurement(self, model: ModelFacts, estimate: Estimate,
                           measured: Measurement) -> None:
        """Add a `plan --measure` (or the setup form's) measurement beside its estimate."""
        self.history.append({
            "device": estimate.device, "model": model.path, "method": estimate.config.method.value,
            "settings": estimate.config.settings(), "estimate_bytes": estimate.model_bytes,
            "measured_peak_bytes": measured.training_peak_bytes,
            "mlx_peak_bytes": measured.peak_bytes, "peak_rss_bytes": measured.peak_rss_bytes,
            "start_rss_bytes": measured.start_rss_bytes,
            "ready_rss_bytes": measured.ready_rss_bytes, "source": "measure", "run_id": None,
        })


# A stage must save this share of the estimate to be carried into the next stages.
MIN_CARRIED_SAVING = 0.02


def _chunked_loss(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    if config.loss_chunk_tokens != OFF_TEXT:
        return []
    return [config.replace(loss_chunk_tokens=AUTO_TEXT)]


def _halve_batch(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    options = []
    batch, accumulation = config.batch_size, config.grad_accumulation_steps
    while batch > 1:
        batch //= 2
        accumulation *= 2
        options.append(config.replace(batch_size=batch, grad_accumulation_steps=accumulation))
    return options


def _checkpoint(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    return [] if config.grad_checkpoint else [config.replace(grad_checkpoint=True)]


def _shorter(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    current = min(config.max_seq_length, config.batch_width)
    return [config.replace(max_seq_length=cap)
            for cap in (4096, 3072, 2048, 1536, 1024, 768, 512, 384, 256, 128) if cap < current]


def _fewer_layers(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    options = []
    count = trained_layers(model, config)
    while count > 1:
        count //= 2
        options.append(config.replace(num_layers=count))
    return options


def _lower_rank(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    if config.method is Method.FULL:
        return []
    options = []
    rank = config.rank
    while rank > 4:
        rank //= 2
        options.append(config.replace(rank=rank))
    return options


def _lora_instead(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    return [config.replace(method=Method.LORA)] if config.method is Method.FULL else []


def _quantize(model: ModelFacts, config: TrainingConfig) -> list[TrainingConfig]:
    if model.quantized or config.quantize_base or config.method is Method.FULL:
        return []
    return [config.replace(method=Method.QLORA, quantize_base=(bits, 64)) for bits in (8, 4)]


# The search order of MemoryAdvisor.suggest, least disruptive first, with the fields each
# stage changes.
_STAGES = (
    (_chunked_loss, ("loss_chunk_tokens",)),
    (_halve_batch, ("batch_size", "grad_accumulation_steps")),
    (_checkpoint, ("grad_checkpoint",)),
    (_shorter, ("max_seq_length",)),
    (_fewer_layers, ("num_layers",)),
    (_lower_rank, ("rank",)),
    (_lora_instead, ("method",)),
    (_quantize, ("method", "quantize_base")),
)


def _describe(before: TrainingConfig, after: TrainingConfig, truncated: int | None,
              rows: int | None) -> str:
    """The changes from `before` to `after` in words, mildest first."""
    parts = []
    if after.loss_chunk_tokens != before.loss_chunk_tokens:
        parts.append(f"chunked loss (loss_chunk_tokens {after.loss_chunk_tokens}: the same "
                     "losses, the logits a slice of tokens at a time)")
    if (after.batch_size, after.grad_accumulation_steps) != (
            before.batch_size, before.grad_accumulation_steps):
        same = (after.batch_size * after.grad_accumulation_steps
                == before.batch_size * before.grad_accumulation_steps)
        factor = _iters_factor(before, after)
        parts.append(f"batch {after.batch_size} with grad accumulation "
                     f"{after.grad_accumulation_steps}"
                     + (f" (same effective batch and updates: {factor}x the steps, as mlx-lm "
                        "counts a step per batch)" if same else ""))
    if after.grad_checkpoint and not before.grad_checkpoint:
        parts.append("grad checkpointing (slower steps)")
    if after.max_seq_length != before.max_seq_length:
        if truncated is not None:
            cut = f"cuts {truncated} of {rows} rows"
        else:
            cut = "row lengths unknown: give the dataset to count the rows it cuts"
        parts.append(f"max_seq_length {after.max_seq_length} ({cut})")
    if after.num_layers != before.num_layers:
        parts.append(f"train the last {after.num_layers} layers")
    if after.rank != before.rank and after.method is not Method.FULL:
        parts.append(f"LoRA rank {after.rank}")
    if before.method is Method.FULL and after.method is not Method.FULL:
        parts.append("LoRA instead of full fine-tuning")
    if after.quantize_base and not before.quantize_base:
        bits = after.quantize_base[0]
        parts.append(f"QLoRA on a {bits}-bit copy of the model (`mlx_lm convert --hf-path "
                     f"MODEL --mlx-path OUT -q --q-bits {bits}`)")
    return "; ".join(parts)


def _iters_factor(before: TrainingConfig, after: TrainingConfig) -> int:
    """The steps a split batch needs for the same updates and rows (1 when not split)."""
    if after.batch_size * after.grad_accumulation_steps != \
            before.batch_size * before.grad_accumulation_steps:
        return 1
    return max(1, after.grad_accumulation_steps // before.grad_accumulation_steps)


def _changes(before: TrainingConfig, after: TrainingConfig) -> dict[str, Any]:
    old, new = before.settings(), after.settings()
    return {key: value for key, value in new.items() if old.get(key) != value}


def _rows_longer(sorted_lengths: Sequence[int], cap: int) -> int:
    """Rows with more tokens than `cap` (which training cuts)."""
    import bisect

    return len(sorted_lengths) - bisect.bisect_right(sorted_lengths, cap)


def gate(run: Run, advisor: MemoryAdvisor, *, override: bool = False,
         model: ModelFacts | None = None, longest_row_tokens: int | None = None,
         replica: bool = False) -> Assessment:
    """Judge a run before it starts and record the verdict in run.memory.

    A run that won't fit raises UserError (exit status 1) unless `override` is given; the
    override is recorded in the run. The caller saves the run (store.update). Gives the
    dataset's longest tokenized row when known, for an exact estimate. A config whose replica
    was measured before (by `plan`, the new-run form) is judged by that figure. With `replica`,
    a run the terms say won't fit is judged again by its replica's measured peak (seconds; the
    terms over-state some configs by up to a fifth: docs/memory.md) before it is refused.
    """
    model = model or ModelFacts.from_folder(run.model)
    config = TrainingConfig.from_run(run, longest_row_tokens)
    estimate = advisor.estimate(model, config)
    if estimate.problems:
        raise UserError(estimate.problems[0], EXIT_USAGE)
    assessment = advisor.judge(estimate)
    # The figure `plan` or the new-run form showed for this very config, where it was
    # measured (kept: core/memory/replica_cache.py); measured now only to save a refusal.
    measure_now = replica and assessment.verdict is Verdict.WONT_FIT
    if measure_now or advisor.replica_cache is not None:
        measured, _why_not = advisor.replica_estimate(model, estimate,
                                                      hyperparameters=run.hyperparameters,
                                                      extra_config=run.extra_config,
                                                      cached_only=not measure_now)
        if measured is not None:
            estimate = measured
            assessment = advisor.judge(estimate)
    run.memory = {
        "verdict": assessment.verdict.value,
        "reason": assessment.reason,
        "estimate_bytes": estimate.total_bytes,
        "model_estimate_bytes": estimate.model_bytes,
        "breakdown": dict(estimate.breakdown),
        "replica": estimate.replica,
        "budget_bytes": assessment.budget.budget_bytes,
        "available_bytes": assessment.budget.available_bytes,
        "device": estimate.device,
        "settings": config.settings(),
        "exact_sequence": longest_row_tokens is not None,
        "override": bool(override and assessment.verdict is Verdict.WONT_FIT),
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if assessment.verdict is Verdict.WONT_FIT and not override:
        raise UserError(f"This run won't fit in memory: it {assessment.reason[:-1]}; "
                        f"{_what_would_fit(advisor.suggest(model, config))}, or start it with an "
                        "explicit override (--override-memory).", EXIT_PROBLEMS)
    return assessment


def what_would_fit_after_oom(run: Run, advisor: MemoryAdvisor) -> str:
    """What to change after a run ran out of memory for good: the changes that fit its
    limit; where the estimate says it fits already (the run proved it wrong), what lowers
    memory most, and the limit to raise."""
    from zyquo_tui.core.runs.failures import SUGGESTIONS

    model = ModelFacts.from_folder(run.model)
    config = TrainingConfig.from_run(run)
    estimate = advisor.estimate(model, config)
    if estimate.problems or advisor.judge(estimate).verdict is not Verdict.FITS:
        return _what_would_fit(advisor.suggest(model, config))
    return (f"its estimate ({fmt_bytes(estimate.total_bytes)}) is under the "
            f"{fmt_bytes(advisor.budget.budget_bytes)} of {advisor.budget.budget_source}, yet "
            f"it did not fit: {SUGGESTIONS['oom']}; or raise the limit")


def _what_would_fit(suggestions: list[Suggestion], shown: int = 2) -> str:
    """The mildest changes that fit, for a refusal: the seed's "try: ..." in one clause."""
    if not suggestions:
        return "no change of its settings fits on this machine (`zyquo-tui plan` shows why)"
    tries = "; or ".join(f"{s.title} ({fmt_bytes(s.estimate.total_bytes)})"
                         for s in suggestions[:shown])
    return f"what would fit: {tries} (`zyquo-tui plan` lists them all)"
