"""A grpo run on the live metrics screen and the runs list: snapshots at 80x24 and 120x40 of
a fixed store (test_grpo_run_fixtures.py), and a Pilot test that follows a run whose events
grow in a real run folder while the screen is open."""

from __future__ import annotations

from test_dashboard_fixtures import T0, alive_process, event, make, write_events
from test_dashboard_snapshots import (
    BOTH,
    dashboard,
    fixed_world,
    open_run,
    runs_listed,
    until,
)
from test_grpo_run_fixtures import (
    GRPO_FAILED,
    GRPO_RUNNING,
    GRPO_SETTINGS,
    PROMPTS,
    grpo_events,
    write_failed_grpo_store,
    write_grpo_store,
)

from zyquo_tui.core.formatting import fmt_loss
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen
from zyquo_tui.dashboard.widgets.completions_panel import CompletionsPanel
from zyquo_tui.dashboard.widgets.loss_chart import LossChart
from zyquo_tui.dashboard.widgets.metric_sparkline import MetricSparkline
from zyquo_tui.dashboard.widgets.reward_means import RewardMeans

__all__ = ["fixed_world"]  # the fixture, used by name


class TestGrpoRuns:
    """A running grpo run, a completed one and an SFT run (write_grpo_store)."""

    @BOTH
    def test_live_metrics_of_a_grpo_run(self, snap_compare, fixed_world, size):
        """The running grpo run "sums": the status line reads "lora grpo · Qwen2.5-0.5B-
        Instruct-4bit · sums", step 180/300. Sparklines: train loss, val loss, tokens/s, peak
        MLX (and at 120x40 learn rate and peak RSS), then "reward" rising to 0.9541, "KL"
        rising from 0 to 0.02699, "length" falling to 28.7 tok; at 120x40 also "reward sd"
        (0.3542) and "clipped" (2%). Under them "rewards  exact_answer 0.50 · format 0.92".
        The chart's border title is "Reward": the train reward rising from about 0.1 to 1.0
        (smoothed, raw faintly behind) with the validation's orange squares below it. A panel
        "Completions at step 150 (4 of 4)" with "[ earlier ] later": each prompt (› What is
        17 plus 25?) and under it "r 1.50  answer 42  │ 17 + 25 = 42. The answer is 42."
        (two prompts at 80x24, all three at 120x40). At 120x40 the latest events below it
        end with "step 180  train loss 0.0419  reward 0.9541 kl 0.02699  610 tok/s"; at 80x24
        no events box. The footer offers v Chart beside s Smoothing."""
        store = write_grpo_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=size,
                            run_before=lambda pilot: open_run(pilot, GRPO_RUNNING))

    def test_v_charts_the_loss_and_left_bracket_an_earlier_evaluation(self, snap_compare,
                                                                      fixed_world):
        """After v and [ twice: the chart's border title is "Loss" (the GRPO objective, near 0,
        with validation squares), and the panel "Completions at step 50 (2 of 4)" shows the
        early answers: "r 0.00  answer 42  │ Seventeen and twenty-five make a number."."""
        store = write_grpo_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(
                                pilot, GRPO_RUNNING, "v", "left_square_bracket",
                                "left_square_bracket"))

    def test_a_failed_grpo_run_says_why_before_its_completions(self, snap_compare,
                                                               fixed_world):
        """At 80x24, the grpo run whose reward function failed: "✗ failed", step 140/300; the
        sparklines and rewards line as for a running run, the reward chart, and at the bottom
        the red-edged panel "failed (internal): The reward function rewards.py:brief raised
        ValueError at step 143; ..." with "Try: fix the reward function, then resume ...";
        no completions and no events box (a taller terminal shows them). The footer offers r
        Resume."""
        store = write_failed_grpo_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=(80, 24),
                            run_before=lambda pilot: open_run(pilot, GRPO_FAILED))

    @BOTH
    def test_the_runs_list_shows_a_grpo_runs_mean_reward(self, snap_compare, fixed_world, size):
        """Three runs: "grpo sums" (running, 180/300) and "grpo sums short" (completed) with
        "grpo" in magenta before their names; in the Train column their mean reward marked as
        one, "r 0.95" (the running run's latest report, from its events) and "r 1.01" (the
        completed run's run.json summary), where the SFT run "support-chat lora r16" shows
        its loss 1.0741. The Val column shows each run's validation loss (0.0042, 0.0094,
        1.5083)."""
        store = write_grpo_store(fixed_world)
        assert snap_compare(dashboard(store), terminal_size=size, run_before=runs_listed)


