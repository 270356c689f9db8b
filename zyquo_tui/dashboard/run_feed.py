"""RunFeed: what the dashboard holds of one run's events, cheap to draw however long the run.

A run can have 100,000 events and more. Three things keep the dashboard quick with that:

- `load_history` reads a whole events.jsonl with one regular expression for the train events
  (the trainer writes them in one fixed shape) instead of a JSON parse per line, and stores the
  series as typed arrays (16 bytes a point instead of about 60). Any line it does not recognise
  goes through the ordinary event parser, so the result is exactly what `RunMetrics` makes of
  the same events (tests/test_dashboard_units.py checks this).
- `DisplaySeries` folds each series into at most `DISPLAY_BUCKETS` buckets as points arrive,
  keeping every bucket's minimum and maximum in the order they occurred (so a spike or a dip is
  never lost) and its mean (for the smoothed line). A redraw walks the buckets, not the points.
- Live events arrive in bursts (one list per read); a burst is ingested at once and the UI is
  told once.

No Textual here: this module is plain Python over core.
"""

from __future__ import annotations

import json
import math
import operator
import os
import re
import time
from array import array
from collections import deque
from pathlib import Path
from typing import Any, Iterable

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.metrics import RunMetrics, Series

DISPLAY_BUCKETS = 1024
RECENT_EVENTS = 40
# Series the run screen draws. Smoothing applies to the noisy per-report figures only:
# validation loss is already an average over val_batches and comes rarely; the learning rate
# and peak memory are exact.
DISPLAYED = ("train_loss", "val_loss", "tokens_per_second", "learning_rate", "peak_memory_bytes")
SMOOTHABLE = frozenset({"train_loss", "tokens_per_second"})
DEFAULT_SMOOTHING = 0.6

# A train event exactly as the trainer writes it (core.events.make_event + the loop's report),
# one per line. Lines of any other shape are parsed as JSON.
_TRAIN_PREFIX = b'{"v": 1, "type": "train", '
_TRAIN_LINE = re.compile(
    rb'\{"v": 1, "type": "train", "time": ([^,]+), "iteration": (-?\d+), '
    rb'"train_loss": ([^,]+), "learning_rate": ([^,]+), "iterations_per_second": ([^,]+), '
    rb'"tokens_per_second": ([^,]+), "trained_tokens": [^,]+, "peak_memory_bytes": ([^,}]+)\}\n'
)
# Series filled from the groups of _TRAIN_LINE: (series name, group index after time/iteration)
_TRAIN_GROUPS = (("train_loss", 2), ("learning_rate", 3), ("iterations_per_second", 4),
                 ("tokens_per_second", 5), ("peak_memory_bytes", 6))
# Any other event as the trainer writes it (val, checkpoint, warning, started, the end).
_OTHER_LINE = re.compile(rb'\{"v": 1, "type": "(?!train")[^\n]*\n')
_STARTED = b'"type": "started"'
_TRAIN_TYPE = b'"type": "train"'


def _compact(series: Series) -> None:
    """Keep a series' points in typed arrays (Series only needs append, slices and bisect)."""
    if not isinstance(series.steps, array):
        series.steps = array("q", series.steps)
        series.values = array("d", series.values)


def new_metrics() -> RunMetrics:
    metrics = RunMetrics()
    for series in metrics.series.values():
        _compact(series)
    return metrics


# A history is read in pieces of about this many bytes, letting other threads run between
# them: the regular expression and the number conversions hold the GIL while they work, and
# the dashboard's event loop must not stall while a long run loads in a worker thread.
PIECE_BYTES = 512 * 1024


class HistoryLoad:
    """The result of reading a run's events file from the start, display series included."""

    def __init__(self, metrics: RunMetrics, offset: int, recent: list[dict[str, Any]]) -> None:
        self.metrics = metrics
        self.offset = offset
        self.recent = recent
        self.display: dict[str, DisplaySeries] = {}
        for name in DISPLAYED:
            display = self.display[name] = DisplaySeries()
            series = metrics.series[name]
            display.fill(series.steps, series.values)


