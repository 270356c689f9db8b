"""GRPO and distillation runs set up in the new-run form and trained for real: the sample
model and the shipped datasets picked from the lists, the objective's settings typed key by
key, s pressed, and the real trainer (started through the Supervisor) to the end; then what the
run wrote and what the live metrics show of it.

Nothing is fixed here: the real budget, the real row count. Each run is kept to a few short
steps (groups of two, answers of a few tokens), and the tests wait for the run to end, however
long the machine takes.
"""

from __future__ import annotations

import shutil

from conftest import SAMPLE_DATA
from test_setup_flow import form_on
from test_setup_helpers import settle, type_into, until
from test_setup_helpers import setup_dashboard as dashboard

from zyquo_tui.core.events.protocol import GRPO_METRICS, read_events
from zyquo_tui.core.memory.advisor import Verdict
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.runs.settings import SETTINGS
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.messages import RunEnded
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen
from zyquo_tui.dashboard.widgets.completions_panel import CompletionsPanel
from zyquo_tui.dashboard.widgets.loss_chart import LossChart
from zyquo_tui.dashboard.widgets.metric_sparkline import MetricSparkline

RL = str(SAMPLE_DATA / "rl")
COMPLETIONS = str(SAMPLE_DATA / "completions")
# A few steps of two prompts, two answers each, of at most eight tokens: seconds of training.
SHORT_GRPO = (("reward_functions", "exact_answer, length"), ("group_size", "2"),
              ("max_completion_tokens", "8"), ("iters", "6"), ("batch_size", "2"),
              ("steps_per_report", "1"), ("steps_per_eval", "3"), ("save_every", "6"),
              ("val_batches", "1"))


async def start_from_the_form(pilot, screen) -> str:
    """Leave the fields, check the plan fits, press s: the run's id, once its live metrics
    are open."""
    app = pilot.app
    await pilot.press("escape")  # leave the field: letters act again
    await settle(pilot, screen)
    assert not screen.field_errors, screen.field_errors
    assert screen.plan.assessment.verdict is Verdict.FITS
    await pilot.press("s")
    await until(pilot, lambda: isinstance(app.screen, LiveMetricsScreen),
                lambda: "the new run's live metrics; notifications: "
                f"{[n.message for n in app._notifications]}", timeout=120)
    return app.screen.run_id


async def until_ended(pilot, run_id: str) -> RunState:
    service = pilot.app.service
    await until(pilot, lambda: (service.run(run_id) is not None
                                and service.run(run_id).state.is_terminal),
                "the run to end", timeout=600)
    return service.run(run_id).state


async def test_a_grpo_run_set_up_in_the_form_trains_and_shows_its_rewards(models):
    """The sample model and the shipped prompts with answers (rl) from the lists: grpo is the
    objective; two rewards, groups of two, short answers and six steps typed into the fields;
    s starts it. It completes, and its notification gives its mean reward; each step's event
    has the grpo figures (reward mean and spread, each reward's mean, KL, answer length,
    clipped share), and the live metrics draw the reward sparkline from them, chart the
    reward and show the last evaluation's completions with their rewards."""
    app = dashboard()
    run_id = None
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            screen = await form_on(pilot, "rl")
            assert screen.data_path == RL and screen.objective == "grpo"
            for key, value in SHORT_GRPO:
                await type_into(pilot, screen, key, value)
            run_id = await start_from_the_form(pilot, screen)
            metrics_screen = app.screen
            run = RunStore().get(run_id)
            assert run.objective == "grpo" and run.data == RL and run.hyperparameters.iters == 6
            assert run.hyperparameters.zyquo_tui == {
                "objective": "grpo", "reward_functions": ["exact_answer", "length"],
                "group_size": 2, "max_completion_tokens": 8}

            state = await until_ended(pilot, run_id)
            assert state is RunState.COMPLETED, RunStore().get(run_id).failure
            events = read_events(RunStore().run_dir(run_id) / "events.jsonl")
            trains = [e for e in events if e["type"] == "train"]
            assert [e["iteration"] for e in trains] == list(range(1, 7))
            for train in trains:
                assert set(GRPO_METRICS) <= set(train), train
                assert set(train["reward_means"]) == {"exact_answer", "length"}
                assert 0 < train["completion_length"] <= 8 + 1  # the stop token counts
            samples = [e for e in events if e["type"] == "sample"]
            assert {s["iteration"] for s in samples} == {1, 3, 6}
            # The notification says how it did by its reward (its validation loss is the
            # GRPO objective, near 0 whatever it learnt). Asked for here, not awaited: a run
            # that ends between two polls of the dashboard is not notified.
            app.on_run_ended(RunEnded(run_id, "completed"))
            await pilot.pause()
            said = f"{run.name} completed 6 steps; mean reward {trains[-1]['reward_mean']:.4f}."
            assert said in [n.message for n in app._notifications]

            feed = app.service.feed(run_id)
            await until(pilot, lambda: feed.loaded and feed.metrics.step == 6,
                        "the last step in the live metrics")
            metrics_screen.redraw()
            await pilot.pause()
            assert metrics_screen.grpo
            reward = metrics_screen.query_one("#spark-reward_mean", MetricSparkline)
            assert reward.display
            assert len(reward.values) == 6 and reward.current != "–"
            assert metrics_screen.query_one(LossChart).title == "Reward"
            panel = metrics_screen.query_one(CompletionsPanel)
            assert panel.display and panel.step == 6
            last = [s for s in samples if s["iteration"] == 6]
            assert f"› {last[0]['prompt']}" in str(panel.text)
        finally:
            if run_id is not None and not app.service.store.get(run_id).state.is_terminal:
                app.service.supervisor.cancel(run_id)


async def test_a_distill_run_set_up_in_the_form_trains_from_the_sample_teacher(models,
                                                                             teacher_model):
    """The sample model and the shipped completions from the lists; → turns sft to distill,
    the sample's teacher is typed by its name, a few steps are set: s starts it, and it
    completes with the teacher's folder in its settings and a falling loss (the KL from the
    teacher) in its events."""
    installed = shutil.copytree(teacher_model, models["zyquo-tiny"].parent / teacher_model.name)
    app = dashboard()
    run_id = None
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            screen = await form_on(pilot, "completions")
            assert screen.objective == "sft"
            screen.query_one("#objective").focus()
            await pilot.press("right")  # sft → distill
            assert screen.objective == "distill"
            for key, value in (("teacher", "zyquo-tiny-teacher"), ("iters", "4"),
                               ("batch_size", "2"), ("learning_rate", "1e-3"),
                               ("steps_per_report", "1"), ("steps_per_eval", "4"),
                               ("save_every", "4"), ("val_batches", "1")):
                await type_into(pilot, screen, key, value)
            run_id = await start_from_the_form(pilot, screen)
            run = RunStore().get(run_id)
            assert run.objective == "distill" and run.data == COMPLETIONS
            assert SETTINGS["teacher"].get(run.hyperparameters) == str(installed.resolve())

            state = await until_ended(pilot, run_id)
            assert state is RunState.COMPLETED, RunStore().get(run_id).failure
            events = read_events(RunStore().run_dir(run_id) / "events.jsonl")
            losses = [e["train_loss"] for e in events if e["type"] == "train"]
            assert len(losses) == 4 and losses[-1] < losses[0]
        finally:
            if run_id is not None and not app.service.store.get(run_id).state.is_terminal:
                app.service.supervisor.cancel(run_id)
