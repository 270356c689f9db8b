"""RecentEvents: the latest events of a run, newest at the bottom, one line each."""

from __future__ import annotations

from typing import Any, Iterable

from rich.text import Text

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.formatting import (
    fmt_bytes,
    fmt_clock,
    fmt_loss,
    fmt_number,
    fmt_rate,
)
from zyquo_tui.dashboard.widgets.live_text import LiveText

EVENT_STYLES = {ev.STARTED: "cyan", ev.TRAIN: "", ev.VAL: "yellow", ev.CHECKPOINT: "blue",
                ev.WARNING: "bold yellow", ev.COMPLETED: "bold green", ev.FAILED: "bold red",
                ev.CANCELLED: "yellow", ev.STEP_DOWN: "bold magenta"}


def _rewards(event: dict) -> str:
    """A preference run's margin and accuracy, a grpo run's mean reward and KL (empty for
    other runs)."""
    margin, accuracy = event.get("reward_margin"), event.get("reward_accuracy")
    reward, kl = event.get("reward_mean"), event.get("kl")
    if isinstance(reward, (int, float)):
        return f"  reward {fmt_loss(reward)}" + (
            f" kl {fmt_number(kl)}" if isinstance(kl, (int, float)) else "")
    if not isinstance(margin, (int, float)):
        return ""
    text = f"  margin {fmt_loss(margin)}"
    if isinstance(accuracy, (int, float)):
        text += f" acc {accuracy * 100:.0f}%"
    return text


def describe(event: dict[str, Any]) -> str:
    """One line for an event, in words."""
    kind = event.get("type", "?")
    step = event.get("iteration")
    if kind == ev.STARTED:
        resumed = event.get("resumed_from_step")
        dataset = event.get("dataset") or {}
        if resumed is not None:
            return f"resumed from step {resumed} of {event.get('iters', '?')}"
        rows = f", {dataset.get('train')} train rows" if dataset.get("train") else ""
        if event.get("iters") is None:  # a served run: its program decides the steps
            return f"started{rows}"
        return f"started {event['iters']} steps{rows}"
    if kind == ev.TRAIN:
        return (f"step {step}  train loss {fmt_loss(event.get('train_loss'))}"
                f"{_rewards(event)}  {fmt_rate(event.get('tokens_per_second'))} tok/s")
    if kind == ev.VAL:
        took = event.get("val_time")
        return (f"step {step}  val loss {fmt_loss(event.get('val_loss'))}{_rewards(event)}"
                + (f"  ({took:.1f} s)" if isinstance(took, (int, float)) else ""))
    if kind == ev.CHECKPOINT:
        size = event.get("bytes")
        return f"step {step}  checkpoint saved" + (f" ({fmt_bytes(size)})" if size else "")
    if kind == ev.WARNING:
        return f"warning: {event.get('message', event.get('code', ''))}"
    if kind == ev.COMPLETED:
        summary = event.get("summary") or {}
        if summary.get("stop_message"):
            return f"completed at step {step}: {summary['stop_message']}"
        return f"completed at step {step}"
    if kind == ev.FAILED:
        return f"failed at step {step} ({event.get('cause', '?')}): {event.get('message', '')}"
    if kind == ev.STEP_DOWN:
        where = f"from step {step}" if step is not None else "from the start"
        return f"out of memory: stepped down {event.get('rung', '?')}, {event.get('change', '')}, " \
            f"resumed {where}"
    if kind == ev.CANCELLED:
        saved = event.get("checkpoint")
        return f"cancelled at step {step}" + (
            f", checkpoint {saved}" if saved is not None else ", no checkpoint"
            if event.get("forced") else "")
    return kind


class RecentEvents(LiveText):
    """The newest events that fit the widget's height, with their time of day."""

    DEFAULT_CSS = """
    RecentEvents {
        height: 20%;
        min-height: 5;
        max-height: 12;
        border: round $panel-lighten-2;
        border-title-color: $foreground;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._events: list[dict[str, Any]] = []

    def on_mount(self) -> None:
        self.border_title = "Latest events"

    def show(self, events: Iterable[dict[str, Any]]) -> None:
        self._events = list(events)
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        rows = max(1, self.content_size.height or 3)
        latest = self._events[-rows:]
        if not latest:
            self.text = Text("no events yet", style="dim")
            return
        lines = []
        for event in latest:
            line = Text(fmt_clock(event.get("time")) + "  ", style="dim")
            line.append(describe(event), style=EVENT_STYLES.get(event.get("type"), ""))
            lines.append(line)
        self.text = Text("\n").join(lines)
