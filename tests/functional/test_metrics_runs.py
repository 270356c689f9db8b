"""RunMetrics rebuilds a run's figures from events; downsample keeps the extremes. The wire
format: what the writer writes, both readers read alike; the fast history load equals
RunMetrics, on worker processes too."""

from __future__ import annotations

from test_metrics import assert_same_metrics, resumed_stream

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.history import load_history, load_history_parallel
from zyquo_tui.core.events.metrics import RunMetrics


def test_a_history_parsed_on_worker_processes_equals_one_parsed_here(tmp_path):
    path = tmp_path / "events.jsonl"
    resumed_stream(path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"v": 1, "type": "train", "iter')  # a write in progress
    expected = RunMetrics()
    expected.ingest(ev.read_events(path))
    here = load_history(path, recent=40)

    spread = load_history_parallel(path, recent=40, parts=3, min_bytes=0)

    assert spread.offset == here.offset == path.stat().st_size - len('{"v": 1, "type": "train", "iter')
    assert_same_metrics(spread.metrics, expected)
    assert_same_metrics(here.metrics, expected)
    assert spread.recent == here.recent and len(here.recent) == 40
