"""RunMetrics rebuilds a run's figures from events; downsample keeps the extremes. The wire
format: what the writer writes, both readers read alike; the fast history load equals
RunMetrics, on worker processes too."""

from __future__ import annotations

import json
import math

import pytest

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.fast_reader import (
    FLOATS,
    INTEGERS,
    TRAIN_LINE_FIELDS,
    TrainColumnReader,
)
from zyquo_tui.core.events.history import load_history
from zyquo_tui.core.events.metrics import RunMetrics, downsample


def train(step, loss, **extra):
    return {"v": 1, "type": "train", "time": float(step), "iteration": step, "train_loss": loss,
            "learning_rate": 1e-3, "iterations_per_second": 2.0, "tokens_per_second": 100.0,
            "trained_tokens": step * 10, "peak_memory_bytes": 1000 + step, **extra}


def val(step, loss):
    return {"v": 1, "type": "val", "time": float(step), "iteration": step, "val_loss": loss}


def started(resumed=None, iters=100):
    return {"v": 1, "type": "started", "time": 0.0, "iters": iters, "resumed_from_step": resumed}


def test_the_first_validation_names_the_step_before_any_report():
    """mlx-lm validates at step 1, before the first train report: progress says step 1, as
    `runs show` places that validation (it used to say step 0 beside the val loss)."""
    m = RunMetrics()
    m.ingest([started(), val(1, 5.0)])
    assert m.summary()["step"] == 1
    m.ingest([train(10, 4.0)])
    assert m.summary()["step"] == 10


def test_series_summary_and_best_checkpoint():
    m = RunMetrics()
    m.ingest([started(), val(1, 5.0), train(10, 4.0), val(10, 3.5),
              {"v": 1, "type": "checkpoint", "time": 10.0, "iteration": 10, "val_loss": 3.5},
              train(20, 3.0), val(20, 3.8),
              {"v": 1, "type": "checkpoint", "time": 20.0, "iteration": 20, "val_loss": 3.8},
              {"v": 1, "type": "mystery", "time": 21.0}])
    assert m.series["train_loss"].steps == [10, 20]
    s = m.summary()
    assert (s["step"], s["last_train_loss"], s["last_val_loss"]) == (20, 3.0, 3.8)
    assert (s["best_val_loss"], s["best_val_step"]) == (3.5, 10)
    assert s["best_checkpoint_step"] == 10
    assert s["eta_seconds"] == (100 - 20) / 2.0
    assert s["peak_memory_bytes"] == 1020
    assert s["peak_rss_bytes"] is None  # events from before the trainer recorded it
    m.ingest([train(30, 2.9, peak_rss_bytes=5000), train(40, 2.8, peak_rss_bytes=4000)])
    assert m.summary()["peak_rss_bytes"] == 5000


def test_a_resume_supersedes_points_after_its_step():
    m = RunMetrics()
    m.ingest([started(), train(10, 4.0), train(20, 3.0), train(30, 9.9), val(30, 9.9),
              started(resumed=20), train(30, 2.5)])
    assert m.series["train_loss"].steps == [10, 20, 30]
    assert m.series["train_loss"].values == [4.0, 3.0, 2.5]
    assert m.series["val_loss"].steps == []


def test_downsample_keeps_spikes_and_dips():
    values = [1.0] * 10_000
    values[1234] = 50.0
    values[8765] = -7.0
    out = downsample(list(range(10_000)), values, 100)
    assert len(out) <= 100
    assert 50.0 in out and -7.0 in out
    assert downsample([1, 2, 3], [3.0, 2.0, 1.0], 10) == [3.0, 2.0, 1.0]


SAMPLE_VALUES = {int: 7, float: 0.25, str: "text", dict: {"a": [1, 2]}, list: ["x", 3],
                 bool: True, type(None): None}


def every_field(type_: str) -> dict:
    """A value of the first kind of every field the protocol defines for the type."""
    return {field.name: SAMPLE_VALUES[field.kinds[0]] for field in ev.EVENT_FIELDS[type_]}


