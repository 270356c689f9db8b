"""What a run's metrics cost in memory, per event, counted (tracemalloc) rather than timed.

The dashboard keeps the metrics of every run it has open, and a run can have 100,000 events
and more: its series are typed arrays (16 bytes a point), and reading the history holds one
piece of the file at a time, not an object per event. These bounds sit about 1.5 times above
what that costs, so a change that doubles it (points as Python floats in lists, events parsed
into dicts and held until the fold, a second copy of a series) fails here, before
bench/bench_dashboard.py would show it.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events import history as history_module
from zyquo_tui.core.events.history import load_history, new_metrics
from zyquo_tui.core.events.metrics_cache import cache_path
from zyquo_tui.core.events.metrics import RunMetrics

EVENTS = 10_000
# Bytes per event (measured: about 120 held and 300 at the peak while reading; the peak
# counts one piece of the file, half a megabyte, over only 10,000 events).
HELD_BYTES_PER_EVENT = 180
PEAK_BYTES_PER_EVENT = 450


def write_run(path, with_resident_peak: bool) -> None:
    """EVENTS events as the trainer writes them: a train report every step, a validation
    every 100 steps, a checkpoint every 1,000. `with_resident_peak`: train events carry
    peak_rss_bytes, as they do since the trainer records it (older runs have none)."""
    writer = ev.EventWriter(path)
    written = 1
    try:
        writer.write(ev.STARTED, pid=1, host="mini", versions={}, device="cpu",
                     parameters={"total": 10, "trainable": 1}, dataset={"train": 1},
                     iters=EVENTS, resumed_from_step=None, config={})
        step = 1
        while written < EVENTS:
            extra = {"peak_rss_bytes": 300_000_000 + step} if with_resident_peak else {}
            writer.write(ev.TRAIN, iteration=step, train_loss=3.0 / (1 + step / 500),
                         learning_rate=1e-5 * (1 - step / EVENTS), iterations_per_second=20.5,
                         tokens_per_second=1800.0 + step % 50, trained_tokens=step * 64,
                         peak_memory_bytes=3_000_000_000 + step, **extra)
            written += 1
            if step % 100 == 0 and written < EVENTS:
                writer.write(ev.VAL, iteration=step, val_loss=3.2 / (1 + step / 500),
                             val_time=0.5)
                written += 1
            if step % 1000 == 0 and written < EVENTS:
                writer.write(ev.CHECKPOINT, iteration=step,
                             adapter_file=f"{step:07d}_adapters.safetensors",
                             latest="adapters.safetensors", state_files=[], bytes=4456448)
                written += 1
            step += 1
    finally:
        writer.close()


def allocated(make):
    """(result of make(), bytes it still holds, the most it held at once), by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        result = make()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, held - start, peak - start


@pytest.mark.parametrize("cached", [False, True], ids=["parsed", "from metrics.cache"])
@pytest.mark.parametrize("with_resident_peak", [True, False],
                         ids=["as written today", "written before peak_rss_bytes"])
def test_reading_a_history_holds_few_bytes_per_event(tmp_path, monkeypatch, with_resident_peak,
                                                     cached):
    path = tmp_path / "events.jsonl"
    write_run(path, with_resident_peak)
    if cached:  # the cache beside the file, made (10,000 events are below the size it needs)
        monkeypatch.setattr(history_module, "CACHE_MIN_BYTES", 0)
        load_history(path, cached=True)
        assert cache_path(path).exists()

    history, held, peak = allocated(lambda: load_history(path, recent=40, cached=cached))

    assert history.metrics.events_seen == EVENTS
    assert len(history.metrics.series["train_loss"]) > 0.9 * EVENTS
    assert len(history.metrics.series["peak_rss_bytes"]) == \
        (history.metrics.step if with_resident_peak else 0)
    assert held / EVENTS < HELD_BYTES_PER_EVENT, \
        f"the metrics hold {held / EVENTS:.0f} bytes per event"
    assert peak / EVENTS < PEAK_BYTES_PER_EVENT, \
        f"reading the history held {peak / EVENTS:.0f} bytes per event at its peak"


def test_events_that_arrive_live_add_few_bytes_each(tmp_path):
    """A followed run's events are ingested one burst at a time into the dashboard's
    metrics: each point lands in the typed arrays too."""
    path = tmp_path / "events.jsonl"
    write_run(path, with_resident_peak=True)
    events = ev.read_events(path)

    metrics, held, _ = allocated(lambda: _ingested(new_metrics(), events))

    # elapsed_seconds counts to now while a run is on
    assert {**metrics.summary(), "elapsed_seconds": None} == \
        {**_ingested(RunMetrics(), events).summary(), "elapsed_seconds": None}
    assert held / EVENTS < HELD_BYTES_PER_EVENT, \
        f"the metrics hold {held / EVENTS:.0f} bytes per event"


def _ingested(metrics: RunMetrics, events: list[dict]) -> RunMetrics:
    for start in range(0, len(events), 250):  # bursts, as the follow delivers them
        metrics.ingest(events[start:start + 250])
    return metrics
