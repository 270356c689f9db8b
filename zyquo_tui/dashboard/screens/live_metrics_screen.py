"""LiveMetricsScreen: one run's metrics as they arrive.

A distributed run (more than one process) shows its hosts under the status: each machine's
ranks, whether they live (checked in a worker every few seconds while the run is active) and
its memory.

A preference run (dpo, orpo) shows its reward margin and reward accuracy as two more
sparklines, and `v` switches the chart between the loss and the reward margin (train and
validation, as the loss).

A grpo run shows its mean reward, KL to the reference and answer length as sparklines (and,
where the screen has the rows, the reward's spread and the share of clipped tokens), each
reward function's mean on a line under them, the reward on the chart (`v`: the loss), and its
sampled completions with their rewards in place of the samples panel. On a short screen
(80x24) the learning rate, peak RSS and latest events give way to them.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.timer import Timer
from textual.widgets import Footer

from zyquo_tui.core.formatting import fmt_bytes, fmt_loss, fmt_number, fmt_rate
from zyquo_tui.core.system.host_checks import ranks_alive
from zyquo_tui.dashboard.messages import MetricsReceived, RunsRefreshed
from zyquo_tui.dashboard.run_feed import SMOOTHABLE
from zyquo_tui.dashboard.screens.run_verbs import VERB_BINDINGS
from zyquo_tui.dashboard.screens.run_view_screen import RunViewScreen
from zyquo_tui.dashboard.widgets.completions_panel import CompletionsPanel
from zyquo_tui.dashboard.widgets.failure_panel import FailurePanel
from zyquo_tui.dashboard.widgets.loss_chart import LossChart
from zyquo_tui.dashboard.widgets.metric_sparkline import MetricSparkline
from zyquo_tui.dashboard.widgets.rank_hosts import (
    Machine,
    RankHosts,
    machines_of,
    world_size,
)
from zyquo_tui.dashboard.widgets.recent_events import RecentEvents
from zyquo_tui.dashboard.widgets.eval_line import EvalLine
from zyquo_tui.dashboard.widgets.reward_means import RewardMeans
from zyquo_tui.dashboard.widgets.run_status import RunStatus
from zyquo_tui.dashboard.widgets.samples_panel import SamplesPanel
from zyquo_tui.dashboard.widgets.title_bar import TitleBar

# Live metrics redraw the screen at most this often (a key press redraws at once).
REDRAW_SECONDS = 0.5
# A distributed run's ranks are checked this often while it is active (another host's over
# SSH, in a worker).
RANKS_CHECK_SECONDS = 5.0

SPARKLINES = (
    ("train_loss", "train loss", fmt_loss),
    ("val_loss", "val loss", fmt_loss),
    ("tokens_per_second", "tokens/s", fmt_rate),
    ("learning_rate", "learn rate", fmt_number),
    ("peak_memory_bytes", "peak MLX", fmt_bytes),
    # The trainer process's peak resident footprint (RSS): MLX's figure can miss memory it
    # really holds.
    ("peak_rss_bytes", "peak RSS", fmt_bytes),
)


def fmt_fraction(value: float | None) -> str:
    return fmt_number(value) if value is None else f"{value * 100:.0f}%"


# A preference run's own, after the others: how far chosen answers score above rejected ones
# (the implicit reward: beta times the log-ratio against the reference), and how often.
PREFERENCE_SPARKLINES = (
    ("reward_margin", "margin", fmt_loss),
    ("reward_accuracy", "reward acc", fmt_fraction),
)


def fmt_tokens(value: float | None) -> str:
    return fmt_number(value) if value is None else f"{value:.1f} tok"


# A grpo run's own (docs/EVENTS.md): the mean reward of its sampled answers, how far the
# policy is from its reference, how long its answers are; then, where the screen has the
# rows (-grpo-extra: not on a short one), the reward's spread within groups and the share of
# answer tokens whose probability ratio was clipped.
GRPO_SPARKLINES = (
    ("reward_mean", "reward", fmt_loss, ""),
    ("kl", "KL", fmt_number, ""),
    ("completion_length", "length", fmt_tokens, ""),
    ("reward_std", "reward sd", fmt_loss, "-grpo-extra"),
    ("clip_fraction", "clipped", fmt_fraction, "-grpo-extra"),
)
# What the chart can show: (title, train series, validation series).
CHART_VIEWS = {
    "loss": ("Loss", "train_loss", "val_loss"),
    "margin": ("Reward margin", "reward_margin", "val_reward_margin"),
    "reward": ("Reward", "reward_mean", "val_reward_mean"),
}


class LiveMetricsScreen(RunViewScreen):
    """Progress, timing, a sparkline per metric with its current value, the loss chart (train
    and validation on the same axes), the latest events and, for a failed run, why and what to
    try. The data come from the run's RunFeed in the App's RunService, so leaving the screen
    stops nothing; new events redraw it as they arrive."""

    AREA = "Run"
    # -short below 30 rows (80x24): a failed run's panel then takes the events box's room, not
    # the loss chart's (styles/dashboard.tcss).
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]
    BINDINGS = [
        Binding("s", "toggle_smoothing", "Smoothing", id="run.smoothing",
                tooltip="Smooth train loss and tokens/s (raw stays faintly behind; the "
                        "learning rate is never smoothed)"),
        # Only a preference or a grpo run has it (check_action).
        Binding("v", "toggle_chart", "Chart", id="run.chart",
                tooltip="Chart the reward margin (preference runs) or the reward (grpo runs) "
                        "instead of the loss, or the loss again"),
        VERB_BINDINGS["cancel"], VERB_BINDINGS["resume"], VERB_BINDINGS["checkpoints"],
        VERB_BINDINGS["logs"],
        Binding("escape", "back", "Back", id="app.back", tooltip="Back to the runs"),
        # Out of the footer: the samples panel's border names them, and only a run with
        # samples has them.
        Binding("left_square_bracket", "earlier_samples", "Earlier samples", show=False,
                id="run.samples.earlier", tooltip="The samples of the validation before"),
        Binding("right_square_bracket", "later_samples", "Later samples", show=False,
                id="run.samples.later", tooltip="The samples of the validation after"),
        # Out of the footer (the checkpoints screen shows it, per checkpoint); in ? and ctrl+p.
        Binding("g", "try_latest", "Try", show=False, id="run.try",
                tooltip="Ask the latest checkpoint's adapter and the base model, side by side"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.feed = None
        self._failure_shown: tuple | None = None
        self._drawn_at = 0.0
        self._drawn_loaded = False
        self._redraw_timer: Timer | None = None
        self.sample_step: int | None = None  # None: follow the latest samples
        self.chart_view = "loss"  # or "margin" (a preference run's), "reward" (a grpo run's)
        self.preference: bool | None = None  # the run's objective, once read
        self.grpo: bool | None = None
        # A distributed run's machines and each rank's liveness, found in a worker.
        self.world_size: int | None = None
        self.machines: list[Machine] | None = None
        self.ranks_alive: list[bool | None] | None = None
        self._ranks_timer: Timer | None = None

    def action_try_latest(self) -> None:
        from zyquo_tui.core.store.checkpoints import list_checkpoints
        from zyquo_tui.dashboard.screens.try_screen import TryScreen

        if not list_checkpoints(self.service.store.adapters_dir(self.run_id)):
            self.notify("This run has no checkpoint yet to try.", timeout=4)
            return
        self.app.push_screen(TryScreen(self.run_id))

    def compose(self) -> ComposeResult:
        yield TitleBar("run", id="title")
        yield RunStatus(id="status")
        yield RankHosts(id="hosts")
        with Vertical(id="sparklines"):
            for key, label, _ in SPARKLINES:
                yield MetricSparkline(label, id=f"spark-{key}")
            for key, label, _ in PREFERENCE_SPARKLINES:
                yield MetricSparkline(label, id=f"spark-{key}", classes="-preference")
            # Shown for a grpo run (styles/dashboard.tcss: the screen's -grpo class).
            for key, label, _, extra in GRPO_SPARKLINES:
                yield MetricSparkline(label, id=f"spark-{key}", classes=f"-grpo {extra}")
            yield RewardMeans(id="reward-means", classes="-grpo")
            yield EvalLine(id="eval-line")
        yield LossChart(id="loss-chart")
        yield SamplesPanel(id="samples")
        yield CompletionsPanel(id="completions")
        yield RecentEvents(id="events")
        yield FailurePanel(id="failure")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        for sparkline in self.query(".-preference"):
            sparkline.display = False  # shown for a preference run
        self.query_one(RankHosts).display = False  # shown for a distributed run
        self.query_one(EvalLine).display = False  # shown for a run that evaluates
        self.feed = self.service.open_feed(self.run_id)
        self.redraw()

    def on_unmount(self) -> None:
        self.service.close_feed(self.run_id)

    # The App tells only the screen on top; shown again (after a modal, or coming back from
    # checkpoints or logs) the screen catches up on resume.
    def on_metrics_received(self, message: MetricsReceived) -> None:
        # Bursts every follow poll: redraw at most every REDRAW_SECONDS, the last one always.
        if message.run_id != self.run_id:
            return
        wait = REDRAW_SECONDS - (time.monotonic() - self._drawn_at)
        if wait <= 0 or not self._drawn_loaded:  # the history just arrived: show it now
            self.redraw()
        elif self._redraw_timer is None:
            self._redraw_timer = self.set_timer(wait, self.redraw)

    def on_runs_refreshed(self, message: RunsRefreshed) -> None:
        self.redraw()

    def on_screen_resume(self) -> None:
        self.redraw()

    def on_resize(self) -> None:
        self.call_after_refresh(self.redraw)

    def redraw(self) -> None:
        self._drawn_at = time.monotonic()
        if self._redraw_timer is not None:
            self._redraw_timer.stop()
            self._redraw_timer = None
        run = self.show_title("Run")
        if run is None:
            return
        grpo = run.objective == "grpo"
        if (run.is_preference, grpo) != (self.preference, self.grpo):
            self.preference, self.grpo = run.is_preference, grpo
            for sparkline in self.query(".-preference"):
                sparkline.display = self.preference
            self.set_class(grpo, "-grpo")
            # A grpo run is watched for its reward: the chart opens on it.
            self.chart_view = "reward" if grpo else "loss"
            self.refresh_bindings()
        service = self.service
        feed = service.feed(self.run_id) or self.feed
        loaded = feed is not None and feed.loaded
        self._drawn_loaded = loaded
        metrics = feed.metrics if loaded else None
        self.query_one(RunStatus).show(run, metrics, elapsed=service.elapsed(run),
                                       queue_position=service.queue_position(run.id),
                                       waiting_for=service.waiting_for)
        self._show_hosts(run, metrics)
        smoothing = self.app.smoothing
        chart = self.query_one(LossChart)
        if not loaded:
            # A static line, not Textual's animated loading indicator: an animation would
            # compete with the worker reading the history for the one core Python gives us.
            chart.show_message("reading the run's events…")
            return
        sparklines = SPARKLINES + (PREFERENCE_SPARKLINES if self.preference else ()) + (
            tuple(spark[:3] for spark in GRPO_SPARKLINES) if self.grpo else ())
        for key, _, formatting in sparklines:
            display = feed.display[key]
            if smoothing and key in SMOOTHABLE:
                values = [value for _, value in display.smoothed()]
            else:
                values = display.in_order()
            current = metrics.series[key].last
            self.query_one(f"#spark-{key}", MetricSparkline).show(
                values, formatting(current), key=(feed.version, smoothing))
        title, train, val = CHART_VIEWS[self.chart_view]
        chart.set_data(feed.display[train], feed.display[val],
                       metrics.iters or run.planned_steps, smoothing, feed.version,
                       title=title)
        if self.grpo:
            self.query_one(RewardMeans).show(metrics.reward_means)
        self.query_one(EvalLine).show(metrics.last_eval)
        self.samples_panel.show(metrics.samples, self.sample_step)
        self.query_one(RecentEvents).show(feed.recent)
        failure = run.failure if run.state.is_terminal else None
        if (failure, run.state) != self._failure_shown:
            self._failure_shown = (failure, run.state)
            self.query_one(FailurePanel).show(failure, run.state.value)
            self.set_class(bool(failure), "-failed")
        self.refresh_verbs()

    # -- a distributed run's hosts ---------------------------------------------------------------

    def _show_hosts(self, run, metrics) -> None:
        if self.world_size is None:
            self.world_size = world_size(run)
        hosts = self.query_one(RankHosts)
        if self.world_size < 2:
            return
        if not hosts.display:
            hosts.display = True
            self.check_ranks()
            self._ranks_timer = self.set_interval(RANKS_CHECK_SECONDS, self.check_ranks)
        if self.machines is not None:
            peaks: list[int] = []
            if metrics is not None and metrics.rank_peaks:
                peaks = metrics.rank_peaks
            elif metrics is not None and metrics.series["peak_memory_bytes"].last:
                peaks = [int(metrics.series["peak_memory_bytes"].last)]  # older runs: rank 0's
            hosts.show(run, self.machines, self.ranks_alive, peaks)

    def check_ranks(self) -> None:
        """Find the run's machines (once) and, while it is active, whether each rank lives:
        in a thread, since another host is asked over SSH."""
        run = self.service.run(self.run_id)
        if run is None or (self.machines is not None and not run.state.is_active):
            return

        def check() -> None:
            machines = machines_of(run)
            alive = ranks_alive(run.process, run.hyperparameters.zyquo_tui) \
                if run.state.is_active else None
            self.app.call_from_thread(self._ranks_checked, machines, alive)
        self.run_worker(check, thread=True, group="ranks", exclusive=True,
                        exit_on_error=False, name="check the ranks")

    def _ranks_checked(self, machines: list[Machine], alive: list[bool | None] | None) -> None:
        if not self.is_attached:
            return
        self.machines, self.ranks_alive = machines, alive
        self.redraw()

    @property
    def samples_panel(self) -> SamplesPanel:
        """The panel of the run's samples: a grpo run's completions with their rewards, or
        the answers to `--sample-prompts`."""
        return self.query_one("#completions" if self.grpo else "#samples", SamplesPanel)

    def _step_samples(self, by: int) -> None:
        panel = self.samples_panel
        if not panel.steps:
            return
        at = panel.steps.index(panel.step) if panel.step in panel.steps else len(panel.steps) - 1
        at = max(0, min(len(panel.steps) - 1, at + by))
        # Back at the latest, the panel follows new validations again.
        self.sample_step = None if at == len(panel.steps) - 1 else panel.steps[at]
        self.redraw()

    def action_earlier_samples(self) -> None:
        self._step_samples(-1)

    def action_later_samples(self) -> None:
        self._step_samples(+1)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_chart":
            return bool(self.preference or self.grpo)
        if action in ("earlier_samples", "later_samples"):
            panels = self.query("#completions" if self.grpo else "#samples")
            return bool(panels) and bool(panels.first(SamplesPanel).steps)
        return super().check_action(action, parameters)

    def action_toggle_chart(self) -> None:
        other = "reward" if self.grpo else "margin"
        self.chart_view = other if self.chart_view == "loss" else "loss"
        self.redraw()

    def action_toggle_smoothing(self) -> None:
        self.app.smoothing = not self.app.smoothing
        self.redraw()  # the chart's legend says which it is