def train_fields(step: int) -> dict:
    # Odd numbers on purpose: exponents, big integers, infinities, an integer-valued float.
    return {"iteration": step, "train_loss": 2.0 + 1 / step, "learning_rate": 1e-05 * step,
            "iterations_per_second": float("inf") if step == 3 else 20.0,
            "tokens_per_second": -1.5e300 if step == 4 else 1398.25,
            "trained_tokens": step * 671, "peak_memory_bytes": 2**62 + step,
            "peak_rss_bytes": 2**40 + step}


def written_stream(path) -> None:
    """Every event type, with every field, through the writer; train events in between."""
    writer = ev.EventWriter(path)
    try:
        writer.write(ev.STARTED, **every_field(ev.STARTED))
        for step in range(1, 6):
            # Keyword order is not the written order: the writer orders the fields.
            writer.write(ev.TRAIN, **dict(reversed(list(train_fields(step).items()))))
        for type_ in sorted(ev.KNOWN_TYPES - {ev.STARTED, ev.TRAIN}):
            writer.write(type_, **every_field(type_))
        writer.write(ev.TRAIN, **train_fields(6))
    finally:
        writer.close()


def full_reader() -> TrainColumnReader:
    kinds = {field.name: field.kinds[0] for field in ev.EVENT_FIELDS[ev.TRAIN]}
    kinds["time"] = float
    return TrainColumnReader({name: INTEGERS if kinds[name] is int else FLOATS
                              for name in TRAIN_LINE_FIELDS})


def fast_events(piece: bytes) -> tuple[list[dict], list[dict]]:
    """(train events, other events) as the fast reader reads them; it must take its fast way."""
    parsed = full_reader().read(piece)
    assert parsed.events is None, "the writer's lines took the careful way"
    columns = parsed.columns
    trains = [{"v": ev.PROTOCOL_VERSION, "type": ev.TRAIN,
               **{name: columns[name][i] if name in columns else None
                  for name in TRAIN_LINE_FIELDS}}
              for i in range(parsed.train_count)]
    return trains, parsed.others


def test_the_writer_writes_each_type_s_fields_in_the_defined_order(tmp_path):
    path = tmp_path / "events.jsonl"
    written_stream(path)
    for line in path.read_text().splitlines():
        event = json.loads(line)
        names = [field.name for field in ev.EVENT_FIELDS[event["type"]]
                 if event["type"] != ev.TRAIN or field.name not in ev.SOME_RUNS_TRAIN_FIELDS]
        assert list(event) == list(ev.ENVELOPE) + names
        assert line == ev.encode_line(event).rstrip("\n")


def test_both_readers_read_every_event_type_alike(tmp_path):
    path = tmp_path / "events.jsonl"
    written_stream(path)
    tolerant = ev.read_events(path)
    assert {e["type"] for e in tolerant} == ev.KNOWN_TYPES

    trains, others = fast_events(path.read_bytes())

    expected_trains = [e for e in tolerant if e["type"] == ev.TRAIN]
    assert trains == expected_trains
    assert [list(map(type, e.values())) for e in trains] == \
        [list(map(type, e.values())) for e in expected_trains]
    assert others == [e for e in tolerant if e["type"] != ev.TRAIN]
    expected = RunMetrics()
    expected.ingest(tolerant)
    assert_same_metrics(load_history(path).metrics, expected)


TRAIN_LINE = train_fields(9)


ODD_TRAIN_LINES = {
    "fields in another order": json.dumps(
        {"v": 1, "type": "train", "time": 9.0, **dict(reversed(list(TRAIN_LINE.items())))}),
    "an unknown field in the middle": json.dumps(
        {"v": 1, "type": "train", "time": 9.0, "iteration": 9, "rank": 1,
         **{k: v for k, v in TRAIN_LINE.items() if k != "iteration"}}),
    "an unknown field at the end": json.dumps(
        {"v": 1, "type": "train", "time": 9.0, **TRAIN_LINE, "rank": {"of": 2, "node": 0}}),
    "a field missing": json.dumps(
        {"v": 1, "type": "train", "time": 9.0,
         **{k: v for k, v in TRAIN_LINE.items() if k != "learning_rate"}}),
    "a null value": json.dumps({"v": 1, "type": "train", "time": 9.0,
                                **{**TRAIN_LINE, "train_loss": None}}),
    "a string value": json.dumps({"v": 1, "type": "train", "time": 9.0,
                                  **{**TRAIN_LINE, "tokens_per_second": "fast"}}),
    "a fractional iteration": json.dumps({"v": 1, "type": "train", "time": 9.0,
                                          **{**TRAIN_LINE, "iteration": 9.5}}),
    "other separators": json.dumps({"v": 1, "type": "train", "time": 9.0, **TRAIN_LINE},
                                   separators=(",", ":")),
    "another version": json.dumps({"v": 2, "type": "train", "time": 9.0, **TRAIN_LINE}),
    "a line cut short": ev.encode_line(ev.make_event(ev.TRAIN, **TRAIN_LINE))[:-2],
    "a train event inside another event": json.dumps(
        {"v": 1, "type": "warning", "time": 9.0, "code": "echo",
         "message": "seen", "event": ev.make_event(ev.TRAIN, **TRAIN_LINE)}),
    "the type spelled with an escape": json.dumps(
        {"v": 1, "type": "train", "time": 9.0, **TRAIN_LINE}).replace("train", "tr\\u0061in"),
}


