"""The event protocol: one JSON object per line in a run's events.jsonl (docs/EVENTS.md).

This module is the one definition of the line format: the version, the types, each type's
fields in the order the writer writes them, and the separators it writes between them. Every
event is `{"v": 1, "type": ..., "time": <unix seconds>}` followed by the fields of its type.
The trainer writes; any process reads. Readers skip unknown types and fields, skip lines that
are not JSON objects, and leave a partial last line (a write in progress) for the next read.
A faster reader (core.events.fast_reader) is derived from the definitions below.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

PROTOCOL_VERSION = 1

STARTED = "started"
TRAIN = "train"
VAL = "val"
CHECKPOINT = "checkpoint"
WARNING = "warning"
SAMPLE = "sample"
EVAL = "eval"
STEP_DOWN = "step_down"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"

TERMINAL_TYPES = frozenset({COMPLETED, FAILED, CANCELLED})
KNOWN_TYPES = frozenset({STARTED, TRAIN, VAL, CHECKPOINT, WARNING, SAMPLE, EVAL, STEP_DOWN}) \
    | TERMINAL_TYPES

# Failure causes carried by `failed` events and run.json.
FAILURE_CAUSES = ("oom", "nan", "data", "config", "dependency", "internal", "killed", "disk",
                  "rank_lost", "reward", "program")

# What the writer puts between items and between a key and its value (json.dumps' defaults,
# named because a fast reader matches the written text).
ITEM_SEPARATOR = ", "
KEY_SEPARATOR = ": "
# The fields every event starts with, in this order.
ENVELOPE = ("v", "type", "time")


@dataclass(frozen=True)
class Field:
    """One field of an event type: its name, the Python types its JSON value takes, and
    whether some events of the type leave it out."""

    name: str
    kinds: tuple[type, ...]
    optional: bool = False


_INT, _FLOAT, _STR = (int,), (float,), (str,)
_NONE = type(None)

# What a preference run (objective dpo or orpo) adds to its train and val events: means over
# the report window (train) or the validation batches (val) of per-row figures.
PREFERENCE_METRICS = ("reward_margin", "reward_accuracy", "chosen_reward", "rejected_reward")
PREFERENCE_FIELDS = tuple(Field(name, _FLOAT, optional=True) for name in PREFERENCE_METRICS)

# What a grpo run adds to its train events (means over the report window's steps): its sampled
# answers' weighted total reward (mean, and spread within groups), the mean per-token KL to the
# reference, the answers' mean length in tokens and the share of clipped answer tokens; and
# REWARD_MEANS, each reward function's unweighted mean by its name in the run's settings.
GRPO_METRICS = ("reward_mean", "reward_std", "kl", "completion_length", "clip_fraction")
REWARD_MEANS = "reward_means"
GRPO_FIELDS = (*(Field(name, _FLOAT, optional=True) for name in GRPO_METRICS),
               Field(REWARD_MEANS, (dict,), optional=True))

# What a distributed run's train events add: each rank's peak memory.
RANK_PEAKS = "rank_peak_memory_bytes"
# Train fields only some runs write (a preference or grpo run's metrics, a distributed run's
# peaks).
SOME_RUNS_TRAIN_FIELDS = (*PREFERENCE_METRICS, *GRPO_METRICS, REWARD_MEANS, RANK_PEAKS)

# Each type's fields, after the envelope, in the order they are written.
EVENT_FIELDS: dict[str, tuple[Field, ...]] = {
    STARTED: (
        Field("pid", _INT), Field("host", _STR), Field("versions", (dict,)),
        Field("device", _STR), Field("parameters", (dict,)), Field("dataset", (dict,)),
        Field("iters", _INT), Field("resumed_from_step", (int, _NONE)), Field("config", (dict,)),
        # the processes training the run together (mlx.launch); left out by older writers
        Field("world_size", _INT, optional=True),
        # the train split's longest tokenized row (a prompt's, a pair's longer side); null
        # with no rows; left out by older writers (core/memory/run_gate.py)
        Field("longest_row_tokens", (int, _NONE), optional=True),
    ),
    TRAIN: (
        Field("iteration", _INT), Field("train_loss", _FLOAT), Field("learning_rate", _FLOAT),
        Field("iterations_per_second", _FLOAT), Field("tokens_per_second", _FLOAT),
        Field("trained_tokens", _INT), Field("peak_memory_bytes", _INT),
        # the process's peak resident footprint (getrusage); absent where it cannot be read
        Field("peak_rss_bytes", _INT, optional=True),
        *PREFERENCE_FIELDS,
        *GRPO_FIELDS,
        # a distributed run's: every rank's MLX peak, by rank (peak_memory_bytes is rank 0's)
        Field(RANK_PEAKS, (list,), optional=True),
    ),
    VAL: (Field("iteration", _INT), Field("val_loss", _FLOAT), Field("val_time", _FLOAT),
          *PREFERENCE_FIELDS,
          # a grpo run's: the mean reward of the answers sampled for the validation prompts
          Field("reward_mean", _FLOAT, optional=True)),
    CHECKPOINT: (
        Field("iteration", _INT), Field("adapter_file", _STR), Field("latest", _STR),
        Field("state_files", (list,)), Field("bytes", _INT),
        Field("val_loss", _FLOAT, optional=True),  # when a validation ran during that step
    ),
    WARNING: (
        Field("code", _STR), Field("message", _STR),
        # code "truncated"
        Field("split", _STR, optional=True), Field("rows", _INT, optional=True),
        Field("longest", _INT, optional=True),
        # code "dataset"
        Field("file", _STR, optional=True), Field("line", (int, _NONE), optional=True),
        # code "diverged"
        Field("iteration", _INT, optional=True), Field("train_loss", _FLOAT, optional=True),
        Field("lowest_train_loss", _FLOAT, optional=True),
        Field("stopping", (bool,), optional=True),
    ),
    # An answer generated with the weights of a validation step (`--sample-prompts`).
    # A grpo run's, at each validation, for a few validation prompts: one sampled answer with
    # the row's answer, its weighted total reward and each reward function's value.
    SAMPLE: (Field("iteration", _INT), Field("prompt", _STR), Field("text", _STR),
             Field("answer", _STR, optional=True), Field("reward", _FLOAT, optional=True),
             Field("rewards", (dict,), optional=True)),
    # The adapter after step `iteration` evaluated on eval_data (`--eval-every`): the mean NLL
    # per token of the reference answers and, with a scorer (`metric` "exact" or "reward"), the
    # mean score of the greedy answers; each with its standard error (null: too few rows).
    EVAL: (Field("iteration", _INT), Field("rows", _INT), Field("nll", (float, _NONE)),
           Field("nll_se", (float, _NONE)), Field("metric", (str, _NONE)),
           Field("score", (float, _NONE), optional=True),
           Field("score_se", (float, _NONE), optional=True), Field("eval_time", _FLOAT)),
    # A run that ran out of memory, resumed by its runner one rung down the ladder
    # (core/runs/out_of_memory.py): the checkpoint it resumes from (`iteration`; null: from the
    # start), the rung's number (1 to 3), the setting changed and its new value, the change
    # and the whole story in words.
    STEP_DOWN: (Field("iteration", (int, _NONE)), Field("rung", _INT), Field("setting", _STR),
                Field("value", (bool, int, float, str)), Field("change", _STR),
                Field("message", _STR)),
    COMPLETED: (Field("iteration", _INT), Field("summary", (dict,))),
    FAILED: (
        Field("iteration", _INT), Field("cause", _STR), Field("message", _STR),
        Field("suggestion", _STR), Field("traceback", (list,)),
        # cause "disk": the step of the checkpoint saved before stopping (None: none saved)
        Field("checkpoint", (int, _NONE), optional=True),
    ),
    CANCELLED: (
        Field("iteration", _INT), Field("checkpoint", (int, _NONE)),
        Field("forced", (bool,), optional=True),  # stopped without saving (by the runner)
    ),
}


def make_event(type_: str, **fields: Any) -> dict[str, Any]:
    """The event as it is written: the envelope, the type's fields in their defined order,
    then any field the definition does not know (readers skip those)."""
    event: dict[str, Any] = {"v": PROTOCOL_VERSION, "type": type_, "time": round(time.time(), 3)}
    for field in EVENT_FIELDS.get(type_, ()):
        if field.name in fields:
            event[field.name] = fields.pop(field.name)
    event.update(fields)
    return event


def encode_line(event: dict[str, Any]) -> str:
    """One line of events.jsonl (NaN and infinities as JSON's usual extensions)."""
    return json.dumps(event, allow_nan=True, separators=(ITEM_SEPARATOR, KEY_SEPARATOR)) + "\n"


class EventWriter:
    """Appends events to events.jsonl: a flush per line, an fsync for the ones that matter."""

    DURABLE = frozenset({STARTED, CHECKPOINT}) | TERMINAL_TYPES

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._handle = open(self.path, "a", encoding="utf-8")

    def write(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = make_event(type_, **fields)
        self._handle.write(encode_line(event))
        self._handle.flush()
        if type_ in self.DURABLE:
            os.fsync(self._handle.fileno())
        return event

    def close(self) -> None:
        self._handle.close()


class EventReader:
    """Reads new events from events.jsonl, from where the last read stopped.

    The cost of a read is proportional to the bytes appended since the previous one. A line
    without its newline yet is left in the file for the next read, so a half-written event is
    never parsed and never lost.
    """

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = Path(path)
        self.offset = offset
        self.skipped_lines = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        complete = chunk[: end + 1]
        self.offset += len(complete)
        return list(self._parse(complete))

    def _parse(self, data: bytes) -> Iterator[dict[str, Any]]:
        # One json.loads over the whole chunk is a third faster than one per line (catching up
        # on 100,000 events); any bad line sends the chunk down the careful path instead.
        try:
            parsed = json.loads(b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]")
        except (json.JSONDecodeError, UnicodeDecodeError):
            parsed = None
        if parsed is not None and all(isinstance(e, dict) and isinstance(e.get("type"), str)
                                      for e in parsed):
            yield from parsed
            return
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.skipped_lines += 1
                continue
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                self.skipped_lines += 1
                continue
            yield event


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events in the file (a partial last line is left out)."""
    return EventReader(path).read_new()


def last_event(path: Path, type_: str, tail_bytes: int = 64 * 1024) -> dict[str, Any] | None:
    """The last complete event of `type_` among the file's last `tail_bytes` (a live figure,
    such as a running trainer's peaks, without reading the whole history); None if none."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(handle.seek(0, os.SEEK_END) - tail_bytes, 0))
            data = handle.read()
    except OSError:
        return None
    marker = (json.dumps("type") + KEY_SEPARATOR + json.dumps(type_)).encode()
    for line in reversed(data.split(b"\n")[1:-1] if len(data) >= tail_bytes
                         else data.split(b"\n")[:-1]):
        if marker in line:
            try:
                event = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(event, dict) and event.get("type") == type_:
                return event
    return None
