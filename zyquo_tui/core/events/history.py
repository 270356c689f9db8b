"""A run's whole history, loaded fast: events.jsonl from the start into a RunMetrics.

A run can have 100,000 events and more. The train lines are read as typed columns by the fast
reader (core.events.fast_reader) and appended to the series whole, the series are kept as
typed arrays (16 bytes a point instead of about 60), and the result is exactly what
`RunMetrics.ingest` makes of the same events (tests/unit/test_metrics.py checks this). A long file
can be parsed on worker processes (core.system.file_workers), leaving the caller's thread,
and its Python lock, to the rest of the program.
"""

from __future__ import annotations

import operator
import os
import pickle
import time
from array import array
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.fast_reader import (
    FLOATS,
    INTEGERS,
    TRAIN_LINE_FIELDS,
    ParsedLines,
    TrainColumnReader,
    parse_lines,
    type_marker,
)
from zyquo_tui.core.events.metrics import SERIES_FIELDS, RunMetrics, Series
from zyquo_tui.core.events.metrics_cache import (
    NOTABLE_KEPT,
    FoldState,
    read_cache,
    write_cache,
)
from zyquo_tui.core.system.file_workers import (
    FileWorkers,
    WorkerFailed,
    line_aligned_ranges,
)

# Series filled from train lines: (field, series name); steps come from `iteration`.
# The series every train line holds (a preference run's optional ones come the careful way).
_TRAIN_SERIES = [(key, name) for name, (kind, key) in SERIES_FIELDS.items()
                 if kind == ev.TRAIN and key in TRAIN_LINE_FIELDS]
_READER = TrainColumnReader({"iteration": INTEGERS, **{key: FLOATS for key, _ in _TRAIN_SERIES}})
_STARTED = type_marker(ev.STARTED)

# A history is read in pieces of about this many bytes, letting other threads run between
# them: the regular expression and the number conversions hold the GIL while they work, and
# a program's other threads (the dashboard's event loop) must not stall meanwhile.
PIECE_BYTES = 512 * 1024
# Below this size a history is read in the calling process: starting processes costs more.
PARALLEL_MIN_BYTES = 4 * 1024 * 1024
# A history this long (about 4,000 events) is kept in a cache beside it (metrics.cache) when
# read with `cached`; it is rewritten when that many bytes more were read past it. A shorter
# one reads in a few tens of milliseconds.
CACHE_MIN_BYTES = 1024 * 1024
CACHE_REWRITE_BYTES = 1024 * 1024


class History:
    """A run's events read from the start of events.jsonl: the metrics, the offset the next
    read starts at (after the last complete line), and the newest events worth a line in a
    list of recent events (every type but train, and the newest train event)."""

    def __init__(self, metrics: RunMetrics, offset: int, recent: list[dict[str, Any]]) -> None:
        self.metrics = metrics
        self.offset = offset
        self.recent = recent


def compact(series: Series) -> None:
    """Keep a series' points in typed arrays (Series only needs append, slices and bisect)."""
    if not isinstance(series.steps, array):
        series.steps = array("q", series.steps)
        series.values = array("d", series.values)


def new_metrics() -> RunMetrics:
    """An empty RunMetrics whose series are typed arrays."""
    metrics = RunMetrics()
    for series in metrics.series.values():
        compact(series)
    return metrics


def load_history(path: Path, recent: int = 0, piece_bytes: int = PIECE_BYTES,
                 cached: bool = False) -> History:
    """Every complete event of the file, folded into a RunMetrics; a partial last line is left.

    `recent` is how many of the newest notable events to keep (History.recent). The file is
    read, parsed and folded a piece at a time: what is held meanwhile is the metrics and one
    piece, never the whole file or all its parsed pieces (memory a long-lived dashboard would
    otherwise keep from the system after each run it opens).

    `cached` starts from the fold kept beside the file (core.events.metrics_cache) when it
    still holds, reading only the lines appended since, and keeps the new fold there when the
    file is long enough for that to matter.
    """
    return _load(path, recent, piece_bytes, read_cache(path, recent) if cached else None,
                 cached)


def _load(path: Path, recent: int, piece_bytes: int, start: FoldState | None,
          cached: bool) -> History:
    end = complete_size(path)
    if start is not None and start.offset > end:
        start = None
    begin = start.offset if start is not None else 0
    state = _folded(_parsed(_file_pieces_of_range(path, begin, end, piece_bytes)), end,
                    _kept(recent, cached), start)
    if cached:
        _keep(path, state, begin if start is not None else None)
    return _history(state, recent)


