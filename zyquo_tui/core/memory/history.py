"""Measured peaks beside their estimates (memory_history.jsonl), and the correction they
give later estimates."""

from __future__ import annotations

import json
import socket
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from zyquo_tui.core.memory.budget import CPU
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.store.paths import zyquo_home

HISTORY_FILE = "memory_history.jsonl"
HISTORY_WINDOW = 10  # the most recent measurements the correction looks at
HISTORY_MIN_EFFECT = 0.02  # ratios closer to 1 than this leave the estimate alone
HISTORY_CLAMP = (0.5, 2.0)
# A measured figure this close to its estimate counts as exact (a ratio of 1). The resident
# figure (`training_peak`) counts from the footprint ready to train, so the tokenizer and the
# rows are out of it, but it still holds some of the runtime's own that no estimate of
# training counts and that does not grow with the config: compiled kernels, the allocator's
# cache of freed buffers (9 to 10 MiB above MLX's peak with the 7 MiB sample model on the
# CPU). As a ratio on a small model that can be a factor of 2, which would then double every
# later estimate of it.
HISTORY_ABSOLUTE_SLACK = 64 * 1024 * 1024


def training_peak(mlx_peak: int, peak_rss: int | None = None,
                  start_rss: int | None = None, ready_rss: int | None = None) -> int:
    """The peak a measurement or a run compares with its estimate: the larger of MLX's peak
    and the process's peak resident footprint above the runtime's own.

    MLX's figure can miss memory the process really holds (buffers MLX does not count, the
    allocator's slack: mlx issues 3896 and 3993), and the resident figure includes the
    interpreter, the libraries, the tokenizer and the rows, which no estimate of training
    counts. So the resident peak counts from `ready_rss` (trainer/loading.py
    ready_resident_bytes: the footprint once loaded, less MLX's memory then), or, in records
    made before it existed, from `start_rss` (the footprint before the model loaded).
    """
    baseline = ready_rss if ready_rss is not None else start_rss
    if peak_rss is None or baseline is None:
        return int(mlx_peak)
    return max(int(mlx_peak), int(peak_rss) - int(baseline))


def _ratio(record: dict[str, Any]) -> float:
    """A record's measured/estimated ratio; 1 within HISTORY_ABSOLUTE_SLACK of the estimate."""
    measured, estimate = record["measured_peak_bytes"], record["estimate_bytes"]
    if abs(measured - estimate) <= HISTORY_ABSOLUTE_SLACK:
        return 1.0
    return measured / estimate


@dataclass
class HistoryCorrection:
    """A factor from this machine's measured peaks against their estimates."""

    factor: float
    measurements: int
    same_model: bool

    def sentence(self) -> str:
        which = "this model's" if self.same_model else "this machine's"
        return (f"scaled by {self.factor:.2f}: the median measured/estimated ratio of "
                f"{which} last {self.measurements} measured run(s) ({HISTORY_FILE}).")


class MemoryHistory:
    """This machine's measured peaks beside their estimates: memory_history.jsonl.

    One JSON object per line: time, host, device, model, method, settings, estimate_bytes (the
    uncorrected model estimate), measured_peak_bytes (`training_peak`: the larger of the
    two figures that follow), mlx_peak_bytes (MLX's peak), peak_rss_bytes, start_rss_bytes and
    ready_rss_bytes (the process's peak resident footprint, its footprint before the model
    loaded, and once ready to train less MLX's memory; absent where they could not be read),
    source ("measure" or "run") and run_id.
    `plan --measure` appends; finished runs are added by `record_run` (the supervisor calls it
    when a run ends) or `import_runs` (a scan of the store).
    """

    def __init__(self, path: Path | None = None, records: list[dict[str, Any]] | None = None
                 ) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = list(records or [])

    @classmethod
    def load(cls, home: Path | None = None) -> "MemoryHistory":
        path = (home or zyquo_home()) / HISTORY_FILE
        records = []
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # a partial last line, or a line damaged by hand
                    if (isinstance(record, dict)
                            and isinstance(record.get("estimate_bytes"), (int, float))
                            and isinstance(record.get("measured_peak_bytes"), (int, float))
                            and record["estimate_bytes"] > 0):
                        records.append(record)
        except OSError:
            pass
        return cls(path, records)

    def append(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time()), "host": socket.gethostname(), **record}
        self.records.append(record)
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def correction(self, device: str, model_path: str | None = None) -> HistoryCorrection | None:
        host = socket.gethostname()
        mine = [r for r in self.records if r.get("host") == host and r.get("device") == device]
        same = [r for r in mine if model_path and r.get("model") == model_path]
        chosen = (same or mine)[-HISTORY_WINDOW:]
        if not chosen:
            return None
        factor = statistics.median(_ratio(r) for r in chosen)
        factor = min(max(factor, HISTORY_CLAMP[0]), HISTORY_CLAMP[1])
        if abs(factor - 1) < HISTORY_MIN_EFFECT:
            return None
        return HistoryCorrection(factor=factor, measurements=len(chosen), same_model=bool(same))

    def record_run(self, run: Run) -> bool:
        """Add a finished run's measured peak beside the estimate its gate recorded.

        Only runs whose estimate used the dataset's real longest row count: with the row
        length unknown the estimate assumed max_seq_length, which is no fair comparison. Nor
        is a run that stepped down the out-of-memory ladder: its peak spans two configs, and
        its gate judged the first. Returns whether a record was added.
        """
        memory = run.memory or {}
        summary = run.summary or {}
        peak = summary.get("peak_memory_bytes")
        estimate = memory.get("model_estimate_bytes")
        if not peak or not estimate or not memory.get("exact_sequence") or run.memory_steps:
            return False
        if any(r.get("run_id") == run.id for r in self.records):
            return False
        host = (run.process or {}).get("host")
        if host and host != socket.gethostname():
            return False
        rss, start = summary.get("peak_rss_bytes"), summary.get("start_rss_bytes")
        ready = summary.get("ready_rss_bytes")
        self.append({"device": memory.get("device", CPU), "model": run.model,
                     "method": run.method.value, "settings": memory.get("settings"),
                     "estimate_bytes": int(estimate),
                     "measured_peak_bytes": training_peak(peak, rss, start, ready),
                     "mlx_peak_bytes": int(peak), "peak_rss_bytes": rss,
                     "start_rss_bytes": start, "ready_rss_bytes": ready, "source": "run",
                     "run_id": run.id})
        return True

    def import_runs(self, runs: Iterable[Any]) -> int:
        """record_run for every finished run (others and damaged records are skipped)."""
        added = 0
        for run in runs:
            if isinstance(run, Run) and run.state.is_terminal and self.record_run(run):
                added += 1
        return added
