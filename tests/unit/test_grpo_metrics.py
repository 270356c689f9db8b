"""A grpo run's figures as RunMetrics keeps them: its reward, spread, KL, answer length and
clip fraction as series (the validation's reward as val_reward_mean), the latest mean of each
reward function, its completions with their rewards; whichever reader reads the file."""

from __future__ import annotations

import pytest
from test_metrics import assert_same_metrics, every_field, train_fields

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.history import load_history
from zyquo_tui.core.events.metrics import GRPO_METRICS, RunMetrics


def grpo_train(step: int) -> dict:
    return {**train_fields(step), "reward_mean": 0.1 * step, "reward_std": 0.4,
            "reward_means": {"exact_answer": 0.05 * step, "rewards.py:brief": 1.0},
            "kl": 0.01 * step, "completion_length": 40.0 - step, "clip_fraction": 0.02}


def test_a_grpo_runs_metrics_are_series_whichever_reader_reads_them(tmp_path):
    path = tmp_path / "events.jsonl"
    writer = ev.EventWriter(path)
    try:
        writer.write(ev.STARTED, **every_field(ev.STARTED))
        for step in range(1, 6):
            writer.write(ev.TRAIN, **grpo_train(step))
        writer.write(ev.VAL, iteration=5, val_loss=0.01, val_time=0.1, reward_mean=0.45)
        writer.write(ev.SAMPLE, iteration=5, prompt="What is 2 plus 3?", text="It is 5.",
                     answer="5", reward=1.0, rewards={"exact_answer": 1.0})
    finally:
        writer.close()
    expected = RunMetrics()
    expected.ingest(ev.read_events(path))
    assert expected.series["reward_mean"].values == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert expected.series["kl"].values == pytest.approx([0.01, 0.02, 0.03, 0.04, 0.05])
    assert expected.series["completion_length"].last == 35.0
    assert all(len(expected.series[name]) == 5 for name in GRPO_METRICS)
    assert expected.series["val_reward_mean"].values == [0.45]
    assert expected.reward_means == {"exact_answer": 0.25, "rewards.py:brief": 1.0}
    assert expected.samples[5][0]["reward"] == 1.0 and expected.samples[5][0]["answer"] == "5"

    history = load_history(path).metrics
    assert_same_metrics(history, expected)
    assert history.reward_means == expected.reward_means
    assert history.samples == expected.samples


def test_a_run_of_another_objective_has_no_reward_figures():
    metrics = RunMetrics()
    metrics.ingest([{"v": 1, "type": "train", "time": 1.0, **train_fields(1)}])
    assert metrics.reward_means is None
    assert all(len(metrics.series[name]) == 0 for name in (*GRPO_METRICS, "val_reward_mean"))
