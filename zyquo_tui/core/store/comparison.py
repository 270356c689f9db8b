"""Runs side by side: what differed between them and how each went (`runs compare`, and the
dashboard's compare screen).

The figures of each run come from its events (core/events/metrics.py RunMetrics), the
settings that differ from core/runs/differences.py.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.formatting import DASH, basename
from zyquo_tui.core.runs.differences import setting_differences
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.value_checks import value_text
from zyquo_tui.core.store.store import RunStore


@dataclass
class RunFigures:
    """How one run went. `duration_seconds` adds up its sessions (a cancel and a resume
    count their training time, not the pause between); `tokens_per_second` is the median of
    its reports (the first, slowed by compilation, does not drag it down); `peak_memory_bytes`
    is MLX's peak of its largest process (rank 0's alone is not the one to judge a host by)."""

    id: str
    name: str
    state: str
    step: int
    iters: int | None
    best_val_loss: float | None
    best_val_step: int | None
    final_train_loss: float | None
    tokens_per_second: float | None
    peak_memory_bytes: int | None
    duration_seconds: float | None
    stop_reason: str | None
    metrics: RunMetrics = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in (
            "id", "name", "state", "step", "iters", "best_val_loss", "best_val_step",
            "final_train_loss", "tokens_per_second", "peak_memory_bytes", "duration_seconds",
            "stop_reason")}


@dataclass
class Comparison:
    runs: list[Run]
    figures: list[RunFigures]
    differences: dict[str, list[Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [figures.to_dict() for figures in self.figures],
                "differences": self.differences}


def run_figures(store: RunStore, run: Run) -> RunFigures:
    events = ev.read_events(store.events_path(run.id))
    metrics = RunMetrics()
    metrics.ingest(events)
    best = metrics.best_val()
    speeds = [v for v in metrics.series["tokens_per_second"].values if v > 0]
    # A run on several processes needs its largest process's memory on that process's host.
    peaks = [*metrics.series["peak_memory_bytes"].values, *([metrics.largest_rank_peak]
                                                            if metrics.largest_rank_peak else [])]
    stop = metrics.stop_reason()
    return RunFigures(
        id=run.id, name=run.name, state=run.state.value, step=metrics.step,
        iters=metrics.iters or run.hyperparameters.iters,
        best_val_loss=best[1] if best else None, best_val_step=best[0] if best else None,
        final_train_loss=metrics.series["train_loss"].last,
        tokens_per_second=statistics.median(speeds) if speeds else None,
        peak_memory_bytes=int(max(peaks)) if len(peaks) else None,
        duration_seconds=metrics.seconds_to_last_event(), stop_reason=stop[0] if stop else None,
        metrics=metrics)


def compare_runs(store: RunStore, run_ids: list[str]) -> Comparison:
    """The runs `run_ids` compared; UserError for fewer than two, a repeat or an unknown id."""
    if len(run_ids) < 2:
        raise UserError("Compare needs at least two runs; give two run ids or more "
                        "(`zyquo-tui runs list` shows them).")
    repeated = sorted({run_id for run_id in run_ids if run_ids.count(run_id) > 1})
    if repeated:
        raise UserError(f"Run {repeated[0]} is given twice; give each run once.")
    runs = [store.get(run_id) for run_id in run_ids]
    return Comparison(runs, [run_figures(store, run) for run in runs],
                      setting_differences(runs))


# -- how the CLI and the dashboard write a comparison ----------------------------------------

PATH_SETTINGS = ("model", "data")


def setting_text(key: str, value: Any) -> str:
    if value is None:
        return DASH
    if key in PATH_SETTINGS and isinstance(value, str):
        return basename(value)
    return value_text(value)


def stop_text(reason: str | None) -> str:
    return reason.replace("_", " ") if reason else ""


def letters(count: int) -> list[str]:
    """A, B, C... (then A1, B1... past Z): short column names for the runs."""
    return [chr(ord("A") + i % 26) + (str(i // 26) if i >= 26 else "") for i in range(count)]
