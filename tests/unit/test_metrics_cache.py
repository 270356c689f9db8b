"""metrics.cache: a run's fold kept beside events.jsonl gives the same metrics as reading the
file, whatever happened to either since (the file grew, was cut, rewritten or replaced; the
cache was cut, damaged or made by other code), and spares reading what it holds."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zyquo_tui.core.events import history as history_module
from zyquo_tui.core.events import metrics_cache
from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.history import keep_cache, load_history, load_history_parallel
from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.events.metrics_cache import CACHE_FILE, cache_path, read_cache

from test_metrics import assert_same_metrics, every_field, train_fields

HERE = Path(__file__).parent

RECENT = 40


@pytest.fixture(autouse=True)
def cache_small_files(monkeypatch):
    """Cache files of any length, rewritten after any growth: small files show every rule."""
    monkeypatch.setattr(history_module, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(history_module, "CACHE_REWRITE_BYTES", 0)


@pytest.fixture
def parsed_pieces(monkeypatch):
    """The pieces of events.jsonl parsed during a load, as bytes."""
    seen: list[bytes] = []
    parse = history_module._parse_piece

    def recording(piece: bytes):
        seen.append(piece)
        return parse(piece)
    monkeypatch.setattr(history_module, "_parse_piece", recording)
    return seen


def write(path, first_step: int, last_step: int, resumed: int | None = None,
          started: bool = True) -> None:
    """A session's events appended: started (resumed from `resumed`), train every step,
    val every 5, a checkpoint and a warning every 10."""
    writer = ev.EventWriter(path)
    try:
        if started:
            writer.write(ev.STARTED, **{**every_field(ev.STARTED), "resumed_from_step": resumed})
        for step in range(first_step, last_step + 1):
            writer.write(ev.TRAIN, **train_fields(step))
            if step % 5 == 0:
                writer.write(ev.VAL, iteration=step, val_loss=3.0 / step, val_time=0.5)
            if step % 10 == 0:
                writer.write(ev.CHECKPOINT, **{**every_field(ev.CHECKPOINT), "iteration": step})
                writer.write(ev.WARNING, code="slow", message=f"step {step} was slow")
    finally:
        writer.close()


def assert_as_parsed(path) -> None:
    """A cached load equals reading the whole file with the tolerant reader (and the
    notable events equal an uncached load's)."""
    got = load_history(path, recent=RECENT, cached=True)
    expected = RunMetrics()
    expected.ingest(ev.read_events(path))
    assert_same_metrics(got.metrics, expected)
    assert got.metrics.samples == expected.samples
    assert got.metrics.started == expected.started
    assert got.recent == load_history(path, recent=RECENT).recent
    assert len(got.recent) <= RECENT
    assert got.offset == path.stat().st_size


def test_a_cached_history_equals_the_parsed_one_and_reads_nothing_again(tmp_path,
                                                                         parsed_pieces):
    path = tmp_path / "events.jsonl"
    write(path, 1, 60)
    assert_as_parsed(path)
    assert (tmp_path / CACHE_FILE).exists()

    parsed_pieces.clear()
    assert_as_parsed(path)
    # The second cached load read no line of the file; the uncached one for `recent` did.
    assert len(parsed_pieces) == 1


def test_lines_appended_since_are_folded_onto_the_cache(tmp_path, parsed_pieces):
    path = tmp_path / "events.jsonl"
    write(path, 1, 60)
    load_history(path, recent=RECENT, cached=True)
    before = path.stat().st_size
    write(path, 61, 75, started=False)

    parsed_pieces.clear()
    assert_as_parsed(path)
    assert parsed_pieces[0] == path.read_bytes()[before:]  # only the new lines were read


def test_a_resume_appended_since_drops_the_cached_points_after_its_step(tmp_path):
    path = tmp_path / "events.jsonl"
    write(path, 1, 60)
    load_history(path, recent=RECENT, cached=True)
    write(path, 41, 70, resumed=40)
    assert_as_parsed(path)
    assert list(load_history(path, cached=True).metrics.series["train_loss"].steps) == \
        list(range(1, 71))


def test_a_file_cut_shorter_is_read_again(tmp_path, parsed_pieces):
    path = tmp_path / "events.jsonl"
    write(path, 1, 60)
    load_history(path, recent=RECENT, cached=True)
    lines = path.read_bytes().splitlines(keepends=True)
    with open(path, "r+b") as handle:  # the same file, in place
        handle.truncate(sum(map(len, lines[:len(lines) // 2])))

    parsed_pieces.clear()
    assert_as_parsed(path)
    assert parsed_pieces[0] == path.read_bytes()


@pytest.mark.parametrize("how", ["in place, same length", "replaced, longer"])
def test_a_file_rewritten_is_read_again(tmp_path, how):
    path = tmp_path / "events.jsonl"
    write(path, 1, 60)
    load_history(path, recent=RECENT, cached=True)
    data = path.read_bytes()
    if how == "in place, same length":
        # Another last warning, not one byte longer, its time stamp only a nanosecond later.
        stat = path.stat()
        changed = data[:-400] + data[-400:].replace(b"step 60 was", b"step 61 was")
        assert changed != data and len(changed) == len(data)
        with open(path, "r+b") as handle:
            handle.write(changed)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    else:
        other = tmp_path / "other.jsonl"
        write(other, 1, 80)
        os.replace(other, path)
    assert_as_parsed(path)


@pytest.mark.parametrize("damage", ["empty", "cut short", "a byte changed in the arrays",
                                    "a byte changed in the header", "a count too large",
                                    "not a cache"])
def test_a_damaged_cache_is_ignored_and_made_again(tmp_path, damage):
    path = tmp_path / "events.jsonl"
    write(path, 1, 60)
    load_history(path, recent=RECENT, cached=True)
    cache = cache_path(path)
    data = bytearray(cache.read_bytes())
    if damage == "empty":
        data = bytearray()
    elif damage == "cut short":
        data = data[:len(data) - 100]
    elif damage == "a byte changed in the arrays":
        data[-3] ^= 0x40
    elif damage == "a byte changed in the header":
        data[20] ^= 0x01
    elif damage == "a count too large":  # the header still JSON, its length kept
        data = bytearray(bytes(data).replace(b'["train_loss",', b'["train_loss",9' , 1))
        length = int.from_bytes(data[4:8], "little") + 1
        data[4:8] = length.to_bytes(4, "little")
    else:
        data = bytearray(b'{"v": 1, "type": "train"}\n' * 10)
    cache.write_bytes(bytes(data))
    assert read_cache(path, RECENT) is None

    assert_as_parsed(path)
    assert read_cache(path, RECENT) is not None  # made again from the file


def test_a_cache_made_by_other_rules_is_ignored(tmp_path, monkeypatch):
    path = tmp_path / "events.jsonl"
    write(path, 1, 60)
    load_history(path, recent=RECENT, cached=True)
    assert read_cache(path, RECENT) is not None
    monkeypatch.setattr(metrics_cache, "_RULES", metrics_cache.rules_checksum() + 1)
    assert read_cache(path, RECENT) is None


def test_a_cache_serves_a_reader_that_wants_more_notable_events_only_if_it_kept_them(tmp_path):
    path = tmp_path / "events.jsonl"
    write(path, 1, 200)
    keep_cache(path)
    assert read_cache(path, metrics_cache.NOTABLE_KEPT) is not None
    assert read_cache(path, metrics_cache.NOTABLE_KEPT + 1) is None
    for recent in (0, 1, RECENT, metrics_cache.NOTABLE_KEPT):
        got = load_history(path, recent=recent, cached=True).recent
        assert got == load_history(path, recent=recent).recent and len(got) == recent


def test_the_parallel_load_keeps_and_reads_the_cache_alike(tmp_path):
    path = tmp_path / "events.jsonl"
    write(path, 1, 300)
    first = load_history_parallel(path, RECENT, parts=2, min_bytes=0, cached=True)
    assert read_cache(path, RECENT) is not None
    again = load_history_parallel(path, RECENT, parts=2, min_bytes=0, cached=True)
    expected = RunMetrics()
    expected.ingest(ev.read_events(path))
    for history in (first, again):
        assert_same_metrics(history.metrics, expected)
        assert history.recent == load_history(path, recent=RECENT).recent


def test_a_short_history_keeps_no_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(history_module, "CACHE_MIN_BYTES", 1024 * 1024)
    path = tmp_path / "events.jsonl"
    write(path, 1, 60)
    load_history(path, recent=RECENT, cached=True)
    assert not cache_path(path).exists()


def test_a_store_that_cannot_be_written_still_reads(tmp_path):
    """A store where no byte can be written (a full disk, a quota; here a file size limit of
    0, RLIMIT_FSIZE, which binds root too, where a read-only folder would not) reads as
    parsed, keeps no cache and leaves no temporary file. The same load without the limit
    writes the cache: the limit, not a threshold, is what kept it out."""
    path = tmp_path / "run" / "events.jsonl"
    path.parent.mkdir()
    write(path, 1, 60)
    here = [str(HERE), str(HERE.parent)]
    script = (f"import sys; from pathlib import Path; sys.path[:0] = {here!r}\n"
              "import test_metrics_cache as t\n"
              "t.history_module.CACHE_MIN_BYTES = 0\n"
              f"t.assert_as_parsed(Path({str(path)!r}))\n"
              "print('read')\n")

    def no_bytes() -> None:  # in the child: a write past 0 bytes fails (EFBIG), no signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    limited = subprocess.run([sys.executable, "-c", script], preexec_fn=no_bytes,
                             capture_output=True, text=True, timeout=120)
    assert limited.returncode == 0 and limited.stdout == "read\n", limited.stderr
    assert sorted(path.parent.iterdir()) == [path]  # no cache, no temporary file
    unlimited = subprocess.run([sys.executable, "-c", script], capture_output=True,
                               text=True, timeout=120)
    assert unlimited.returncode == 0, unlimited.stderr
    assert cache_path(path).exists()


def test_a_grpo_runs_rewards_and_completions_come_back_from_the_cache(tmp_path, parsed_pieces):
    path = tmp_path / "events.jsonl"
    writer = ev.EventWriter(path)
    try:
        writer.write(ev.STARTED, **{**every_field(ev.STARTED), "resumed_from_step": None})
        for step in range(1, 31):
            writer.write(ev.TRAIN, **train_fields(step), reward_mean=step / 30,
                         reward_std=0.1, reward_means={"exact_answer": step / 60, "f.py:g": 1.0},
                         kl=0.01 * step, completion_length=12.5, clip_fraction=0.05)
            if step % 10 == 0:
                writer.write(ev.VAL, iteration=step, val_loss=0.1, val_time=0.5,
                             reward_mean=step / 40)
                writer.write("sample", iteration=step, prompt="2+2?", text=f"it is {step}",
                             answer="4", reward=float(step == 4), rewards={"exact_answer": 0.0})
    finally:
        writer.close()
    assert_as_parsed(path)  # the first load writes the cache
    parsed_pieces.clear()
    cached = load_history(path, recent=RECENT, cached=True).metrics
    assert parsed_pieces == []  # read from the cache alone
    assert cached.reward_means == {"exact_answer": 0.5, "f.py:g": 1.0}
    assert list(cached.series["reward_mean"].values)[-1] == 1.0
    assert [s["text"] for s in cached.samples[30]] == ["it is 30"]
