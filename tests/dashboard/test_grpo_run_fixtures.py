"""A grpo run's events as the trainer writes them (RL-SPEC: docs/EVENTS.md's grpo fields),
synthesized with fixed figures and times for the live-metrics tests and snapshots. The tests
at the bottom check that the metrics read them back as intended."""

from __future__ import annotations

import math

from test_dashboard_fixtures import (
    T0,
    event,
    make,
    summary_of,
    training_events,
    write_checkpoints,
    write_events,
)

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore

GRPO_RUNNING = "20251129-091500-000-9a7b"
GRPO_DONE = "20251129-090000-000-8c6d"
SFT_DONE = "20251129-080000-000-a1b2"
REWARDS = ["exact_answer", "format"]
WEIGHTS = [1.0, 0.5]
GRPO_SETTINGS = {"objective": "grpo", "reward_functions": REWARDS, "reward_weights": WEIGHTS,
                 "group_size": 8}
# (prompt, the row's answer, an early completion, a late one)
PROMPTS = (
    ("What is 17 plus 25?", "42", "Seventeen and twenty-five make a number.",
     "17 + 25 = 42. The answer is 42."),
    ("Tom has 3 bags of 4 apples. How many apples?", "12", "Tom has bags and apples.",
     "3 bags of 4 apples is 3 × 4 = 12. The answer is 12."),
    ("What is 9 times 7?", "63", "9 times 7 is 56.", "9 × 7 = 63. The answer is 63."),
)


def grpo_figures(step: int) -> dict:
    """A grpo run's train figures at a step: each reward's mean rises (the format first, then
    the exact answer), the KL to the reference grows from 0, answers get shorter, a few tokens
    are clipped, and the loss (the GRPO objective) stays near 0."""
    exact = min(0.9, 0.05 + 0.6 * (1 - math.exp(-step / 120)) + 0.04 * math.sin(step * 0.8))
    form = min(1.0, 0.3 + 0.65 * (1 - math.exp(-step / 60)) + 0.03 * math.sin(step * 1.1))
    return {
        "train_loss": 0.02 * math.sin(step * 0.5) + 0.004 * step / 30,
        "reward_mean": WEIGHTS[0] * exact + WEIGHTS[1] * form,
        "reward_std": 0.45 - 0.12 * (1 - math.exp(-step / 150)) + 0.02 * math.cos(step),
        "reward_means": {REWARDS[0]: exact, REWARDS[1]: form},
        "kl": 0.031 * (1 - math.exp(-step / 100)) + 0.002 * abs(math.sin(step * 0.3)),
        "completion_length": 22 + 36 * math.exp(-step / 90) + 2 * math.sin(step * 0.6),
        "clip_fraction": 0.02 + 0.01 * math.sin(step * 0.4) ** 2,
    }


def completion(step: int, index: int) -> tuple[str, float, dict]:
    """The completion of a prompt at an evaluation, its weighted reward and each reward's."""
    prompt, answer, early, late = PROMPTS[index]
    text = early if step < 100 or (index == 2 and step < 150) else late
    rewards = {REWARDS[0]: float(answer in text), REWARDS[1]: float("The answer is" in text)}
    return text, sum(w * rewards[name] for w, name in zip(WEIGHTS, REWARDS)), rewards


def grpo_events(iters: int, upto: int, *, start: float, first: int = 1, report: int = 10,
                evaluate: int = 50, started: bool = True) -> list[dict]:
    """A grpo run's events from step `first` to `upto`, as the trainer writes them: train
    events with the grpo fields beside the usual ones, val events with the mean reward, and
    at each evaluation a sample event per validation prompt (answer, reward, rewards)."""
    events = [event("started", start, pid=4242, host="mini", iters=iters,
                    resumed_from_step=None, dataset={"train": 240, "valid": 24},
                    parameters={"total": 494_000_000, "trainable": 1_081_344})] \
        if started else []
    for step in range(first, upto + 1):
        now = start + 8 + step * 2.0
        if step == 1 or step % evaluate == 0:
            figures = grpo_figures(step - 1)  # validation before the step's update
            events.append(event("val", now, iteration=step, val_loss=figures["train_loss"],
                                val_time=4.2, reward_mean=figures["reward_mean"] - 0.05))
            for index, (prompt, answer, _, _) in enumerate(PROMPTS):
                text, reward, rewards = completion(step, index)
                events.append(event("sample", now, iteration=step, prompt=prompt, text=text,
                                    answer=answer, reward=reward, rewards=rewards))
        if step % report == 0:
            figures = grpo_figures(step)
            events.append(event(
                "train", now, iteration=step, train_loss=figures["train_loss"],
                learning_rate=1e-6, iterations_per_second=0.5, tokens_per_second=610.0,
                trained_tokens=step * 1900, peak_memory_bytes=int(5.6e9 + step * 1e5),
                peak_rss_bytes=int(6.1e9 + step * 1e5), reward_mean=figures["reward_mean"],
                reward_std=figures["reward_std"], reward_means=figures["reward_means"],
                kl=figures["kl"], completion_length=figures["completion_length"],
                clip_fraction=figures["clip_fraction"]))
        if step % 100 == 0:
            events.append(event("checkpoint", now, iteration=step, bytes=4_456_448,
                                adapter_file=f"adapters/{step:07d}_adapters.safetensors"))
    return events