@pytest.mark.parametrize("odd", sorted(ODD_TRAIN_LINES))
def test_the_fast_reader_falls_back_on_lines_in_another_shape(tmp_path, odd):
    path = tmp_path / "events.jsonl"
    written_stream(path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(ODD_TRAIN_LINES[odd] + "\n")
        handle.write(ev.encode_line(ev.make_event(ev.VAL, iteration=9, val_loss=1.0,
                                                  val_time=0.1)))
        handle.write(ev.encode_line(ev.make_event(ev.TRAIN, **train_fields(10))))
    tolerant = ev.read_events(path)

    parsed = full_reader().read(path.read_bytes())

    assert parsed.events == tolerant
    expected = RunMetrics()
    expected.ingest(tolerant)
    assert_same_metrics(load_history(path).metrics, expected)


def without(fields: dict, name: str) -> dict:
    return {k: v for k, v in fields.items() if k != name}


def test_train_lines_without_an_optional_field_take_the_fast_way(tmp_path):
    """Runs written before the trainer recorded its resident peak (or where it cannot be read)
    have train lines without peak_rss_bytes: they are read as columns all the same."""
    path = tmp_path / "events.jsonl"
    writer = ev.EventWriter(path)
    try:
        writer.write(ev.STARTED, **every_field(ev.STARTED))
        for step in range(1, 6):
            writer.write(ev.TRAIN, **without(train_fields(step), "peak_rss_bytes"))
        writer.write(ev.VAL, iteration=5, val_loss=1.0, val_time=0.1)
    finally:
        writer.close()
    tolerant = ev.read_events(path)

    trains, others = fast_events(path.read_bytes())

    assert trains == [{**e, "peak_rss_bytes": None} for e in tolerant if e["type"] == ev.TRAIN]
    assert others == [e for e in tolerant if e["type"] != ev.TRAIN]
    expected = RunMetrics()
    expected.ingest(tolerant)
    assert len(expected.series["peak_rss_bytes"]) == 0
    assert_same_metrics(load_history(path).metrics, expected)


def test_lines_with_and_without_an_optional_field_are_each_read_as_written(tmp_path):
    path = tmp_path / "events.jsonl"
    writer = ev.EventWriter(path)
    try:
        writer.write(ev.STARTED, **every_field(ev.STARTED))
        for step in range(1, 7):
            fields = train_fields(step)
            writer.write(ev.TRAIN, **(fields if step % 2 else without(fields, "peak_rss_bytes")))
    finally:
        writer.close()
    tolerant = ev.read_events(path)

    assert full_reader().read(path.read_bytes()).events == tolerant
    expected = RunMetrics()
    expected.ingest(tolerant)
    assert expected.series["peak_rss_bytes"].steps == [1, 3, 5]
    assert_same_metrics(load_history(path).metrics, expected)


@pytest.mark.parametrize("piece_bytes", [100, 4096, 50_000])
def test_a_history_read_in_small_pieces_equals_one_read_whole(tmp_path, piece_bytes):
    """Pieces are cut at line ends and before each `started` line, whatever their size (a
    line longer than a piece included)."""
    path = tmp_path / "events.jsonl"
    resumed_stream(path)
    expected = RunMetrics()
    expected.ingest(ev.read_events(path))

    pieces = load_history(path, recent=40, piece_bytes=piece_bytes)

    assert_same_metrics(pieces.metrics, expected)
    assert pieces.recent == load_history(path, recent=40).recent


@pytest.mark.parametrize("odd", [
    "not json", "", "[1, 2]", '{"type": 3}', "{", "  ",
    'junk {"v": 1, "type": "val", "time": 1.0, "iteration": 2, "val_loss": 3.0, "val_time": 0.1}',
])
def test_lines_that_are_no_event_are_skipped_by_both_readers(tmp_path, odd):
    path = tmp_path / "events.jsonl"
    written_stream(path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(odd + "\n")
        handle.write(ev.encode_line(ev.make_event(ev.TRAIN, **train_fields(10))))
    tolerant = ev.read_events(path)

    assert full_reader().read(path.read_bytes()).events == tolerant
    expected = RunMetrics()
    expected.ingest(tolerant)
    assert_same_metrics(load_history(path).metrics, expected)


def test_a_resume_written_in_another_shape_still_supersedes_later_points(tmp_path):
    path = tmp_path / "events.jsonl"
    written_stream(path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"v": 1, "type": "started", "time": 9.0, "iters": 10,
                                 "resumed_from_step": 2}, separators=(",", ":")) + "\n")
        handle.write(ev.encode_line(ev.make_event(ev.TRAIN, **train_fields(3))))
    expected = RunMetrics()
    expected.ingest(ev.read_events(path))
    assert expected.series["train_loss"].steps == [1, 2, 3]

    assert_same_metrics(load_history(path).metrics, expected)


