"""RunStatus: a run's state, what it trains, and where it is: step, bar, elapsed, ETA."""

from __future__ import annotations

from rich.text import Text

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.formatting import basename, fmt_duration, fmt_rate, progress_bar
from zyquo_tui.core.runs.run import Run
from zyquo_tui.dashboard.widgets.live_text import LiveText
from zyquo_tui.dashboard.widgets.runs_table import STATE_LOOK

STOP_WORDS = {"early_stopping": "stopped early", "diverged": "stopped: diverging"}


def stop_words(summary: dict) -> str:
    """A few words on why the trainer stopped a run before its last step, and its best step."""
    reason = summary.get("stop_reason")
    if not reason:
        return ""
    best = summary.get("best_checkpoint_step", summary.get("best_val_step"))
    return STOP_WORDS.get(reason, f"stopped: {reason}") + (
        f" · best {best}" if best is not None else "")


class RunStatus(LiveText):
    """Two lines at the top of the run screen: who and what; then progress and timing."""

    DEFAULT_CSS = """
    RunStatus { height: 2; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, run: Run, metrics: RunMetrics | None, *, elapsed: float | None,
             queue_position: int | None, waiting_for: str | None = None) -> None:
        symbol, style = STATE_LOOK.get(run.state.value, ("?", ""))
        first = Text()
        first.append(f"{symbol} {run.state.value}", style=style)
        if queue_position:
            first.append(f" #{queue_position}", style=style)
            if waiting_for:  # no run holds the machine: the server does, with models loaded
                first.append(f" · waiting for {waiting_for}", style=style)
        first.append("  ")
        first.append(run.name, style="bold")
        objective = f" {run.objective}" if run.objective != "sft" else ""
        data = f" · {basename(run.data)}" if run.data else ""  # a served run has none
        first.append(f"  {run.method.value}{objective} · {basename(run.model)}{data}"
                     f" · {run.id}", style="dim")

        iters = run.planned_steps
        step = metrics.step if metrics is not None and metrics.started else \
            (run.summary or {}).get("step", 0)
        second = Text()
        fraction = min(1.0, step / iters) if iters else None
        second.append(f"step {step}/{iters or '?'} ")
        filled, empty = progress_bar(fraction, 20)
        second.append(filled, style="green" if run.state.is_active else "")
        second.append(empty, style="dim")
        if fraction is not None:
            second.append(f" {fraction * 100:3.0f}%")
        second.append(f"   elapsed {fmt_duration(elapsed)}")
        eta = metrics.eta_seconds() if metrics is not None and run.state.is_active else None
        if eta is not None:
            second.append(f"   ETA {fmt_duration(eta)}", style="bold")
        stopped = stop_words(run.summary or {})
        if stopped:
            second.append(f"   {stopped}", style="bold")
        if metrics is not None and run.state.is_active:
            speed = metrics.series["iterations_per_second"].last
            if speed:
                second.append(f"   {fmt_rate(speed)} it/s")
        if run.memory_steps:  # out of memory, resumed one rung down the ladder
            second.append(f"   ↓{len(run.memory_steps)} {run.memory_steps[-1].get('change')}",
                          style="bold magenta")
        self.text = Text("\n").join((first, second))
