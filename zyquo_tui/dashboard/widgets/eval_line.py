"""EvalLine: a run's latest in-run evaluation (`--eval-every`), on one line under its
sparklines; hidden for a run that does not evaluate."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from zyquo_tui.core.processes.evaluation import eval_event_text
from zyquo_tui.dashboard.widgets.live_text import LiveText
from zyquo_tui.dashboard.widgets.metric_sparkline import LABEL_WIDTH


class EvalLine(LiveText):
    """`eval        step 40: answer NLL 4.546 ± 0.368, exact match 0.250 ± 0.153 (8 rows)`"""

    DEFAULT_CSS = """
    EvalLine { height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, event: dict[str, Any] | None) -> None:
        if self.display != (event is not None):
            self.display = event is not None
        if event is None:
            return
        line = Text("eval".ljust(LABEL_WIDTH), style="dim")
        line.append(eval_event_text(event))
        if line != self.text:
            self.text = line
