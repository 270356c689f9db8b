"""A fast reader of whole lines of events.jsonl: train events as typed columns, no JSON parse.

A long run is nearly all `train` lines, and the trainer writes every one in the same shape. A
regular expression built from that shape (core.events.protocol: the envelope, the train
fields in their written order, the separators) takes the wanted fields of all of them in one
pass, and they are converted column by column into typed arrays (16 bytes a point instead of
about 60 for a float in a list). Lines of other types are parsed one by one as JSON. When
some train line has another shape (another order, a field more or less, a value that is not a
number), the whole piece is parsed with the tolerant reader's rules instead, so the result is
always what the tolerant reader makes of the same lines.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterable, Mapping
from itertools import chain
from typing import Any

from zyquo_tui.core.events import protocol as ev


def _key(name: str) -> bytes:
    return (json.dumps(name) + ev.KEY_SEPARATOR).encode()


def type_marker(type_: str) -> bytes:
    """How an event's type reads in its line, wherever the line has it."""
    return _key("type") + json.dumps(type_).encode()


_ITEM = ev.ITEM_SEPARATOR.encode()
# The start of any line as the writer writes it, up to the type's value.
_TYPE_PREFIX = b"{" + _key("v") + json.dumps(ev.PROTOCOL_VERSION).encode() + _ITEM + _key("type")
TRAIN_PREFIX = _TYPE_PREFIX + json.dumps(ev.TRAIN).encode() + _ITEM
# To count train lines of any shape.
_TRAIN_TYPE = type_marker(ev.TRAIN)
# A line of any other type as the writer writes it.
_OTHER_LINE = re.compile(re.escape(_TYPE_PREFIX) + rb'"(?!' + re.escape(ev.TRAIN.encode())
                         + rb'")[^\n]*\n')

# The fields a train line holds, envelope time included, in the order they are written.
# (A preference run's lines carry its metrics too, and a distributed run's each rank's peak:
# they are read the careful way.)
TRAIN_LINE_FIELDS = ("time",) + tuple(field.name for field in ev.EVENT_FIELDS[ev.TRAIN]
                                      if field.name not in ev.SOME_RUNS_TRAIN_FIELDS)
# Those of them a line may leave out (written where they can be read).
OPTIONAL_TRAIN_LINE_FIELDS = frozenset(field.name for field in ev.EVENT_FIELDS[ev.TRAIN]
                                       if field.optional and field.name in TRAIN_LINE_FIELDS)
# Array type codes a column may be read into.
INTEGERS, FLOATS = "q", "d"
_CONVERT = {INTEGERS: int, FLOATS: float}


def train_line_pattern(captured: Iterable[str]) -> re.Pattern[bytes]:
    """A train line exactly as the writer writes it, with a group for each `captured` field.

    A field the protocol calls optional (left out by some writers, such as the peak resident
    footprint before it was recorded) may be absent; its group is then empty. A value is
    anything up to the next separator or the closing brace on the same line; the conversion
    to its column decides whether it is a number (a string, null or nested value raises
    there, and the lines are read the careful way).
    """
    wanted = set(captured)
    # A negated character class matches fastest. A value cannot run into the next line.
    value = rb"[^,}\n]+"
    parts = [re.escape(TRAIN_PREFIX)]
    for position, name in enumerate(TRAIN_LINE_FIELDS):
        field = re.escape(_key(name)) + (b"(" + value + b")" if name in wanted else value)
        if position:
            field = re.escape(_ITEM) + field
        if name in OPTIONAL_TRAIN_LINE_FIELDS:
            field = b"(?:" + field + b")?"
        parts.append(field)
    parts.append(rb"\}\n")
    return re.compile(b"".join(parts))


class ParsedLines:
    """Whole lines of events.jsonl, parsed: the train events as `columns` (field name to a
    typed array, in file order) and `last_train` (the last one, whole), every other event as
    a dict in `others`, in file order, the last `trailing` of them written after `last_train`.
    When some line was not in the writer's shape, `events` holds every event instead, in file
    order, and the other attributes are empty."""

    __slots__ = ("columns", "others", "last_train", "trailing", "events")

    def __init__(self, columns: dict[str, array] | None = None,
                 others: list[dict[str, Any]] | None = None,
                 last_train: dict[str, Any] | None = None, trailing: int = 0,
                 events: list[dict[str, Any]] | None = None) -> None:
        self.columns = columns or {}
        self.others = others or []
        self.last_train = last_train
        self.trailing = trailing
        self.events = events

    def __getstate__(self):
        return (self.columns, self.others, self.last_train, self.trailing, self.events)

    def __setstate__(self, state) -> None:
        self.columns, self.others, self.last_train, self.trailing, self.events = state

    @property
    def train_count(self) -> int:
        return len(next(iter(self.columns.values()), ()))

    @property
    def after_last_train(self) -> list[dict[str, Any]]:
        """The other events written after the last train event."""
        return self.others[len(self.others) - self.trailing:]


