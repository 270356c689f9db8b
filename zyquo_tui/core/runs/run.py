"""Runs: what a fine-tuning run is, the states it moves through, and its hyperparameters.

Hyperparameters keep mlx-lm's names and defaults (mlx-lm 0.32, defined once in
core/runs/settings.py), so a run maps one to one onto an mlx-lm YAML config (see
core/runs/mlx_config.py).
"""

from __future__ import annotations

import dataclasses
import enum
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from zyquo_tui.core.runs.problems import Problem
from zyquo_tui.core.runs.settings import (
    PREFERENCE_OBJECTIVES,
    SETTINGS,
    Hyperparameters,
    Method,
)

SCHEMA_VERSION = 1


class RunState(str, enum.Enum):
    """Where a run is in its life. Terminal states can only be left by a resume."""

    CONFIGURED = "configured"
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the trainer vanished without a terminal event

    @property
    def is_active(self) -> bool:
        """A trainer process exists (or is about to) for this run."""
        return self in (RunState.STARTING, RunState.RUNNING)

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES

    @property
    def can_resume(self) -> bool:
        return self in (RunState.CANCELLED, RunState.FAILED, RunState.INTERRUPTED)


TERMINAL_STATES = frozenset(
    {RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.INTERRUPTED}
)

_RESUMABLE = {RunState.QUEUED, RunState.STARTING}

ALLOWED_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.CONFIGURED: frozenset({RunState.QUEUED, RunState.STARTING}),
    RunState.QUEUED: frozenset({RunState.CONFIGURED, RunState.STARTING}),
    RunState.STARTING: frozenset(
        {RunState.RUNNING, RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED,
         RunState.INTERRUPTED}
    ),
    RunState.RUNNING: frozenset(
        {RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.INTERRUPTED}
    ),
    RunState.COMPLETED: frozenset(),
    RunState.FAILED: frozenset(_RESUMABLE),
    RunState.CANCELLED: frozenset(_RESUMABLE),
    RunState.INTERRUPTED: frozenset(_RESUMABLE),
}


class InvalidTransition(ValueError):
    """A state change that the run's lifecycle does not allow."""


def check_transition(current: RunState, new: RunState) -> None:
    if new not in ALLOWED_TRANSITIONS[current]:
        raise InvalidTransition(f"a {current.value} run cannot become {new.value}")


_last_id_millisecond = 0
_id_lock = threading.Lock()


