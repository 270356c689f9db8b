"""CheckpointsScreen: a run's saved steps and what can be done with each."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static

from zyquo_tui.core.formatting import fmt_bytes, fmt_loss
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.checkpoints import list_checkpoints
from zyquo_tui.core.store.retention import (
    RetentionPolicy,
    deletion_refusal,
    load_policy,
    save_policy,
)
from zyquo_tui.dashboard.dialogs.adapter_command import (
    AdapterCommandDialog,
    adapter_commands,
)
from zyquo_tui.dashboard.dialogs.confirm import ConfirmDialog
from zyquo_tui.dashboard.dialogs.evaluation import EvalDialog
from zyquo_tui.dashboard.dialogs.export import ExportChoice, ExportDialog
from zyquo_tui.dashboard.dialogs.retention import RetentionDialog
from zyquo_tui.dashboard.dialogs.text_prompt import TextPromptDialog
from zyquo_tui.dashboard.export_jobs import latest_export_line, start_export
from zyquo_tui.dashboard.messages import MetricsReceived, RunsRefreshed
from zyquo_tui.dashboard.screens.run_verbs import VERB_BINDINGS, VERBS
from zyquo_tui.dashboard.screens.run_view_screen import RunViewScreen
from zyquo_tui.dashboard.screens.try_screen import TryScreen
from zyquo_tui.dashboard.widgets.checkpoint_table import CheckpointTable
from zyquo_tui.dashboard.widgets.title_bar import TitleBar


class CheckpointsScreen(RunViewScreen):
    """Step, validation loss at that step, the best one marked, size and time of every
    checkpoint; resume or fork from one, see the mlx-lm commands that use it, delete it, and
    choose which ones the run keeps when it completes."""

    AREA = "Checkpoints"
    BINDINGS = [
        Binding("r", "resume_here", "Resume", id="checkpoints.resume",
                tooltip="Continue the run exactly from this checkpoint"),
        Binding("f", "fork_here", "Fork", id="checkpoints.fork",
                tooltip="A new run warm-started from this checkpoint's weights"),
        Binding("d", "delete_checkpoint", "Delete", id="checkpoints.delete",
                tooltip="Delete this checkpoint's files (asks first)"),
        Binding("t", "retention", "Retention", id="checkpoints.retention",
                tooltip="Keep the best and the last N checkpoints when the run completes"),
        Binding("g", "try_here", "Try", id="checkpoints.try",
                tooltip="Ask the adapter of this checkpoint and the base model, side by side"),
        Binding("e", "export_here", "Export", id="checkpoints.export",
                tooltip="Fuse this checkpoint into a model folder, checked, in the background"),
        Binding("v", "eval_here", "Eval", id="checkpoints.eval",
                tooltip="Evaluate this checkpoint against the base model on the run's test "
                        "split (or a file): answer NLL and exact match"),
        VERB_BINDINGS["logs"],
        Binding("escape", "back", "Back", id="app.back", tooltip="Back"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self._shown_key: tuple | None = None
        self._summary_shown: Text | None = None

    def compose(self) -> ComposeResult:
        yield TitleBar("checkpoints", id="title")
        yield Static(id="checkpoint-summary")
        yield CheckpointTable(id="checkpoints")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.service.open_feed(self.run_id)
        self.reload()
        self.query_one(CheckpointTable).focus()

    def on_unmount(self) -> None:
        self.service.close_feed(self.run_id)

    @property
    def table(self) -> CheckpointTable:
        return self.query_one(CheckpointTable)

    # -- data -------------------------------------------------------------------------------------

    # The App tells only the screen on top; shown again, the screen catches up on resume.
    def on_runs_refreshed(self, message: RunsRefreshed) -> None:
        self.reload()

    def on_screen_resume(self) -> None:
        self.reload()

    def on_metrics_received(self, message: MetricsReceived) -> None:
        # Train events arrive many times a second; only a new checkpoint changes this screen.
        if message.run_id == self.run_id and self._feed_key() != self._shown_key:
            self.reload()

    def _feed_key(self) -> tuple | None:
        feed = self.service.feed(self.run_id)
        return (feed.loaded, len(feed.metrics.checkpoints)) if feed is not None else None

    def reload(self) -> None:
        run = self.show_title("Checkpoints")
        if run is None:
            return
        service = self.service
        feed = service.feed(self.run_id)
        metrics = feed.metrics if feed is not None and feed.loaded else None
        checkpoints = list_checkpoints(service.store.adapters_dir(self.run_id))
        self._shown_key = self._feed_key()
        self.table.show(checkpoints, metrics)
        summary = Text()
        summary.append(f"{run.state.value}", style="bold")
        summary.append(f" · {len(checkpoints)} checkpoint(s), "
                       f"{fmt_bytes(sum(c.bytes for c in checkpoints))}")
        best = self.table.best_step
        if not checkpoints:
            summary.append(f" · the trainer saves one every {run.hyperparameters.save_every} "
                           "steps", style="dim")
        elif best is not None and metrics is not None:
            summary.append(f" · best: step {best} (val {fmt_loss(metrics.val_at(best))})")
        elif metrics is None:
            summary.append(" · reading validation losses…", style="dim")
        policy = load_policy(service.store.run_dir(self.run_id))
        summary.append("\nRetention: ")
        summary.append(policy.describe() if policy else "keep every checkpoint", style="bold")
        summary.append(" (t to choose another and prune now)"
                       if run.state is RunState.COMPLETED else
                       " (applied when the run completes; t to change)", style="dim")
        export = latest_export_line(service.store.home, self.run_id)
        if export:
            summary.append("\nExport: ")
            summary.append(export)
        summary_widget = self.query_one("#checkpoint-summary", Static)
        if summary != self._summary_shown:
            self._summary_shown = summary
            summary_widget.update(summary)
        self.refresh_verbs(self.table.selected_step(), len(checkpoints))

    @on(DataTable.RowHighlighted, "#checkpoints")
    def selection_moved(self) -> None:
        self.refresh_verbs(self.table.selected_step())

    @on(DataTable.RowSelected, "#checkpoints")
    def row_chosen(self) -> None:
        self.action_show_command()

    # -- actions ----------------------------------------------------------------------------------

    def action_resume_here(self) -> None:
        checkpoint = self.table.selected()
        if checkpoint is not None:
            self.service.resume(self.run_id, checkpoint.step)

    def action_fork_here(self) -> None:
        checkpoint = self.table.selected()
        if checkpoint is not None:
            self.service.fork(self.run_id, checkpoint.step)

    def action_show_command(self) -> None:
        run = self.current_run()
        checkpoint = self.table.selected()
        if run is None or checkpoint is None:
            return
        steps = [c.step for c in self.table.checkpoints]
        commands = adapter_commands(run.model, self.service.store.adapters_dir(run.id),
                                    checkpoint, latest_step=max(steps))
        self.app.push_screen(AdapterCommandDialog(
            f"Generate with step {checkpoint.step} of {run.name}", commands))

    def action_try_here(self) -> None:
        checkpoint = self.table.selected()
        if checkpoint is not None:
            self.app.push_screen(TryScreen(self.run_id, checkpoint.step))

    def action_export_here(self) -> None:
        from zyquo_tui.core.library.models import inspect_model
        from zyquo_tui.core.processes.exports import GGUF_MODEL_TYPES, default_output

        run = self.current_run()
        checkpoint = self.table.selected()
        if run is None or checkpoint is None:
            return
        model = inspect_model(run.model)
        output = default_output(self.service.store.home, run.name, checkpoint.step, "float")

        def chosen(choice: ExportChoice | None) -> None:
            if choice is not None:
                start_export(self.app, run.id, checkpoint.step, choice)
                self.reload()
        self.app.push_screen(ExportDialog(
            f"Export step {checkpoint.step} of {run.name} as a model", output,
            quantized_base=model.quantization is not None,
            gguf_supported=model.architecture in GGUF_MODEL_TYPES), chosen)

    def action_eval_here(self) -> None:
        """The checkpoint against its base on the run's test split; without one, a file is
        asked for."""
        from zyquo_tui.core.errors import UserError
        from zyquo_tui.core.processes.evaluation import TEST_SPLIT, eval_request

        run = self.current_run()
        checkpoint = self.table.selected()
        if run is None or checkpoint is None:
            return
        store = self.service.store

        def evaluate(data: Path | None) -> None:
            try:
                request = eval_request(store, run.id, step=checkpoint.step, data=data,
                                       exact=True)
            except UserError as error:
                self.notify(error.message, title="Eval", severity="error", timeout=8)
                return
            self.app.push_screen(EvalDialog(
                f"Step {checkpoint.step} of {run.name} against its base model", request))

        if (Path(run.data) / TEST_SPLIT).is_file():
            evaluate(None)
            return

        def answered(text: str | None) -> None:
            if text and text.strip():
                evaluate(Path(text.strip()).expanduser())
        self.app.push_screen(TextPromptDialog(
            f"Evaluate step {checkpoint.step} on which rows?",
            f"{run.data} has no {TEST_SPLIT}: give a .jsonl file of completions, chat or "
            "{prompt, answer} rows.", placeholder="FILE.jsonl"), answered)

    def action_delete_checkpoint(self) -> None:
        checkpoint = self.table.selected()
        if checkpoint is None:
            return
        kind = "weights and resume state" if checkpoint.resumable else "weights"
        best = " It is the best checkpoint of the run." \
            if checkpoint.step == self.table.best_step else ""

        def answered(confirmed: bool | None) -> None:
            if confirmed:
                self.service.delete_checkpoint(self.run_id, checkpoint, done=self.reload)
        self.app.push_screen(ConfirmDialog(
            f"Delete the checkpoint of step {checkpoint.step}?",
            f"Its {kind} ({fmt_bytes(checkpoint.bytes)}) are removed for good.{best}",
            confirm_label="Delete", keep_label="Keep"), answered)

    def action_retention(self) -> None:
        run_dir = self.service.store.run_dir(self.run_id)

        def chosen(choice: object) -> None:
            if choice is None:
                return
            policy = choice if isinstance(choice, RetentionPolicy) else None
            save_policy(run_dir, policy)
            said = policy.describe() if policy else "keep every checkpoint"
            run = self.current_run()
            if policy is not None and run is not None and run.state is RunState.COMPLETED:
                # It has completed: the policy applies now, not at an end already past.
                self.notify(f"Run {self.run_id}: {said}, applied now.", title="Retention",
                            timeout=4)
                self.service.apply_retention(self.run_id, done=self.reload)
                return
            self.notify(f"Run {self.run_id}: {said} when it completes.", title="Retention",
                        timeout=4)
            self.reload()
        run = self.current_run()
        completed = run is not None and run.state is RunState.COMPLETED
        self.app.push_screen(RetentionDialog(load_policy(run_dir), completed), chosen)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in VERBS:
            return self.verb_check(action)
        run = self.current_run()
        checkpoint = self.table.selected() if self.is_mounted else None
        if action in ("show_command", "fork_here", "try_here", "export_here", "eval_here"):
            return checkpoint is not None
        if action == "resume_here":
            return (checkpoint is not None and checkpoint.resumable and run is not None
                    and run.state.can_resume)
        if action == "delete_checkpoint":
            if checkpoint is None or run is None:
                return False
            return deletion_refusal(run, checkpoint, self.table.checkpoints) is None
        if action == "retention":
            return run is not None
        return True
