"""The session of a distributed run's ranks other than 0: the same training, nothing written
(rank 0 writes events, run.json, config.yaml and checkpoints; trainer/distributed.py)."""

from __future__ import annotations

import os
import sys
from typing import Any

from zyquo_tui.trainer.loading import prepare_model
from zyquo_tui.trainer.session import TrainingSession


class NullEventWriter:
    """What ranks other than 0 write their events to: nothing."""

    def write(self, type_: str, **fields: Any) -> dict:
        return {"type": type_, **fields}

    def close(self) -> None:
        pass


class FollowerSession(TrainingSession):
    """A rank other than 0: it trains its share of each batch and writes no file."""

    primary = False

    def __init__(self, run_dir, stop) -> None:
        super().__init__(run_dir, stop)
        self.events.close()
        self.events = NullEventWriter()
        # Its progress lines would repeat rank 0's in trainer.log; its errors still show.
        sys.stdout = open(os.devnull, "w")

    def _update(self, state=None, **fields) -> None:
        pass

    def _prepare_model(self, model, run, config, adapters):
        return prepare_model(model, run)
