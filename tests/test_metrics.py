"""RunMetrics rebuilds a run's figures from events; downsample keeps the extremes."""

from __future__ import annotations

from zyquo_tui.core.events.metrics import RunMetrics, downsample


def train(step, loss, **extra):
    return {"v": 1, "type": "train", "time": float(step), "iteration": step, "train_loss": loss,
            "learning_rate": 1e-3, "iterations_per_second": 2.0, "tokens_per_second": 100.0,
            "trained_tokens": step * 10, "peak_memory_bytes": 1000 + step, **extra}


def val(step, loss):
    return {"v": 1, "type": "val", "time": float(step), "iteration": step, "val_loss": loss}


def started(resumed=None, iters=100):
    return {"v": 1, "type": "started", "time": 0.0, "iters": iters, "resumed_from_step": resumed}


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
