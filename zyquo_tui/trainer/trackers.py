"""Experiment trackers: a run's metrics sent to wandb, swanlab or trackio as it trains.

`report_to` (mlx-lm's key and its `--report-to` flag) names the trackers; each is driven
through its own library, imported only when named. A tracker gets what the run's events carry,
under the events' own field names (train_loss, learning_rate, tokens_per_second,
peak_memory_bytes, val_loss, the preference runs' rewards...), at the event's iteration; the
run's settings are the tracker's config, and its run name is ours. The events stay the record:
a tracker that cannot start, or fails mid-run, costs a warning event and that tracker, never
the training.

Where each writes (all local unless the tracker is configured otherwise by its own means):
wandb in the run's folder (`WANDB_MODE=offline` keeps it there), swanlab in the run's folder
(`swanlog/`), trackio in its own store (`TRACKIO_DIR`, default ~/.cache/huggingface/trackio).
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any, Callable

from zyquo_tui.core.events import protocol as ev

DEFAULT_PROJECT = "zyquo-tui"
# The events whose figures a tracker gets; the terminal ones end its run.
LOGGED_EVENTS = frozenset({ev.TRAIN, ev.VAL})
# Fields of those events that are not metrics.
NOT_METRICS = frozenset({"v", "type", "time", "iteration"})


class Tracker:
    """One tracker's run: `log` the figures of a step, `finish` at the end."""

    name = ""

    def log(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError


class WandbTracker(Tracker):
    name = "wandb"

    def __init__(self, project: str, run_name: str, run_id: str, config: dict[str, Any],
                 folder: Path) -> None:
        self.wandb = importlib.import_module("wandb")
        # Resumed runs continue the same tracker run (its id is ours).
        self.run = self.wandb.init(project=project, name=run_name, id=_tracker_id(run_id),
                                   dir=str(folder), config=config, resume="allow")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self) -> None:
        self.run.finish()


class SwanlabTracker(Tracker):
    name = "swanlab"

    def __init__(self, project: str, run_name: str, run_id: str, config: dict[str, Any],
                 folder: Path) -> None:
        self.swanlab = importlib.import_module("swanlab")
        self.swanlab.init(project=project, experiment_name=run_name,
                          logdir=str(folder / "swanlog"), config=config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.swanlab.log(metrics, step=step)

    def finish(self) -> None:
        self.swanlab.finish()


class TrackioTracker(Tracker):
    name = "trackio"

    def __init__(self, project: str, run_name: str, run_id: str, config: dict[str, Any],
                 folder: Path) -> None:
        self.trackio = importlib.import_module("trackio")
        # trackio writes from a thread of its own and only warns when it cannot: a store it
        # cannot write is found here, before the run counts on it.
        store = Path(importlib.import_module("trackio.utils").TRACKIO_DIR)
        store.mkdir(parents=True, exist_ok=True)
        (store / ".zyquo-tui-check").write_bytes(b"")
        (store / ".zyquo-tui-check").unlink()
        # No background sampling of the machine: the run's own figures, as its events hold them.
        self.run = self.trackio.init(project=project, name=run_name, config=config,
                                     resume="allow", auto_log_cpu=False, auto_log_gpu=False)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.trackio.log(metrics, step=step)

    def finish(self) -> None:
        self.trackio.finish()


TRACKER_CLASSES: dict[str, Callable[..., Tracker]] = {
    "wandb": WandbTracker, "swanlab": SwanlabTracker, "trackio": TrackioTracker}


def _tracker_id(run_id: str) -> str:
    return run_id.replace("-", "")  # wandb ids take letters and digits


def metrics_of(event: dict[str, Any]) -> dict[str, float]:
    """The figures of a train or val event a tracker can chart (finite numbers)."""
    return {key: value for key, value in event.items()
            if key not in NOT_METRICS and isinstance(value, (int, float))
            and not isinstance(value, bool) and math.isfinite(value)}


class TrackedEvents:
    """An event writer that also sends each train and val event's figures to the trackers,
    and ends their runs with the run's terminal event (see the module docstring)."""

    def __init__(self, events: Any, trackers: list[Tracker],
                 warn: Callable[[str, str], None]) -> None:
        self.events = events
        self.trackers = list(trackers)
        self.warn = warn

    def write(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = self.events.write(type_, **fields)
        if type_ in LOGGED_EVENTS and self.trackers:
            metrics = metrics_of(event)
            for tracker in list(self.trackers):
                self._call(tracker, "log", lambda t=tracker: t.log(metrics, event["iteration"]))
        if type_ in ev.TERMINAL_TYPES:
            self.finish()
        return event

    def finish(self) -> None:
        for tracker in list(self.trackers):
            self._call(tracker, "finish", tracker.finish)
        self.trackers.clear()

    def _call(self, tracker: Tracker, what: str, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as error:  # the events are the record: the run goes on without it
            self.trackers.remove(tracker)
            self.warn("tracker", f"{tracker.name} stopped taking the run's metrics ({what}: "
                                 f"{type(error).__name__}: {error}); training goes on, and the "
                                 "events keep every figure.")

    def close(self) -> None:
        self.finish()
        self.events.close()


def open_trackers(names: str | None, *, project: str | None, run_name: str, run_id: str,
                  config: dict[str, Any], folder: Path,
                  warn: Callable[[str, str], None]) -> list[Tracker]:
    """The trackers `names` (report_to) asks for, started; one that cannot start is a warning
    (`warn(code, message)`) and is left out."""
    started = []
    for name in [n.strip().lower() for n in (names or "").split(",") if n.strip()]:
        make = TRACKER_CLASSES.get(name)
        if make is None:
            warn("tracker", f"report_to names {name!r}, which is no tracker zyquo-tui knows; "
                            "the run trains without it.")
            continue
        try:
            started.append(make(project or DEFAULT_PROJECT, run_name, run_id, config, folder))
        except Exception as error:
            warn("tracker", f"{name} could not start ({type(error).__name__}: {error}); the "
                            "run trains without it, and its events keep every figure.")
    return started
