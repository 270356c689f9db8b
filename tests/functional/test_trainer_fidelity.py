"""Our trainer trains exactly as mlx-lm does: same losses as mlx-lm's own train() reports."""

from __future__ import annotations

import pytest
from conftest import SAMPLE_DATA, run_trainer
from helpers import (
    assert_losses_equal_mlx_lm,
    losses_by_iteration,
    make_run,
    mlx_lm_reports,
)

from zyquo_tui.core.events.protocol import read_events


@pytest.mark.parametrize("method, data, settings", [
    ("lora", "completions", {"grad_accumulation_steps": 2}),
    ("dora", "chat", {"mask_prompt": True, "seed": 3}),
    ("full", "text", {"num_layers": 1, "learning_rate": 1e-4}),
])
def test_losses_equal_mlx_lm_own_train(tiny_model, tmp_path, method, data, settings):
    # 70 steps over about 56 batches per epoch: the data order crosses an epoch boundary.
    store, run = make_run(tiny_model, SAMPLE_DATA / data, method=method, iters=70,
                          steps_per_report=7, steps_per_eval=20, val_batches=3,
                          save_every=1000, **settings)
    assert run_trainer(store.run_dir(run.id)).returncode == 0
    theirs = mlx_lm_reports(run, tmp_path)
    assert_losses_equal_mlx_lm(store, run, theirs)
    our_lr = losses_by_iteration(read_events(store.events_path(run.id)), "train",
                                 "learning_rate")
    for report in theirs["train"]:
        assert our_lr[report["iteration"]] == pytest.approx(report["learning_rate"], rel=1e-6)