class ParsedPiece:
    """Whole lines of an events file, parsed but not yet folded into a RunMetrics: the train
    events as typed columns, every other event as a dict. `events` instead holds every event
    when the piece had lines the fast path does not know."""

    __slots__ = ("others", "steps", "values", "last_time", "events")

    def __init__(self, others: list[dict[str, Any]], steps: array | None = None,
                 values: dict[str, array] | None = None, last_time: float | None = None,
                 events: list[dict[str, Any]] | None = None) -> None:
        self.others = others
        self.steps = steps
        self.values = values
        self.last_time = last_time
        self.events = events

    def __getstate__(self):
        return (self.others, self.steps, self.values, self.last_time, self.events)

    def __setstate__(self, state) -> None:
        self.others, self.steps, self.values, self.last_time, self.events = state


def parse_piece(piece: bytes) -> ParsedPiece:
    """Parse a run of whole lines (pure: no metrics involved, so it can run anywhere)."""
    matches = _TRAIN_LINE.findall(piece)
    if len(matches) != piece.count(_TRAIN_TYPE):
        # Some train line has another shape (a newer writer, extra fields): parse it all.
        return ParsedPiece([], events=_parse_lines(piece.split(b"\n")))
    other_lines = _OTHER_LINE.findall(piece)
    if len(matches) + len(other_lines) != piece.count(b"\n"):
        # Lines in another shape (or blank): sort them out one by one.
        other_lines = [line for line in piece.split(b"\n")
                       if line and not line.startswith(_TRAIN_PREFIX)]
    others = _parse_lines(other_lines)
    if not matches:
        return ParsedPiece(others)
    columns = list(zip(*matches))
    try:
        steps = array("q", map(int, columns[1]))
        values = {name: array("d", map(float, columns[group])) for name, group in _TRAIN_GROUPS}
        last_time = float(columns[0][-1])
    except ValueError:  # a null or an odd number: let the ordinary parser decide
        return ParsedPiece([], events=_parse_lines(piece.split(b"\n")))
    return ParsedPiece(others, steps, values, last_time)


def parse_range(data: bytes, piece_bytes: int = PIECE_BYTES, pause: bool = True
                ) -> list[ParsedPiece]:
    """Whole lines cut into pieces at sessions and about every `piece_bytes`, parsed."""
    parsed = []
    for segment in _sessions(data):
        for piece in _pieces(segment, piece_bytes):
            parsed.append(parse_piece(piece))
            if pause:
                time.sleep(0)  # let the event loop run
    return parsed


def fold(pieces: Iterable[ParsedPiece], offset: int) -> HistoryLoad:
    """Apply parsed pieces in file order, with RunMetrics' rules (a `started` event with
    resumed_from_step drops the later points of the earlier session)."""
    metrics = new_metrics()
    recent: deque[dict[str, Any]] = deque(maxlen=RECENT_EVENTS)
    last_train = None
    for piece in pieces:
        last_train = _fold_piece(metrics, piece, recent) or last_train
    if last_train is not None:  # only the newest train event is worth a line
        recent.append(last_train)
    ordered = sorted(recent, key=lambda e: (e.get("time") or 0))
    return HistoryLoad(metrics, offset, ordered)


def _read_complete(path: Path) -> tuple[bytes, int]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return b"", 0
    end = data.rfind(b"\n") + 1
    return data[:end], end


def load_history(path: Path, piece_bytes: int = PIECE_BYTES) -> HistoryLoad:
    """Every complete event of the file, folded into a RunMetrics; a partial last line is left."""
    data, end = _read_complete(path)
    return fold(parse_range(data, piece_bytes), end)


def _pieces(segment: bytes, size: int) -> Iterable[bytes]:
    """A session cut at line ends into pieces of about `size` bytes (the first piece holds
    its `started` line, so a resume rule applies once)."""
    start = 0
    while start < len(segment):
        stop = segment.find(b"\n", start + size)
        stop = len(segment) if stop < 0 else stop + 1
        yield segment[start:stop]
        start = stop


def _sessions(data: bytes) -> Iterable[bytes]:
    """The data cut before each `started` line: a resumed session rewrites later steps."""
    cuts = [0]
    position = data.find(_STARTED)
    while position >= 0:
        line_start = data.rfind(b"\n", 0, position) + 1
        if line_start > cuts[-1]:
            cuts.append(line_start)
        position = data.find(_STARTED, position + len(_STARTED))
    cuts.append(len(data))
    for start, stop in zip(cuts, cuts[1:]):
        if stop > start:
            yield data[start:stop]