def load_history_parallel(path: Path, recent: int = 0, parts: int | None = None,
                          min_bytes: int = PARALLEL_MIN_BYTES, cached: bool = False) -> History:
    """load_history with the parsing spread over worker processes (files of `min_bytes` up).

    Parsing 100,000 events holds the GIL for about a third of a second; in worker processes
    it runs on other cores. The file is cut into `parts` byte ranges of whole lines (by
    default one for this thread and one per spare core, at most four in all): this thread
    parses the first, a short one, while a worker process parses each of the others and
    sends back its pieces pickled (typed arrays, a few MB); each is folded here as it comes,
    in order. Without a spare core, workers would only queue for the busy ones and add their
    start-up, so the file is read here. A worker that fails sends the reading back into this
    thread. `cached` as for load_history: a cache that holds leaves only the lines appended
    since to read, here.
    """
    start = read_cache(path, recent) if cached else None
    if start is not None:
        return _load(path, recent, PIECE_BYTES, start, cached)
    end = complete_size(path)
    parts = parts or 1 + min(3, spare_cores())
    if end < min_bytes or parts < 2:
        return load_history(path, recent, cached=cached)
    # This thread's share is half a worker's: it shares the GIL with the program's other
    # threads, and it folds everything afterwards; a worker has only its start-up to pay.
    cuts = line_aligned_ranges(path, 2 * parts - 1, end)
    here, rest = cuts[0], cuts[1:]
    ranges = [(first[0], last[1]) for first, last in zip(rest[::2], rest[1::2] + rest[-1:])]
    try:
        with FileWorkers(f"{__name__}:parse_range_worker", path, ranges, {},
                         timeout=120) as running:
            def in_order() -> Iterator[ParsedLines]:
                yield from _parsed(_file_pieces_of_range(path, *here))
                for output in running.outputs():
                    yield from pickle.load(output)
            state = _folded(in_order(), end, _kept(recent, cached))
    except (WorkerFailed, OSError, EOFError, pickle.UnpicklingError):
        return load_history(path, recent, cached=cached)
    if cached:
        _keep(path, state, None)
    return _history(state, recent)


def _kept(recent: int, cached: bool) -> int:
    """How many notable events the fold keeps: a cached fold keeps as many as any reader
    asks for (NOTABLE_KEPT), so one cache serves them all."""
    return max(recent, NOTABLE_KEPT) if cached else recent


def keep_cache(path: Path) -> None:
    """Bring the cache beside a run's events.jsonl up to date (when the run has ended, so
    that its first opening is as quick as the next)."""
    load_history(path, cached=True)


def _keep(path: Path, state: FoldState, cached_from: int | None) -> None:
    """Write the cache when the file is long enough to be slow to read, and the cache is
    missing or short of it by more than a quick read (a followed run grows all the time)."""
    if state.offset < CACHE_MIN_BYTES:
        return
    if cached_from is not None and state.offset - cached_from < CACHE_REWRITE_BYTES:
        return
    write_cache(path, state)