def resumed_stream(path, steps: int = 3000) -> None:
    """Two sessions, the second resumed from step 1000, with validations and checkpoints."""
    writer = ev.EventWriter(path)
    try:
        for session, first in ((0, 1), (1, 1001)):
            writer.write(ev.STARTED, iters=steps, resumed_from_step=1000 if session else None)
            for step in range(first, steps + 1 if session else 1500):
                writer.write(ev.TRAIN, **train_fields(step))
                if step % 100 == 0:
                    writer.write(ev.VAL, iteration=step, val_loss=3.0 - step / steps + session,
                                 val_time=0.5)
                    writer.write(ev.CHECKPOINT, iteration=step, adapter_file="a", latest="b",
                                 state_files=[], bytes=10)
        writer.write(ev.COMPLETED, iteration=steps, summary={})
    finally:
        writer.close()


def assert_same_metrics(got: RunMetrics, expected: RunMetrics) -> None:
    for name, series in expected.series.items():
        assert list(got.series[name].steps) == series.steps, name
        assert [v if math.isfinite(v) else str(v) for v in got.series[name].values] == \
            [v if math.isfinite(v) else str(v) for v in series.values], name
    # elapsed_seconds counts to now while a run is on: compare where it starts instead.
    assert {**got.summary(), "elapsed_seconds": None} == \
        {**expected.summary(), "elapsed_seconds": None}
    assert got.session_started_time == expected.session_started_time
    assert got.checkpoints == expected.checkpoints
    assert got.warnings == expected.warnings
    assert got.terminal == expected.terminal
    assert (got.step, got.last_time, got.events_seen, got.iters) == \
        (expected.step, expected.last_time, expected.events_seen, expected.iters)


def test_a_preference_runs_metrics_are_series_whichever_reader_reads_them(tmp_path):
    path = tmp_path / "events.jsonl"
    writer = ev.EventWriter(path)
    try:
        writer.write(ev.STARTED, **every_field(ev.STARTED))
        for step in range(1, 6):
            writer.write(ev.TRAIN, **train_fields(step), reward_margin=0.1 * step,
                         reward_accuracy=0.5, chosen_reward=0.2, rejected_reward=-0.1)
        writer.write(ev.VAL, iteration=5, val_loss=0.6, val_time=0.1, reward_margin=0.3,
                     reward_accuracy=0.75, chosen_reward=0.1, rejected_reward=-0.2)
    finally:
        writer.close()
    expected = RunMetrics()
    expected.ingest(ev.read_events(path))
    assert expected.series["reward_margin"].values == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert expected.series["val_reward_accuracy"].values == [0.75]
    assert_same_metrics(load_history(path).metrics, expected)