def _parse_lines(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    parsed = []
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            parsed.append(event)
    return parsed


def _fold_piece(metrics: RunMetrics, piece: ParsedPiece, recent: deque) -> dict | None:
    """Fold one parsed piece into `metrics`; notable events go to `recent`. Returns the last
    train event of the piece, if any."""
    if piece.events is not None:
        metrics.ingest(piece.events)
        recent.extend(e for e in piece.events if e.get("type") != ev.TRAIN)
        trains = [e for e in piece.events if e.get("type") == ev.TRAIN]
        return trains[-1] if trains else None
    others = piece.others
    steps, values = piece.steps, piece.values
    if steps is None or values is None:
        metrics.ingest(others)
        recent.extend(others)
        return None
    started = [e for e in others if e.get("type") == ev.STARTED]
    rest = [e for e in others if e.get("type") != ev.STARTED]
    metrics.ingest(started)  # truncates the series for a resumed session
    if not _extend_in_order(metrics, steps, values):
        for i, step in enumerate(steps):
            for name, column in values.items():
                metrics.series[name].add(step, column[i])
    metrics.ingest(rest)
    metrics.step = max(metrics.step, steps[-1])
    if metrics.last_time is None or piece.last_time > metrics.last_time:
        metrics.last_time = piece.last_time
    metrics.events_seen += len(steps)
    recent.extend(others)
    return {"v": 1, "type": ev.TRAIN, "time": piece.last_time, "iteration": steps[-1],
            "train_loss": values["train_loss"][-1],
            "tokens_per_second": values["tokens_per_second"][-1]}


def _extend_in_order(metrics: RunMetrics, steps: array, values: dict[str, array]) -> bool:
    """Append whole columns when the steps rise strictly past what the series hold."""
    if not all(map(operator.lt, steps, steps[1:])):
        return False
    for name, column in values.items():
        series = metrics.series[name]
        _compact(series)
        if series.steps and steps[0] <= series.steps[-1]:
            return False
    for name, column in values.items():
        series = metrics.series[name]
        series.steps.extend(steps)
        series.values.extend(column)
    return True


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
            self.low_first.append(chunk.index(low) <= chunk.index(high))
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
        notable = [e for e in batch if e.get("type") != ev.TRAIN]
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


# -- reading a long history on other cores -----------------------------------------------------

# Below this size a history is read in the calling thread: starting processes costs more.
PARALLEL_MIN_BYTES = 4 * 1024 * 1024
_PACKAGE_PARENT = Path(__file__).resolve().parent.parent
_WORKER_CODE = "from zyquo_tui.dashboard.run_feed import _parse_worker; _parse_worker()"


def load_history_parallel(path: Path, workers: int | None = None) -> HistoryLoad:
    """load_history with the parsing spread over worker processes (a long history only).

    Parsing 100,000 events holds the GIL for about half a second on a slow core; in worker
    processes it runs on the other cores and leaves the dashboard's event loop alone. Each
    worker parses a byte range of whole lines and sends back its pieces pickled (typed
    arrays, a few MB); they are folded here, in order. Any failure falls back to reading in
    this process.
    """
    data, end = _read_complete(path)
    if len(data) < PARALLEL_MIN_BYTES:
        return fold(parse_range(data), end)
    import pickle
    import subprocess
    import sys

    workers = workers or max(1, min(4, os.cpu_count() or 1))
    bounds = [0]
    for i in range(1, workers):
        cut = data.find(b"\n", len(data) * i // workers)
        if cut < 0 or cut + 1 <= bounds[-1]:
            continue
        bounds.append(cut + 1)
    bounds.append(len(data))
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(_PACKAGE_PARENT), os.environ.get("PYTHONPATH")]))
    processes = []
    try:
        for start, stop in zip(bounds, bounds[1:]):
            processes.append(subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(path), str(start), str(stop)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=environment))
        pieces: list[ParsedPiece] = []
        for process in processes:
            output, _ = process.communicate(timeout=120)
            if process.returncode != 0:
                raise RuntimeError(f"worker exited with {process.returncode}")
            pieces.extend(pickle.loads(output))
    except Exception:  # a worker that could not run: read it all here instead
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        return fold(parse_range(data), end)
    return fold(pieces, end)


def _parse_worker() -> None:
    import pickle
    import sys

    path, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(stop - start)
    pieces = parse_range(data, piece_bytes=1 << 62, pause=False)
    sys.stdout.buffer.write(pickle.dumps(pieces, protocol=pickle.HIGHEST_PROTOCOL))
