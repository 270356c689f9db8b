"""CheckpointTable: a run's saved steps, with validation loss and the best one marked."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.formatting import DASH, fmt_bytes, fmt_datetime, fmt_loss
from zyquo_tui.core.store.checkpoints import Checkpoint

COLUMNS = (("step", "Step", 8), ("val", "Val loss", 8), ("best", "", 6),
           ("resume", "Resume", 12), ("size", "Size", 10), ("saved", "Saved", 16))


class CheckpointTable(DataTable):
    """One row per checkpoint, oldest step first; the step with the lowest validation loss
    measured at it carries a "★ best" mark (a word as well as a colour, for NO_COLOR)."""

    BINDINGS = [
        Binding("enter", "select_cursor", "mlx-lm", id="checkpoints.command",
                tooltip="The mlx_lm commands that generate with this checkpoint"),
    ]
    DEFAULT_CSS = """
    CheckpointTable { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row")
        self.checkpoints: list[Checkpoint] = []
        self.best_step: int | None = None
        self._shown: list[tuple] | None = None

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, width=width, key=key)

    def show(self, checkpoints: list[Checkpoint], metrics: RunMetrics | None) -> None:
        best = metrics.best_checkpoint_step() if metrics is not None else None
        rows = []
        for checkpoint in checkpoints:
            loss = None
            if metrics is not None:
                event = metrics.checkpoints.get(checkpoint.step) or {}
                loss = event.get("val_loss", metrics.val_at(checkpoint.step))
            rows.append((
                Text(str(checkpoint.step), justify="right"),
                Text(fmt_loss(loss) if loss is not None else DASH, justify="right"),
                Text("★ best", style="bold green") if checkpoint.step == best else "",
                "exact" if checkpoint.resumable else "weights only",
                Text(fmt_bytes(checkpoint.bytes), justify="right"),
                fmt_datetime(checkpoint.mtime),
            ))
        if rows == self._shown:
            return
        selected = self.selected_step()
        self._shown = rows
        self.checkpoints = list(checkpoints)
        self.best_step = best
        self.clear()
        for checkpoint, row in zip(checkpoints, rows):
            self.add_row(*row, key=str(checkpoint.step))
        steps = [c.step for c in checkpoints]
        if selected in steps:
            self.move_cursor(row=steps.index(selected), animate=False)
        elif best in steps:
            self.move_cursor(row=steps.index(best), animate=False)

    def selected(self) -> Checkpoint | None:
        if not self.checkpoints or not 0 <= self.cursor_row < len(self.checkpoints):
            return None
        return self.checkpoints[self.cursor_row]

    def selected_step(self) -> int | None:
        checkpoint = self.selected()
        return checkpoint.step if checkpoint is not None else None
