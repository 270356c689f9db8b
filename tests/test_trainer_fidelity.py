"""Our trainer trains exactly as mlx-lm does: same losses as mlx-lm's own train() reports."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import SAMPLE_DATA, run_trainer
from helpers import losses_by_iteration, make_run

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.mlx_config import run_to_mlx_config

# mlx-lm's own path: what `mlx_lm lora` does in run(), with a callback that records the figures
# (run() itself would replace the callback with its own reporters).
MLX_LM_REFERENCE = textwrap.dedent("""
    import json, sys, types
    import numpy as np
    from mlx_lm import load
    from mlx_lm.lora import CONFIG_DEFAULTS, train_model
    from mlx_lm.tuner.callbacks import TrainingCallback
    from mlx_lm.tuner.datasets import load_dataset

    config = {**CONFIG_DEFAULTS, **json.loads(sys.argv[1])}
    args = types.SimpleNamespace(**config)
    reports = {"train": [], "val": []}

    class Record(TrainingCallback):
        def on_train_loss_report(self, info):
            reports["train"].append(info)
        def on_val_loss_report(self, info):
            reports["val"].append(info)

    np.random.seed(args.seed)
    model, tokenizer = load(args.model)
    train_set, valid_set, _ = load_dataset(args, tokenizer)
    train_model(args, model, train_set, valid_set, Record())
    print(json.dumps(reports))
""")


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
    ours = read_events(store.run_dir(run.id) / "events.jsonl")

    config = run_to_mlx_config(run, adapter_path=str(tmp_path / "mlx-lm-adapters"))
    config["train"] = True
    done = subprocess.run([sys.executable, "-c", MLX_LM_REFERENCE, json.dumps(config)],
                          capture_output=True, text=True, timeout=300, check=True,
                          stdin=subprocess.DEVNULL)
    theirs = json.loads(done.stdout.strip().splitlines()[-1])

    our_train = losses_by_iteration(ours, "train", "train_loss")
    their_train = {r["iteration"]: r["train_loss"] for r in theirs["train"]}
    assert sorted(our_train) == sorted(their_train)
    for step, loss in their_train.items():
        assert our_train[step] == pytest.approx(loss, abs=1e-5), step
    our_lr = losses_by_iteration(ours, "train", "learning_rate")
    for report in theirs["train"]:
        assert our_lr[report["iteration"]] == pytest.approx(report["learning_rate"], rel=1e-6)
    # mlx-lm reports a validation run during step k as iteration k - 1; we report k.
    our_val = losses_by_iteration(ours, "val", "val_loss")
    their_val = {r["iteration"] + 1: r["val_loss"] for r in theirs["val"]}
    assert sorted(our_val) == sorted(their_val)
    for step, loss in their_val.items():
        assert our_val[step] == pytest.approx(loss, abs=1e-5), step