def grpo_summary(events: list[dict]) -> dict:
    """run.json's summary as the trainer keeps it for a grpo run: the usual fields and the
    last train event's reward_mean."""
    trains = [e for e in events if e["type"] == "train"]
    return {**summary_of(events), "reward_mean": trains[-1]["reward_mean"] if trains else None}


def write_grpo_store(home) -> RunStore:
    """A running grpo run (step 180 of 300), a completed one and an SFT run beside them."""
    from test_dashboard_fixtures import alive_process

    store = RunStore(home).ensure()
    events = grpo_events(300, 180, start=T0 + 3600)
    make(store, GRPO_RUNNING, "sums", RunState.RUNNING, iters=300, data="/data/sums",
         summary=grpo_summary(events), process=alive_process(), zyquo_tui=GRPO_SETTINGS,
         steps_per_eval=50)
    write_events(store, GRPO_RUNNING, events)
    write_checkpoints(store, GRPO_RUNNING, [100], mtime_of=lambda step: T0 + 3600 + 8 + step * 2)

    events = grpo_events(200, 200, start=T0 + 1800)
    events.append(event("completed", T0 + 1800 + 8 + 200 * 2.0 + 1, iteration=200))
    make(store, GRPO_DONE, "sums short", RunState.COMPLETED, iters=200, data="/data/sums",
         summary=grpo_summary(events), process={"requested_at": T0 + 1800,
                                                "ended_at": T0 + 2210},
         zyquo_tui=GRPO_SETTINGS, steps_per_eval=50)
    write_events(store, GRPO_DONE, events)

    events = training_events(400, 400, start=T0)
    events.append(event("completed", T0 + 8 + 400 * 0.5 + 1, iteration=400))
    make(store, SFT_DONE, "support-chat lora r16", RunState.COMPLETED,
         summary=summary_of(events), process={"requested_at": T0, "ended_at": T0 + 210})
    write_events(store, SFT_DONE, events)
    return store


GRPO_FAILED = "20251129-093000-000-7e5f"
REWARD_FAILURE = {"cause": "internal",
                  "message": "The reward function rewards.py:brief raised ValueError at step "
                             "143; its traceback is in the run's log.",
                  "suggestion": "fix the reward function, then resume the run from its last "
                                "checkpoint (step 100)"}


def write_failed_grpo_store(home) -> RunStore:
    """A grpo run whose reward function failed at step 143 (its last checkpoint at 100)."""
    store = RunStore(home).ensure()
    events = grpo_events(300, 140, start=T0)
    events.append(event("failed", T0 + 8 + 143 * 2.0, iteration=143, traceback=["ValueError"],
                        **REWARD_FAILURE))
    make(store, GRPO_FAILED, "sums", RunState.FAILED, iters=300, data="/data/sums",
         summary=grpo_summary(events), zyquo_tui=GRPO_SETTINGS, steps_per_eval=50,
         failure=REWARD_FAILURE, process={"requested_at": T0, "ended_at": T0 + 300})
    write_events(store, GRPO_FAILED, events)
    write_checkpoints(store, GRPO_FAILED, [100], mtime_of=lambda step: T0 + 8 + step * 2)
    return store


# -- the fixtures read back as intended ---------------------------------------------------------


def test_a_grpo_runs_reward_climbs_and_its_samples_carry_answers_and_rewards(tmp_path):
    store = write_grpo_store(tmp_path / "home")
    assert {run.id: run.objective for run in store.list()} == {
        GRPO_RUNNING: "grpo", GRPO_DONE: "grpo", SFT_DONE: "sft"}
    metrics = RunMetrics()
    metrics.ingest(read_events(store.events_path(GRPO_RUNNING)))
    rewards = metrics.series["reward_mean"]
    assert len(rewards) == 18 and rewards.values[-1] > rewards.values[0] + 0.4
    assert metrics.series["kl"].values[0] < metrics.series["kl"].last
    assert len(metrics.series["val_reward_mean"]) == 4
    assert set(metrics.reward_means) == set(REWARDS)
    assert sorted(metrics.samples) == [1, 50, 100, 150]
    latest = metrics.samples[150]
    assert [s["reward"] for s in latest] == [1.5, 1.5, 1.5]
    assert {"answer", "reward", "rewards"} <= set(latest[0])
    done = RunMetrics()
    done.ingest(read_events(store.events_path(GRPO_DONE)))
    assert store.get(GRPO_DONE).summary["reward_mean"] == done.series["reward_mean"].last
