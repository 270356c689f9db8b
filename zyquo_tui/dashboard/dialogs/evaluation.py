"""EvalDialog: a checkpoint evaluated against its base model, the figures `zyquo-tui eval`
prints (core/processes/evaluation.py), worked out in the evaluator subprocess while the
dialog is open."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.processes.evaluation import (
    EvalRequest,
    result_headers,
    result_rows,
    run_evaluation,
)
from zyquo_tui.dashboard.dialogs.dialog import Dialog


class EvalDialog(Dialog[None]):
    """Says what is evaluated, then the table of base and adapter figures (or the sentence of
    what went wrong). The evaluation runs in a thread that waits on the subprocess; closing
    the dialog cancels it, and the subprocess is killed (core/system/child_process.py)."""

    BINDINGS = [Binding("escape,q", "close", "Close", id="eval.close")]
    DEFAULT_CSS = """
    EvalDialog > .dialog-frame { width: 100; max-width: 98%; }
    EvalDialog #eval-result { margin-top: 1; }
    EvalDialog Footer { dock: none; }
    """

    def __init__(self, heading: str, request: EvalRequest) -> None:
        super().__init__(heading)
        self.request = request
        self.result: dict | None = None

    def compose_content(self) -> ComposeResult:
        request = self.request
        scored = " and exact match of greedy answers" if request.exact else ""
        yield Static(Text(f"{request.rows} rows of {request.data}: mean NLL per token of "
                          f"the answers{scored}, ± standard error."), id="eval-what")
        yield Static(Text("Evaluating… (loading the model, then each row for the adapter and "
                          "the base)", style="dim"), id="eval-result")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.evaluate()

    @work(thread=True, exit_on_error=False, group="evaluation")
    def evaluate(self) -> None:
        from textual.worker import get_current_worker

        worker = get_current_worker()
        try:
            result = run_evaluation(self.request, cancelled=lambda: worker.is_cancelled)
        except UserError as error:
            if not worker.is_cancelled:
                self.app.call_from_thread(self.show_failure, error.message)
            return
        if not worker.is_cancelled:
            self.app.call_from_thread(self.show_result, result)

    def show_result(self, result: dict) -> None:
        self.result = result
        table = Table(box=None, pad_edge=False, header_style="bold")
        for header in result_headers(result):
            table.add_column(header)
        for row in result_rows(result):
            table.add_row(*row)
        self.query_one("#eval-result", Static).update(table)

    def show_failure(self, message: str) -> None:
        self.query_one("#eval-result", Static).update(Text(message, style="bold red"))