class TrainColumnReader:
    """Reads pieces of whole lines, taking the `columns` fields of train lines as typed arrays.

    `columns` maps a field of TRAIN_LINE_FIELDS to its array type code (INTEGERS or FLOATS).
    """

    def __init__(self, columns: Mapping[str, str]) -> None:
        unknown = set(columns) - set(TRAIN_LINE_FIELDS)
        if unknown or not columns:
            raise ValueError(f"train lines have no field {sorted(unknown)}" if unknown
                             else "no column to read")
        self.names = [name for name in TRAIN_LINE_FIELDS if name in columns]
        self.codes = [columns[name] for name in self.names]
        self.pattern = train_line_pattern(self.names)

    def read(self, piece: bytes) -> ParsedLines:
        """Parse `piece`, whole lines (each ending with a newline) of an events file."""
        matches = self.pattern.findall(piece)
        other_lines = _OTHER_LINE.findall(piece)
        train_starts = _lines_starting(piece, TRAIN_PREFIX)
        # The fast way holds when every line starts as the writer starts a line, every line
        # starting as a train line matches in full, the train type appears nowhere else, and
        # the other lines are the rest: then each match is exactly one line. Anything else
        # (another order, a field more or less, other separators, a blank or broken line)
        # sends the piece the careful way, line by line.
        if not (len(matches) == train_starts == piece.count(_TRAIN_TYPE)
                and len(matches) + len(other_lines) == piece.count(b"\n")
                == _lines_starting(piece, _TYPE_PREFIX)):
            return ParsedLines(events=parse_lines(piece.split(b"\n")))
        others = parse_lines(other_lines)
        if any(event["type"] == ev.TRAIN for event in others):
            # A train type spelled another way (escaped): the columns would take it out of
            # order.
            return ParsedLines(events=parse_lines(piece.split(b"\n")))
        if not matches:
            return ParsedLines(others=others)
        try:
            columns = self._columns(matches)
        except ValueError:  # a null or a string where a number was: the careful way decides
            return ParsedLines(events=parse_lines(piece.split(b"\n")))
        last_start = piece.rfind(TRAIN_PREFIX)
        last_end = piece.index(b"\n", last_start)
        last_train = json.loads(piece[last_start:last_end])
        trailing = len(parse_lines(piece[last_end + 1:].split(b"\n")))
        return ParsedLines(columns, others, last_train, trailing)

    def _columns(self, matches: list) -> dict[str, array]:
        """The captured fields as typed arrays; an optional field no line of the piece holds
        has no column. Raises ValueError for a value that is no number, and for an optional
        field some lines hold and others not (the careful way keeps each line's own)."""
        count = len(self.names)
        # findall gives a tuple per line; one flat list sliced per field is cheaper than zip.
        flat = matches if count == 1 else list(chain.from_iterable(matches))
        columns = {}
        for index, (name, code) in enumerate(zip(self.names, self.codes)):
            texts = flat[index::count]
            if name in OPTIONAL_TRAIN_LINE_FIELDS:
                absent = texts.count(b"")
                if absent == len(texts):
                    continue
                if absent:
                    raise ValueError(f"{name} in some lines only")
            columns[name] = array(code, _converted(texts, _CONVERT[code]))
        return columns


def _converted(texts: list[bytes], convert) -> Iterable[float | int]:
    """`texts` as numbers, each distinct text converted once when they repeat.

    A long run repeats some figures for thousands of reports (a constant learning rate, a
    peak memory that stopped growing); a number's conversion costs several times a lookup.
    """
    # A look at the first few first, so that a column of distinct figures (the loss) costs
    # no set of all its texts.
    if len(set(texts[:64])) > 16:
        return map(convert, texts)
    distinct = set(texts)
    if len(distinct) * 4 > len(texts):
        return map(convert, texts)
    numbers = {text: convert(text) for text in distinct}
    return map(numbers.__getitem__, texts)


def _lines_starting(piece: bytes, prefix: bytes) -> int:
    return piece.count(b"\n" + prefix) + piece.startswith(prefix)


def parse_lines(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """Lines parsed as JSON with the tolerant reader's rules: blank lines, lines that are not
    JSON and objects without a string `type` are skipped."""
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
