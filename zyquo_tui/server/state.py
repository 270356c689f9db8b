"""What the server keeps between requests: its sessions, training models and samplers, and the
error a request answers with at once. Plain records: server/service.py acts on them,
server/lifetimes.py decides when they end and frees them."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from zyquo_tui.server.trained_model import ModelSpec, TrainedModel


class UserFacing(Exception):
    """An error a request answers with at once: HTTP status and one sentence."""

    def __init__(self, status: int, sentence: str) -> None:
        super().__init__(sentence)
        self.status = status
        self.sentence = sentence


@dataclass
class Session:
    id: str
    last_heartbeat: float = field(default_factory=time.monotonic)
    models: list[str] = field(default_factory=list)
    samplers: list[str] = field(default_factory=list)
    finished: bool = False
    finished_at: float | None = None  # time.monotonic(): finished sessions are forgotten later


@dataclass
class TrainingModel:
    id: str
    session_id: str
    spec: ModelSpec
    trained: TrainedModel | None = None  # set once loaded (create_model's future)
    error: str | None = None  # why it can take no more requests
    # Its run was cancelled: its requests still come in and each fails with `error` (the
    # program's RequestFailedError), until it is freed as idle.
    cancelled: bool = False
    record: Any = None  # its run in the store (server/run_record.py), once loaded
    name_counter: itertools.count = field(default_factory=itertools.count)
    last_used: float = field(default_factory=time.monotonic)  # its last request's end
    submitted: int = 0  # its requests queued on the MLX thread (counted on the event loop)
    finished: int = 0  # of those, the ones done (counted on the MLX thread)
    estimate_bytes: int = 0  # what its memory verdict said it needs (server/ledger.py)
    judged: Any = None  # the run its verdict judged, which judges each forward_backward too
    snapshots: list[str] = field(default_factory=list)  # its samplers, oldest first


@dataclass
class Sampler:
    id: str
    base_model: str
    model_path: str | None
    owner: str | None = None  # the training model whose weights it samples
    weights: Any = None  # a snapshot of the owner's weights, or the saved ones (MLX arrays)
    spec: ModelSpec | None = None
    session_id: str | None = None  # the session that made it: it ends with it
    last_used: float = field(default_factory=time.monotonic)
    submitted: int = 0
    finished: int = 0

    @property
    def standalone_key(self) -> tuple | None:
        """Which base model it samples when no live training model serves it."""
        spec = self.spec
        return None if spec is None else (spec.folder, spec.rank, spec.train_attn,
                                          spec.train_mlp)


def tinker_path(run_id: str, kind: str, name: str) -> str:
    return f"tinker://{run_id}/{kind}/{name}"