def spare_cores() -> int:
    """Cores no process is using now, going by the 1-minute load average."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average here: take the machine as free
        load = 0.0
    return max(0, int((os.cpu_count() or 1) - load))


def parse_range_worker(task: dict[str, Any], out: BinaryIO) -> None:
    """A worker's part (core.system.file_workers): its range's pieces, pickled."""
    data = _read_range(Path(task["path"]), task["start"], task["end"])
    pieces = parse_range(data, piece_bytes=1 << 62, pause=False)
    pickle.dump(pieces, out, protocol=pickle.HIGHEST_PROTOCOL)


def parse_range(data: bytes, piece_bytes: int = PIECE_BYTES, pause: bool = True
                ) -> list[ParsedLines]:
    """Whole lines cut into pieces at sessions and about every `piece_bytes`, parsed.

    `pause` lets other threads run between pieces.
    """
    pieces = (piece for segment in _sessions(data) for piece in _pieces(segment, piece_bytes))
    return list(_parsed(pieces, pause))


def _parsed(pieces: Iterable[bytes], pause: bool = True) -> Iterator[ParsedLines]:
    for piece in pieces:
        yield _parse_piece(piece)
        if pause:
            time.sleep(0)


def _parse_piece(piece: bytes) -> ParsedLines:
    parsed = _READER.read(piece)
    if parsed.events is None:
        # The fold applies a piece's `started` event before its train columns; a piece begins
        # with its only one, unless one was written in another shape (not cut at): then the
        # piece is read line by line.
        starts = sum(e.get("type") == ev.STARTED for e in parsed.others)
        if starts > (_STARTED in piece[:piece.find(b"\n")]):
            return ParsedLines(events=parse_lines(piece.split(b"\n")))
    return parsed


def fold(pieces: Iterable[ParsedLines], offset: int, recent: int = 0,
         start: FoldState | None = None) -> History:
    """Apply parsed pieces in file order, with RunMetrics' rules (a `started` event with
    resumed_from_step drops the later points of the earlier session); from `start`, the fold
    of the lines before the pieces, when given."""
    return _history(_folded(pieces, offset, recent, start), recent)


def _folded(pieces: Iterable[ParsedLines], offset: int, recent: int,
            start: FoldState | None = None) -> FoldState:
    if start is None:
        start = FoldState(new_metrics(), deque(maxlen=recent), None, 0)
    metrics, notable, last_train = start.metrics, start.notable, start.last_train
    for piece in pieces:
        last_train = _fold_piece(metrics, piece, notable) or last_train
    return FoldState(metrics, notable, last_train, offset)


def _history(state: FoldState, recent: int) -> History:
    notable = deque(state.notable, maxlen=recent)
    if state.last_train is not None and recent:
        notable.append(state.last_train)  # only the newest train event is worth a line
    ordered = sorted(notable, key=lambda e: (e.get("time") or 0))
    return History(state.metrics, state.offset, ordered)


def complete_size(path: Path) -> int:
    """The length of the file up to and including its last newline (0 when it is missing)."""
    try:
        with open(path, "rb") as handle:
            position = handle.seek(0, os.SEEK_END)
            while position > 0:
                start = max(0, position - 65536)
                handle.seek(start)
                chunk = handle.read(position - start)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    return start + newline + 1
                position = start
            return 0
    except FileNotFoundError:
        return 0


def _file_pieces_of_range(path: Path, start: int, end: int, size: int = PIECE_BYTES
                          ) -> Iterator[bytes]:
    """The whole lines from `start` to `end` in pieces of about `size` bytes, each cut before
    a `started` line (a resumed session rewrites later steps, so the fold applies a piece's
    `started` first)."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return
    with handle:
        handle.seek(start)
        carried = b""
        left = end - start
        while left > 0:
            block = handle.read(min(size, left))
            if not block:  # the file was cut short meanwhile
                return
            left -= len(block)
            data = carried + block
            cut = data.rfind(b"\n") + 1 if left > 0 else len(data)
            carried = data[cut:]
            yield from _sessions(data[:cut])


def _read_range(path: Path, start: int, stop: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(start)
        return handle.read(stop - start)


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


def _fold_piece(metrics: RunMetrics, piece: ParsedLines, notable: deque) -> dict | None:
    """Fold one parsed piece into `metrics`; events worth a line go to `notable`. Returns the
    last train event of the piece, if any."""
    if piece.events is not None:
        metrics.ingest(piece.events)
        notable.extend(e for e in piece.events if e.get("type") != ev.TRAIN)
        trains = [e for e in piece.events if e.get("type") == ev.TRAIN]
        return trains[-1] if trains else None
    others = piece.others
    if not piece.train_count:
        metrics.ingest(others)
        notable.extend(others)
        return None
    columns = piece.columns
    steps = columns["iteration"]
    started = [e for e in others if e.get("type") == ev.STARTED]
    rest = [e for e in others if e.get("type") != ev.STARTED]
    metrics.ingest(started)  # truncates the series for a resumed session
    read = [(key, name) for key, name in _TRAIN_SERIES if key in columns]
    if not _extend_in_order(metrics, steps, columns, read):
        for i, step in enumerate(steps):
            for key, name in read:
                metrics.series[name].add(step, columns[key][i])
    metrics.ingest(rest)
    # Where the last train event stands among the others decides the step and the time, as
    # ingesting them one by one would: the last train sets the step, later checkpoints can
    # raise it; the last event with a time sets the time.
    after = piece.after_last_train
    metrics.step = max([steps[-1]] + [e["iteration"] for e in after
                                      if e.get("type") == ev.CHECKPOINT
                                      and isinstance(e.get("iteration"), int)])
    if not any("time" in e for e in after):
        metrics.last_time = piece.last_train.get("time", metrics.last_time)
    metrics.events_seen += len(steps)
    notable.extend(others)
    return piece.last_train


def _extend_in_order(metrics: RunMetrics, steps: array, columns: dict[str, array],
                     read: list[tuple[str, str]]) -> bool:
    """Append whole columns (the `read` (field, series name) pairs) when the steps rise
    strictly past what the series hold."""
    if not all(map(operator.lt, steps, steps[1:])):
        return False
    for _, name in read:
        series = metrics.series[name]
        compact(series)
        if series.steps and steps[0] <= series.steps[-1]:
            return False
    for key, name in read:
        series = metrics.series[name]
        series.steps.extend(steps)
        series.values.extend(columns[key])
    return True
