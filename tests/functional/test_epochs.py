"""A run by epochs sees every training row that many times, in mlx-lm's batch order.

The runs here are real: the trainer subprocess on the sample model and the sample data, with
its batch stream (trainer/batches.py, mlx-lm's iterate_batches line for line) counting the
rows of each batch it makes. The rule for rows that fill no whole batch (core/runs/epochs.py):
mlx-lm trains whole batches only, so they are never trained; the run says so when it is made.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.setup.draft import RunDraft
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.resources import sample_data_dir

DATA = sample_data_dir() / "completions"
TRAIN_ROWS = 225  # sample_data/completions/train.jsonl
# Quick steps: few validations and checkpoints.
QUIET = {"steps_per_eval": 90, "val_batches": 1, "save_every": 90,
         "steps_per_report": 50, "max_seq_length": 64, "num_layers": -1}

# The trainer as `python -m zyquo_tui.trainer RUN_DIR` runs it, with its batch stream recording
# the rows (indices into train.jsonl) of every batch it makes.
COUNTING_TRAINER = """
import json, sys
from zyquo_tui.trainer import batches

seen = []
make_batch = batches.BatchStream._make_batch

def counted(self, indices):
    seen.append([int(i) for i in indices])
    return make_batch(self, indices)

batches.BatchStream._make_batch = counted
from zyquo_tui.trainer.__main__ import main

status = main([sys.argv[1]])
open(sys.argv[2], "w").write(json.dumps(seen))
sys.exit(status)
"""


def train_by_epochs(model: Path, tmp_path: Path, **settings) -> tuple[RunDraft, list, list]:
    """Make a run through its draft (as `runs new --epochs` does), train it for real; the
    draft, the rows of each batch it trained, and its events."""
    draft = RunDraft.from_choices(model=str(model), data=str(DATA),
                                  settings={**QUIET, **settings})
    store = RunStore().ensure()
    run = draft.to_run()
    store.create(run)
    seen_file = tmp_path / "seen.json"
    done = subprocess.run([sys.executable, "-c", COUNTING_TRAINER,
                           str(store.run_dir(run.id)), str(seen_file)],
                          capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert store.get(run.id).state is RunState.COMPLETED
    return draft, json.loads(seen_file.read_text()), read_events(store.events_path(run.id))


def test_a_two_epoch_run_on_the_sample_data_sees_each_training_row_exactly_twice(
        tiny_model, tmp_path):
    """225 rows at batch 5 make 45 whole batches an epoch: 2 epochs are 90 iterations, and
    every row of train.jsonl is trained in exactly two of them."""
    draft, batches, events = train_by_epochs(tiny_model, tmp_path, epochs=2, batch_size=5)

    assert draft.hyperparameters.iters == 90
    assert len(batches) == 90
    seen = Counter(row for batch in batches for row in batch)
    assert sorted(seen) == list(range(TRAIN_ROWS))
    assert set(seen.values()) == {2}
    # Each pass is a whole epoch: the first 45 batches hold every row once.
    assert sorted(row for batch in batches[:45] for row in batch) == list(range(TRAIN_ROWS))
    # The trainer ran the resolved iterations, and the runs list's ETA counts down from them.
    started = next(event for event in events if event["type"] == "started")
    assert started["iters"] == 90
    metrics = RunMetrics()
    metrics.ingest(events)
    assert metrics.iters == 90 and metrics.step == 90
    assert not draft.warnings()


def test_rows_that_fill_no_whole_batch_are_never_trained_and_the_draft_says_so(
        tiny_model, tmp_path):
    """225 rows at batch 4: 56 whole batches an epoch, and one row over. mlx-lm trains whole
    batches only (its iterator's range stops at the last whole one), so that row, the last in
    its order (train.jsonl's last: its rows all have two keys, and mlx-lm sorts by the number
    of keys of the raw row), is seen no time at all, and every other row exactly twice."""
    draft, batches, _ = train_by_epochs(tiny_model, tmp_path, epochs=2, batch_size=4)

    assert draft.hyperparameters.iters == 112
    seen = Counter(row for batch in batches for row in batch)
    assert set(seen.values()) == {2}
    assert set(range(TRAIN_ROWS)) - set(seen) == {TRAIN_ROWS - 1}
    assert draft.warnings() == [
        "completions: train.jsonl's 225 rows make 56 whole batches of 4 and leave 1 row over "
        "(the last in mlx-lm's order): mlx-lm trains whole batches only, so it is never "
        "trained, in any epoch; a batch_size that divides 225 (1, 3, 5, 9) trains every row."]


def test_a_distributed_run_splits_each_batch_so_an_epoch_is_the_same_iterations(tiny_model):
    """Two ranks take alternate rows of each batch (mlx-lm's comm_group offset and step):
    batch_size is the run's, so the ranks' batches together are the single run's, and the
    draft makes the same iterations of the same epochs."""
    import numpy as np
    from mlx_lm import load
    from mlx_lm.tuner.datasets import CacheDataset, load_local_dataset

    from zyquo_tui.trainer.batches import BatchStream

    _, tokenizer = load(str(tiny_model))
    train = CacheDataset(load_local_dataset(DATA, tokenizer, type("A", (), {})())[0])

    def rows_per_batch(rank: int, world_size: int) -> list[list[int]]:
        stream = BatchStream(train, 4, 64, rank=rank, world_size=world_size)
        np.random.seed(0)
        order = [stream.batch_idx[i] for i in np.random.permutation(len(stream.batch_idx))]
        return order

    single = rows_per_batch(0, 1)
    ranks = [rows_per_batch(rank, 2) for rank in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == len(single) == TRAIN_ROWS // 4
    assert [sorted(a + b) for a, b in zip(*ranks)] == [sorted(batch) for batch in single]

    alone = RunDraft.from_choices(data=str(DATA), settings={"epochs": 3, "batch_size": 4})
    two = RunDraft.from_choices(data=str(DATA), settings={"epochs": 3, "batch_size": 4,
                                                          "ranks": 2})
    assert alone.hyperparameters.iters == two.hyperparameters.iters == 3 * 56
