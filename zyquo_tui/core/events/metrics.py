"""RunMetrics: a run's figures rebuilt from its events, for the CLI and the dashboard.

A resumed run appends a new `started` event with `resumed_from_step` k: points after k from the
earlier session are dropped, since the resumed session reports those steps again.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.runs.settings import OWN_KEY


@dataclass
class Series:
    """Points (iteration, value) in iteration order."""

    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def add(self, step: int, value: float) -> None:
        if self.steps and step <= self.steps[-1]:
            self.truncate_after(step - 1)
        self.steps.append(step)
        self.values.append(value)

    def truncate_after(self, step: int) -> None:
        cut = bisect.bisect_right(self.steps, step)
        del self.steps[cut:]
        del self.values[cut:]

    @property
    def last(self) -> float | None:
        return self.values[-1] if self.values else None

    def __len__(self) -> int:
        return len(self.steps)


# What a grpo run adds to its train events (docs/EVENTS.md): the mean weighted reward of the
# step's sampled answers and its spread within groups, the KL to the reference, the answers'
# mean length in tokens and the share of their tokens whose ratio was clipped. Its val events
# carry reward_mean too (the series val_reward_mean).
GRPO_METRICS = ("reward_mean", "reward_std", "kl", "completion_length", "clip_fraction")
# A grpo train event's mean of each reward function, by the name the user wrote.
REWARD_MEANS = "reward_means"

SERIES_FIELDS = {
    "train_loss": (ev.TRAIN, "train_loss"),
    "learning_rate": (ev.TRAIN, "learning_rate"),
    "tokens_per_second": (ev.TRAIN, "tokens_per_second"),
    "peak_memory_bytes": (ev.TRAIN, "peak_memory_bytes"),
    "peak_rss_bytes": (ev.TRAIN, "peak_rss_bytes"),
    "iterations_per_second": (ev.TRAIN, "iterations_per_second"),
    "trained_tokens": (ev.TRAIN, "trained_tokens"),
    "val_loss": (ev.VAL, "val_loss"),
    # A preference run's: train means by report, and validation's as val_<name>.
    **{name: (ev.TRAIN, name) for name in ev.PREFERENCE_METRICS},
    **{f"val_{name}": (ev.VAL, name) for name in ev.PREFERENCE_METRICS},
    # A grpo run's (empty for others).
    **{name: (ev.TRAIN, name) for name in GRPO_METRICS},
    "val_reward_mean": (ev.VAL, "reward_mean"),
    # In-run evaluations (`--eval-every`): the answers' NLL, and the score with a scorer.
    "eval_nll": (ev.EVAL, "nll"),
    "eval_score": (ev.EVAL, "score"),
}


# For each metric event type: (event field, series name) pairs.
_FIELDS_BY_TYPE: dict[str, list[tuple[str, str]]] = {}
for _name, (_type, _key) in SERIES_FIELDS.items():
    _FIELDS_BY_TYPE.setdefault(_type, []).append((_key, _name))


class RunMetrics:
    """Everything the events of one run say, updated event by event."""

    def __init__(self) -> None:
        self.series: dict[str, Series] = {name: Series() for name in SERIES_FIELDS}
        self.checkpoints: dict[int, dict[str, Any]] = {}
        self.warnings: list[dict[str, Any]] = []
        # Sample answers by validation step, in the order written (`--sample-prompts`).
        self.samples: dict[int, list[dict[str, Any]]] = {}
        self.started: dict[str, Any] | None = None
        self.first_started_time: float | None = None
        self.session_started_time: float | None = None
        # The time the sessions before the latest took, each from its `started` to its last
        # event (a cancel and a resume count their training, not the pause between).
        self.earlier_sessions_seconds = 0.0
        self.terminal: dict[str, Any] | None = None
        self.iters: int | None = None
        self.step = 0
        self.last_time: float | None = None
        self.events_seen = 0
        # A distributed run's latest peak memory of each rank, by rank (train events), and the
        # largest any rank reported in any session.
        self.rank_peaks: list[int] | None = None
        self.largest_rank_peak: int | None = None
        # A grpo run's latest mean of each reward function, by name (train events).
        self.reward_means: dict[str, float] | None = None
        # The latest in-run evaluation (`--eval-every`): its eval event.
        self.last_eval: dict[str, Any] | None = None

    def ingest(self, events: Iterable[dict[str, Any]]) -> None:
        for event in events:
            self._ingest_one(event)

    def _ingest_one(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        self.events_seen += 1
        previous_time = self.last_time
        self.last_time = event.get("time", self.last_time)
        fields = _FIELDS_BY_TYPE.get(kind)
        if fields is not None:
            step = event.get("iteration")
            if not isinstance(step, int):
                return
            for key, series in fields:
                value = event.get(key)
                if isinstance(value, (int, float)):
                    self.series[series].add(step, float(value))
            if kind == ev.VAL:
                # The first validation (step 1) comes before the first report: the step it
                # names is the run's, as `runs show` puts its best there.
                self.step = max(self.step, step)
            if kind == ev.EVAL:
                self.last_eval = event
            if kind == ev.TRAIN:
                self.step = step
                peaks = event.get(ev.RANK_PEAKS)
                if isinstance(peaks, list) and all(isinstance(p, int) for p in peaks):
                    self.rank_peaks = peaks
                    self.largest_rank_peak = max([*peaks, self.largest_rank_peak or 0])
                means = event.get(REWARD_MEANS)
                if isinstance(means, dict):
                    self.reward_means = {str(name): float(value) for name, value
                                         in means.items() if isinstance(value, (int, float))}
        elif kind == ev.CHECKPOINT:
            step = event.get("iteration")
            if isinstance(step, int):
                self.checkpoints[step] = event
                self.step = max(self.step, step)
        elif kind == ev.STARTED:
            if self.session_started_time is not None and previous_time is not None:
                self.earlier_sessions_seconds += max(0.0, previous_time
                                                     - self.session_started_time)
            self.started = event
            self.terminal = None
            self.session_started_time = event.get("time")
            if self.first_started_time is None:
                self.first_started_time = event.get("time")
            self.iters = event.get("iters", self.iters)
            resumed = event.get("resumed_from_step")
            if isinstance(resumed, int):
                for series in self.series.values():
                    series.truncate_after(resumed)
                # The resumed session validates again after `resumed`: its samples replace.
                self.samples = {k: v for k, v in self.samples.items() if k <= resumed}
                self.step = resumed
            else:
                for series in self.series.values():
                    series.truncate_after(-1)
                self.samples = {}
                self.step = 0
        elif kind == ev.WARNING:
            self.warnings.append(event)
        elif kind == ev.SAMPLE:
            step = event.get("iteration")
            if isinstance(step, int):
                self.samples.setdefault(step, []).append(event)
        elif kind in ev.TERMINAL_TYPES:
            self.terminal = event

    # -- derived figures ---------------------------------------------------------------------

    def value_at(self, name: str, step: int) -> float | None:
        """Series `name`'s value at `step` exactly, or None."""
        series = self.series[name]
        i = bisect.bisect_left(series.steps, step)
        if i < len(series.steps) and series.steps[i] == step:
            return series.values[i]
        return None

    def val_at(self, step: int) -> float | None:
        return self.value_at("val_loss", step)

    def best_by(self) -> str:
        """What picks the best checkpoint, as the run's latest session was started with (its
        best_by setting): "val_loss" or "eval"."""
        config = (self.started or {}).get("config")
        own = config.get(OWN_KEY) if isinstance(config, dict) else None
        chosen = own.get("best_by") if isinstance(own, dict) else None
        return chosen if isinstance(chosen, str) else "val_loss"

    def best_val(self) -> tuple[int, float] | None:
        series = self.series["val_loss"]
        if not series.values:
            return None
        i = min(range(len(series.values)), key=series.values.__getitem__)
        return series.steps[i], series.values[i]

    def best_checkpoint_step(self) -> int | None:
        """The saved step with the lowest validation loss measured at that step; for a run
        whose best_by is eval, the evaluated step with the highest score (the lowest answer
        NLL when the evaluations have no scorer)."""
        if self.best_by() == "eval":
            return self.best_evaluated_checkpoint_step()
        scored = [(self.checkpoints[s].get("val_loss", self.val_at(s)), s)
                  for s in self.checkpoints]
        scored = [(loss, s) for loss, s in scored if loss is not None]
        return min(scored)[1] if scored else None

    def best_evaluated_checkpoint_step(self) -> int | None:
        """The saved and evaluated step with the highest score, the lowest answer NLL among
        equal scores (or alone, without a scorer), the earlier step among equals."""
        ranked = []
        for step in self.checkpoints:
            nll, score = self.value_at("eval_nll", step), self.value_at("eval_score", step)
            if nll is None and score is None:
                continue
            ranked.append((-score if score is not None else 0.0,
                           nll if nll is not None else float("inf"), step))
        return min(ranked)[2] if ranked else None

    def stop_reason(self) -> tuple[str, str] | None:
        """(reason, sentence) when the trainer stopped the run before its last step by a
        rule (early stopping, divergence): from the `completed` event's summary."""
        if self.terminal is None or self.terminal.get("type") != ev.COMPLETED:
            return None
        summary = self.terminal.get("summary") or {}
        reason = summary.get("stop_reason")
        return (reason, summary.get("stop_message") or reason) if reason else None

    def seconds_to_last_event(self) -> float | None:
        """The time the sessions took, each from its `started` to its last event."""
        if self.session_started_time is None or self.last_time is None:
            return None
        return self.earlier_sessions_seconds + max(0.0, self.last_time
                                                   - self.session_started_time)

    def elapsed_seconds(self, now: float | None = None) -> float | None:
        """The time the run has trained: its sessions added up, the latest to its end (or to
        `now` while it runs)."""
        if self.session_started_time is None:
            return None
        end = self.terminal.get("time") if self.terminal else (now or time.time())
        return self.earlier_sessions_seconds + max(0.0, end - self.session_started_time)

    def eta_seconds(self) -> float | None:
        """From the latest iterations per second; None when finished or unknown."""
        if self.terminal or not self.iters:
            return None
        speed = self.series["iterations_per_second"].last
        if not speed:
            return None
        return max(0.0, (self.iters - self.step) / speed)

    def summary(self) -> dict[str, Any]:
        best = self.best_val()
        return {
            "step": self.step,
            "iters": self.iters,
            "last_train_loss": self.series["train_loss"].last,
            "last_val_loss": self.series["val_loss"].last,
            "best_val_loss": best[1] if best else None,
            "best_val_step": best[0] if best else None,
            "tokens_per_second": self.series["tokens_per_second"].last,
            "peak_memory_bytes": max(self.series["peak_memory_bytes"].values, default=None),
            "peak_rss_bytes": max(self.series["peak_rss_bytes"].values, default=None),
            "learning_rate": self.series["learning_rate"].last,
            "eta_seconds": self.eta_seconds(),
            "elapsed_seconds": self.elapsed_seconds(),
            "best_checkpoint_step": self.best_checkpoint_step(),
        }


def downsample(steps: list[int], values: list[float], width: int) -> list[float]:
    """At most `width` values for display, keeping each bucket's extremes (min and max).

    Each bucket contributes its minimum and maximum in the order they occur, so a spike or a
    dip survives however long the run is.
    """
    n = len(values)
    if n <= width or width <= 0:
        return list(values)
    buckets = max(1, width // 2)
    out: list[float] = []
    for b in range(buckets):
        lo = b * n // buckets
        hi = max(lo + 1, (b + 1) * n // buckets)
        chunk = values[lo:hi]
        i_min = min(range(len(chunk)), key=chunk.__getitem__)
        i_max = max(range(len(chunk)), key=chunk.__getitem__)
        first, second = sorted((i_min, i_max))
        out.append(chunk[first])
        if second != first:
            out.append(chunk[second])
    return out
