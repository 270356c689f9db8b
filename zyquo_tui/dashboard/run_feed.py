"""RunFeed: what the dashboard holds of one run's events, cheap to draw however long the run.

A run can have 100,000 events and more. Three things keep the dashboard quick with that:

- The history is read by core.events.history (train lines as typed columns, parsed on worker
  processes when the file is long), into a RunMetrics whose series are typed arrays; from the
  run's metrics.cache when it still holds, parsing only the lines appended since.
- `DisplaySeries` folds each series into at most `DISPLAY_BUCKETS` buckets as points arrive,
  keeping every bucket's minimum and maximum in the order they occurred (so a spike or a dip is
  never lost) and its mean (for the smoothed line). A redraw walks the buckets, not the points.
- Live events arrive in bursts (one list per read); a burst is ingested at once and the UI is
  told once.

No Textual here: this module is plain Python over core.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path
from typing import Any

from zyquo_tui.core.events import history as event_history
from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.history import History, new_metrics
from zyquo_tui.core.events.metrics import GRPO_METRICS, Series
from zyquo_tui.core.system.freed_memory import release_freed_memory

DISPLAY_BUCKETS = 1024
RECENT_EVENTS = 40
# Series the run screen draws. Smoothing applies to the noisy per-report figures only:
# validation loss is already an average over val_batches and comes rarely; the learning rate
# and peak memory are exact.
DISPLAYED = ("train_loss", "val_loss", "tokens_per_second", "learning_rate", "peak_memory_bytes",
             "peak_rss_bytes",
             # a preference run's (empty for others): the margin is charted, train and val
             "reward_margin", "val_reward_margin", "reward_accuracy",
             # a grpo run's (empty for others): the reward is charted, train and val
             *GRPO_METRICS, "val_reward_mean")
# A grpo run's figures are means over a few sampled answers a step: as noisy as the loss.
SMOOTHABLE = frozenset({"train_loss", "tokens_per_second", "reward_mean", "reward_std", "kl",
                        "completion_length"})
# Events with a panel of their own rather than a line among the latest events.
NOT_RECENT = frozenset({ev.SAMPLE})
DEFAULT_SMOOTHING = 0.6


class HistoryLoad:
    """A run's history as the dashboard takes it: core's History plus the display series,
    built in the loading thread so that adopting it costs the UI nothing."""

    def __init__(self, history: History) -> None:
        self.metrics = history.metrics
        self.offset = history.offset
        self.recent = [e for e in history.recent if e.get("type") not in NOT_RECENT]
        self.display: dict[str, DisplaySeries] = {}
        for name in DISPLAYED:
            display = self.display[name] = DisplaySeries()
            series = self.metrics.series[name]
            display.fill(series.steps, series.values)


def load_history(path: Path, parallel: bool = False) -> HistoryLoad:
    """Every complete event of the run's file, read for display (call from a worker thread).

    `parallel` parses a long file on worker processes, leaving this process's GIL to the UI.
    """
    if parallel:
        history = event_history.load_history_parallel(path, RECENT_EVENTS, cached=True)
    else:
        history = event_history.load_history(path, RECENT_EVENTS, cached=True)
    loaded = HistoryLoad(history)
    # Reading the file allocated and freed several times what the metrics keep: give those
    # pages back, or the dashboard grows with every long run opened.
    release_freed_memory()
    return loaded


class DisplaySeries:
    """A growing series folded into at most `capacity` buckets for drawing.

    Each bucket covers `span` consecutive points and keeps the first and last step it covers,
    its minimum and maximum (and which came first), and the sum of its values. When the buckets
    outgrow the capacity, neighbours merge and the span doubles. Non-finite values are counted
    but not drawn.
    """

    def __init__(self, capacity: int = DISPLAY_BUCKETS) -> None:
        self.capacity = capacity
        self.clear()

    def clear(self) -> None:
        self.span = 1
        self.count = 0  # points folded in (the prefix of the source series consumed)
        self.last_step: int | None = None
        self.last_value: float | None = None
        self.first_steps: list[int] = []
        self.last_steps: list[int] = []
        self.lows: list[float] = []
        self.highs: list[float] = []
        self.low_first: list[bool] = []
        self.sums: list[float] = []
        self.sizes: list[int] = []  # points in each bucket, drawn or not
        self.finite: list[int] = []  # finite points in each bucket

    def __len__(self) -> int:
        return len(self.lows)

    # -- folding points in ----------------------------------------------------------------------

    def fill(self, steps, values) -> None:
        """Start again from whole columns (fast: one slice per bucket)."""
        self.clear()
        n = len(values)
        if not n:
            return
        span = 1
        while (n + span - 1) // span > self.capacity // 2:
            span *= 2
        self.span = span
        isfinite = math.isfinite
        for start in range(0, n, span):
            chunk = values[start:start + span]
            total = sum(chunk)
            if not isfinite(total):
                chunk = [v for v in chunk if isfinite(v)]
                if not chunk:
                    self._append_empty(steps[start], steps[min(start + span, n) - 1],
                                       min(span, n - start))
                    continue
                total = sum(chunk)
            low, high = min(chunk), max(chunk)
            self.first_steps.append(steps[start])
            self.last_steps.append(steps[min(start + span, n) - 1])
            self.lows.append(low)
            self.highs.append(high)
            # A level stretch (a constant learning rate, a peak that stopped growing) needs
            # no search for which extreme came first.
            self.low_first.append(low == high or chunk.index(low) <= chunk.index(high))
            self.sums.append(total)
            self.sizes.append(min(span, n - start))
            self.finite.append(len(chunk))
        self.count = n
        self.last_step = steps[n - 1]
        self.last_value = values[n - 1]

    def _append_empty(self, first: int, last: int, size: int) -> None:
        self.first_steps.append(first)
        self.last_steps.append(last)
        self.lows.append(math.nan)
        self.highs.append(math.nan)
        self.low_first.append(True)
        self.sums.append(0.0)
        self.sizes.append(size)
        self.finite.append(0)

    def add(self, step: int, value: float) -> None:
        self.count += 1
        self.last_step, self.last_value = step, value
        finite = math.isfinite(value)
        if self.sizes and self.sizes[-1] < self.span:
            i = len(self.sizes) - 1
            self.sizes[i] += 1
            self.last_steps[i] = step
            if not finite:
                return
            if not self.finite[i]:
                self.lows[i] = self.highs[i] = value
                self.low_first[i] = True
            elif value < self.lows[i]:
                self.lows[i] = value
                self.low_first[i] = False  # the new minimum comes after the maximum
            elif value > self.highs[i]:
                self.highs[i] = value
                self.low_first[i] = True
            self.sums[i] += value
            self.finite[i] += 1
            return
        if finite:
            self.first_steps.append(step)
            self.last_steps.append(step)
            self.lows.append(value)
            self.highs.append(value)
            self.low_first.append(True)
            self.sums.append(value)
            self.sizes.append(1)
            self.finite.append(1)
        else:
            self._append_empty(step, step, 1)
        if len(self.sizes) > self.capacity:
            self._halve()

    def _halve(self) -> None:
        """Merge neighbouring buckets; the span doubles."""
        merged = DisplaySeries(self.capacity)
        for i in range(0, len(self.sizes), 2):
            j = min(i + 1, len(self.sizes) - 1)
            idx = [k for k in {i, j} if self.finite[k]]
            merged.first_steps.append(self.first_steps[i])
            merged.last_steps.append(self.last_steps[j])
            merged.sizes.append(self.sizes[i] + (self.sizes[j] if j != i else 0))
            merged.finite.append(sum(self.finite[k] for k in {i, j}))
            merged.sums.append(sum(self.sums[k] for k in {i, j}))
            if not idx:
                merged.lows.append(math.nan)
                merged.highs.append(math.nan)
                merged.low_first.append(True)
                continue
            # Positions in time: bucket order first, then the order inside the bucket.
            lows = [(self.lows[k], (k, 0 if self.low_first[k] else 1)) for k in idx]
            highs = [(self.highs[k], (k, 1 if self.low_first[k] else 0)) for k in idx]
            low = min(lows, key=lambda item: item[0])
            high = max(highs, key=lambda item: item[0])
            merged.lows.append(low[0])
            merged.highs.append(high[0])
            merged.low_first.append(low[1] <= high[1])
        self.first_steps, self.last_steps = merged.first_steps, merged.last_steps
        self.lows, self.highs, self.low_first = merged.lows, merged.highs, merged.low_first
        self.sums, self.sizes, self.finite = merged.sums, merged.sizes, merged.finite
        self.span *= 2

    def follows(self, series: Series) -> bool:
        """True when the points folded in are still the start of `series` (no rewrite since)."""
        n = self.count
        if len(series) < n:
            return False
        if n == 0:
            return True
        return series.steps[n - 1] == self.last_step and (
            series.values[n - 1] == self.last_value
            or (series.values[n - 1] != series.values[n - 1] and self.last_value != self.last_value)
        )

    def sync(self, series: Series) -> None:
        """Bring the buckets up to date with the source series: append, or rebuild if rewritten."""
        if not self.follows(series):
            self.fill(series.steps, series.values)
            return
        steps, values = series.steps, series.values
        if len(series) - self.count > self.capacity * 4:
            self.fill(steps, values)
            return
        for i in range(self.count, len(series)):
            self.add(steps[i], values[i])

    # -- reading for display --------------------------------------------------------------------

    def in_order(self) -> list[float]:
        """Each bucket's extremes in the order they occurred (what a sparkline shows)."""
        out: list[float] = []
        for i in range(len(self.lows)):
            if not self.finite[i]:
                continue
            low, high = self.lows[i], self.highs[i]
            if low == high:
                out.append(low)
            elif self.low_first[i]:
                out += (low, high)
            else:
                out += (high, low)
        return out

    def points(self) -> list[tuple[float, float, float, float, bool]]:
        """(first step, last step, low, high, low first) of every drawable bucket."""
        return [(self.first_steps[i], self.last_steps[i], self.lows[i], self.highs[i],
                 self.low_first[i]) for i in range(len(self.lows)) if self.finite[i]]

    def smoothed(self, weight: float = DEFAULT_SMOOTHING) -> list[tuple[float, float]]:
        """(middle step, value) of the bucket means smoothed by an exponential moving average
        run forwards and then backwards (debiased at both ends).

        Two passes cancel the lag a one-way average has (on a falling loss it would sit above
        the data), and the line still ends on the latest figures. It runs over buckets, not raw
        points, so it costs one step per bucket and looks the same however often the trainer
        reports.
        """
        steps: list[float] = []
        means: list[float] = []
        for i in range(len(self.lows)):
            if self.finite[i]:
                steps.append((self.first_steps[i] + self.last_steps[i]) / 2)
                means.append(self.sums[i] / self.finite[i])
        if not weight or len(means) < 3:
            return list(zip(steps, means))
        forward = _ema(means, weight)
        backward = _ema(forward[::-1], weight)[::-1]
        return list(zip(steps, backward))

    def value_range(self) -> tuple[float, float] | None:
        finite_lows = [v for v, f in zip(self.lows, self.finite) if f]
        if not finite_lows:
            return None
        finite_highs = [v for v, f in zip(self.highs, self.finite) if f]
        return min(finite_lows), max(finite_highs)


