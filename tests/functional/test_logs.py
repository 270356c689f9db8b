"""Logs that stay small: trainer.log rotates at its size, and readers read across rotations."""

from __future__ import annotations

import asyncio
import re

from conftest import SAMPLE_DATA, zyquo_cli
from helpers import make_run

from zyquo_tui.core.processes.supervisor import Supervisor
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.logs import (
    LogReader,
    log_files,
    read_tail,
    rotate,
    rotate_if_large,
)

COMPLETIONS = SAMPLE_DATA / "completions"
MAX_BYTES = 4096
# What the trainer can print between two looks at its log's size: one step's lines.
ONE_STEP = 1024


def test_rotation_keeps_the_newest_files_and_a_reader_loses_no_line(tmp_path):
    log = tmp_path / "trainer.log"
    reader = LogReader(log)
    seen = b""
    written = []
    writer = open(log, "ab")  # noqa: SIM115 (the writer moves to each new file)
    for number in range(50):
        line = f"line {number}\n".encode()
        written.append(line)
        writer.write(line)
        writer.flush()
        if number % 7 == 6:
            if number < 30:
                seen += reader.read_new()
            rotate(log, backups=2)
            writer.close()
            writer = open(log, "ab")  # noqa: SIM115
        if number % 3 == 0 and number < 30:  # later, two rotations come between reads
            seen += reader.read_new()
    writer.close()
    seen += reader.read_new()
    reader.close()

    assert seen == b"".join(written), "every line once, in order, across seven rotations"
    assert [p.name for p in log_files(log)] == ["trainer.log.2", "trainer.log.1", "trainer.log"]
    everything = LogReader(log).read_new().decode()
    assert everything.splitlines()[-1] == "line 49"
    assert everything.splitlines()[0] == "line 35", "only the newest two rotated files stay"


def test_a_tail_reads_across_the_rotation_from_a_whole_line(tmp_path):
    log = tmp_path / "trainer.log"
    log.write_text("".join(f"old {n}\n" for n in range(100)))
    rotate(log, backups=3)
    log.write_text("new 0\nnew 1\n")

    tail = read_tail(log, 40)

    assert tail.endswith("new 0\nnew 1\n")
    assert tail.splitlines()[0].startswith("old ") and tail.splitlines()[0] in {
        f"old {n}" for n in range(100)}, "the cut line is left out"
    assert not rotate_if_large(log, 1000, 3)
    assert rotate_if_large(log, 5, 3) and not log.exists()


def test_trainer_log_stays_under_its_bound_over_a_long_verbose_run(tiny_model, isolated_home):
    (isolated_home / "config.toml").write_text(
        f"[logs]\nmax_bytes = {MAX_BYTES}\nbackups = 2\n")
    store, run = make_run(tiny_model, COMPLETIONS, iters=300, steps_per_report=1,
                          steps_per_eval=5, save_every=1000)
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    final = asyncio.run(supervisor.wait(run.id, timeout=600))
    assert final.state is RunState.COMPLETED

    log = store.log_path(run.id)
    files = log_files(log)
    # Each rotated file is the log as it was when it reached its bound.
    assert [p.name for p in files] == ["trainer.log.2", "trainer.log.1", "trainer.log"]
    for path in files:
        assert path.stat().st_size < MAX_BYTES + ONE_STEP, (path, path.stat().st_size)
    total = sum(p.stat().st_size for p in files)
    assert total < 3 * (MAX_BYTES + ONE_STEP)

    # `runs logs` reads every file in order: the steps it shows run on without a gap.
    shown = zyquo_cli("runs", "logs", run.id)
    assert shown.returncode == 0, shown.stderr
    steps = [int(m) for m in re.findall(r"^step (\d+): train loss", shown.stdout,
                                                    re.MULTILINE)]
    assert steps == list(range(steps[0], 301)) and steps[0] > 1
    assert shown.stdout.rstrip().endswith("completed 300 steps")