def new_run_id(now: float | None = None) -> str:
    """An id that sorts by creation time: UTC date, time to the millisecond, random suffix.

    Ids made by one process without `now` never share a millisecond: one made in the same
    millisecond as the last (a script creating runs in a loop, on a fast machine) takes the
    next, so they still sort in the order they were made."""
    if now is None:
        global _last_id_millisecond
        with _id_lock:
            millisecond = max(int(time.time() * 1000), _last_id_millisecond + 1)
            _last_id_millisecond = millisecond
    else:
        millisecond = int(now * 1000)
    stamp = datetime.fromtimestamp(millisecond // 1000, tz=timezone.utc)
    return f"{stamp:%Y%m%d-%H%M%S}-{millisecond % 1000:03d}-{secrets.token_hex(2)}"


def utc_now_iso() -> str:
    return datetime.now(tz=timezone.utc).isoformat(timespec="seconds")


@dataclass
class Run:
    """The record of one run, stored as run.json in its run directory."""

    id: str
    name: str
    method: Method
    model: str
    data: str
    hyperparameters: Hyperparameters = field(default_factory=Hyperparameters)
    state: RunState = RunState.CONFIGURED
    created: str = field(default_factory=utc_now_iso)
    # Where this run came from: {"parent": run id, "step": checkpoint step} for a fork.
    lineage: dict[str, Any] | None = None
    # The step to resume from on the next start (exact resume), or None to start fresh.
    resume_from_step: int | None = None
    # The trainer process: {"pid", "start_time", "host", "boot_time"} (and the runner's pid and
    # start time) while one exists or last existed.
    process: dict[str, Any] | None = None
    # Figures rebuilt from events: last step, last losses, best validation, measured peak.
    summary: dict[str, Any] = field(default_factory=dict)
    # Why the run failed: {"cause", "message", "suggestion"}.
    failure: dict[str, Any] | None = None
    # mlx-lm config keys this version does not model: kept and passed through unchanged.
    extra_config: dict[str, Any] = field(default_factory=dict)
    # The memory verdict at start, and whether the user overrode a "won't fit".
    memory: dict[str, Any] | None = None
    # The disk verdict at start (its checkpoints against the store's free space), and whether
    # the user overrode a "won't fit".
    disk: dict[str, Any] | None = None
    # When the run entered the queue (queue order is kept in the store's queue file).
    queued_at: str | None = None
    # The grid it was made in (`runs grid`): its runs share this id.
    group: str | None = None
    # The out-of-memory ladder's steps taken (core/runs/out_of_memory.py), in order: each the
    # rung's setting, value and change, the step resumed from, the failure and when.
    memory_steps: list[dict[str, Any]] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def new(cls, *, model: str, data: str, method: Method | str = Method.LORA,
            name: str | None = None, hyperparameters: Hyperparameters | None = None,
            run_id: str | None = None) -> "Run":
        run_id = run_id or new_run_id()
        method = Method(method)
        return cls(
            id=run_id,
            name=name or cls.default_name(model, method),
            method=method,
            model=str(model),
            data=str(data),
            hyperparameters=hyperparameters or Hyperparameters(),
        )

    @staticmethod
    def default_name(model: str, method: Method) -> str:
        """The model folder's name and the method: `zyquo-tiny qlora`."""
        return f"{os.path.basename(str(model).rstrip('/'))} {Method(method).value}"

    @property
    def objective(self) -> str:
        """What the run learns: sft, or a preference objective (dpo, orpo)."""
        return str(SETTINGS["objective"].get(self.hyperparameters))

    @property
    def is_preference(self) -> bool:
        return self.objective in PREFERENCE_OBJECTIVES

    @property
    def served(self) -> bool:
        """Trained by `zyquo-tui serve` for a Tinker program (run.json's `process.served_by`).
        The program holds its data and drives its steps, so such a run is never resumed or
        relaunched here: the program goes on from the state it saved."""
        return bool((self.process or {}).get("served_by"))

    @property
    def planned_steps(self) -> int | None:
        """The optimizer steps the run is set to train; None for a served run, whose program
        decides as it goes."""
        return None if self.served else self.hyperparameters.iters

    def set_state(self, new: RunState) -> None:
        check_transition(self.state, new)
        self.state = new

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["method"] = self.method.value
        data["state"] = self.state.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Run":
        """Build a run from its record; raises ValueError with a reason when it is malformed."""
        if not isinstance(data, dict):
            raise ValueError("the record is not a JSON object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {version!r} is not {SCHEMA_VERSION} (written by another "
                "version of zyquo-tui)"
            )
        try:
            values = {k: v for k, v in data.items() if k in _RUN_FIELDS}
            values["method"] = Method(values["method"])
            values["state"] = RunState(values["state"])
            values["hyperparameters"] = Hyperparameters.from_dict(
                values.get("hyperparameters") or {}
            )
            for key in ("id", "name", "model", "data"):
                if not isinstance(values[key], str):
                    raise ValueError(f"{key} is not text")
            return cls(**values)
        except KeyError as error:
            raise ValueError(f"the field {error.args[0]} is missing") from None
        except (TypeError, ValueError) as error:
            raise ValueError(str(error)) from None

    def problems(self) -> list[Problem]:
        """The problems of the run's settings on their own (core/library/run_checks.py `check_run`
        adds those against its model and dataset)."""
        return self.hyperparameters.problems(self.method)


_RUN_FIELDS = frozenset(f.name for f in dataclasses.fields(Run))