async def test_a_followed_grpo_run_draws_its_rewards_and_completions_as_events_arrive(
        tmp_path):
    """A grpo run in a real store, running (its process alive): the screen opens on its first
    60 steps; then the next 60 are appended to events.jsonl, as the trainer writes them. With
    smoothing off, the reward, KL and length sparklines hold exactly the figures written, in
    order, and show the last one; the reward line the last report's mean of each reward; the
    chart the reward; the completions panel the latest evaluation's prompts with their
    answers, completions and rewards."""
    store = RunStore(tmp_path / "home").ensure()
    make(store, GRPO_RUNNING, "sums", RunState.RUNNING, iters=300, data="/data/sums",
         process=alive_process(), zyquo_tui=GRPO_SETTINGS, steps_per_eval=50)
    write_events(store, GRPO_RUNNING, grpo_events(300, 60, start=T0))
    app = dashboard(store)
    app.smoothing = False
    async with app.run_test(size=(120, 40)) as pilot:
        await runs_listed(pilot)
        app.screen.table.select_run(GRPO_RUNNING)
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, LiveMetricsScreen)
        feed = app.service.feed(GRPO_RUNNING)
        await until(pilot, lambda: feed.loaded and screen.grpo)

        def sparkline(key: str) -> MetricSparkline:
            return screen.query_one(f"#spark-{key}", MetricSparkline)

        assert sparkline("reward_mean").values == [e["reward_mean"] for e in grpo_events(
            300, 60, start=T0) if e["type"] == "train"]
        assert screen.query_one(CompletionsPanel).step == 50

        more = grpo_events(300, 120, start=T0, first=61, started=False)
        write_events(store, GRPO_RUNNING, more)
        await until(pilot, lambda: feed.metrics.step == 120
                    and sparkline("reward_mean").values[-1:] == [more[-1]["reward_mean"]])
        await pilot.pause(0.6)  # the screen redraws at most every half second

        written = [e for e in grpo_events(300, 120, start=T0) if e["type"] == "train"]
        for key in ("reward_mean", "kl", "completion_length"):
            assert sparkline(key).values == [e[key] for e in written], key
        assert sparkline("reward_mean").current == fmt_loss(written[-1]["reward_mean"])
        assert sparkline("clip_fraction").current == \
            f"{written[-1]['clip_fraction'] * 100:.0f}%"
        means = str(screen.query_one(RewardMeans).text)
        assert means == "rewards     " + " · ".join(
            f"{name} {value:.2f}" for name, value in written[-1]["reward_means"].items())
        assert screen.query_one(LossChart).title == "Reward"

        panel = screen.query_one(CompletionsPanel)
        assert panel.display and not screen.query_one("#samples").display
        assert panel.border_title == "Completions at step 100 (3 of 3)"
        lines = str(panel.text).splitlines()
        samples = [e for e in more if e["type"] == "sample" and e["iteration"] == 100]
        assert len(samples) == len(PROMPTS)
        for sample, (prompt_line, answer_line) in zip(samples, zip(lines[::2], lines[1::2])):
            assert prompt_line == f"› {sample['prompt']}"
            assert answer_line == (f"  r {sample['reward']:.2f}  answer {sample['answer']}  "
                                   f"│ {sample['text']}")

        # The run ends: the last figures stay.
        write_events(store, GRPO_RUNNING, [event("completed", T0 + 300, iteration=120)])
        await until(pilot, lambda: feed.ended)
        assert sparkline("reward_mean").values[-1] == written[-1]["reward_mean"]