def _ema(values: list[float], weight: float) -> list[float]:
    """Debiased exponential moving average (as TensorBoard smooths)."""
    out = []
    last = 0.0
    for n, value in enumerate(values, 1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight ** n))
    return out


class RunFeed:
    """One run's events as the dashboard keeps them: metrics, display series, latest events.

    Owned by the App's RunService (not by a screen), so it lives on while screens come and go.
    `version` grows with every change, for widgets that redraw only when something changed.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.metrics = new_metrics()
        self.offset = 0
        self.loaded = False
        self.following = False
        self.version = 0
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_EVENTS)
        self.display: dict[str, DisplaySeries] = {name: DisplaySeries() for name in DISPLAYED}

    def adopt(self, history: HistoryLoad) -> None:
        """Take the result of `load_history` (read in a worker thread)."""
        self.metrics = history.metrics
        self.offset = history.offset
        self.recent.clear()
        self.recent.extend(history.recent)
        self.display = history.display
        self.loaded = True
        self.version += 1

    def ingest(self, batch: list[dict[str, Any]]) -> None:
        """A burst of new events, in order."""
        if not batch:
            return
        restarted = any(e.get("type") == ev.STARTED for e in batch)
        self.metrics.ingest(batch)
        notable = [e for e in batch if e.get("type") != ev.TRAIN
                   and e.get("type") not in NOT_RECENT]
        if batch[-1].get("type") == ev.TRAIN:
            notable.append(batch[-1])
        elif any(e.get("type") == ev.TRAIN for e in batch):
            last_train = next(e for e in reversed(batch) if e.get("type") == ev.TRAIN)
            notable.insert(0, last_train)
        if self.recent and self.recent[-1].get("type") == ev.TRAIN:
            self.recent.pop()  # only the newest train event is worth a line
        self.recent.extend(notable)
        for name, display in self.display.items():
            series = self.metrics.series[name]
            if restarted:
                display.fill(series.steps, series.values)
            else:
                display.sync(series)
        self.version += 1

    @property
    def ended(self) -> bool:
        return self.metrics.terminal is not None
