"""MemoryPanel: the memory verdict of the run being set up, beside the form.

It shows the verdict (✓ fits, ! tight, ✗ won't fit) with its reason, the estimate against the
budget, the disk verdict (the run's checkpoints against the store's free space) and the
estimated duration, the breakdown as a bar with a legend, how wide batches are assumed to be, the
suggestions that fit (each with the key that applies it), and a measured peak beside the
estimate once one was measured. It draws what it is given; the screen does the planning.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from zyquo_tui.core.formatting import basename, fmt_bytes, fmt_duration
from zyquo_tui.core.memory.advisor import Plan, Verdict
from zyquo_tui.core.memory.disk_verdict import DiskAssessment
from zyquo_tui.core.memory.duration import DurationEstimate
from zyquo_tui.core.memory.host_verdicts import HostVerdict
from zyquo_tui.core.memory.measure import Measurement
from zyquo_tui.dashboard.widgets.breakdown_bar import BreakdownBar, BudgetBar, legend
from zyquo_tui.dashboard.widgets.static_update import PanelText, update_static

VERDICT_LOOK = {
    Verdict.FITS: ("✓ fits", "verdict-fits"),
    Verdict.TIGHT: ("! tight", "verdict-tight"),
    Verdict.WONT_FIT: ("✗ won't fit", "verdict-wont-fit"),
}
GAUGE_STYLE = {Verdict.FITS: "green", Verdict.TIGHT: "yellow", Verdict.WONT_FIT: "red"}
# Notes the panel says in its own words elsewhere (the rows line).
_ROWS_NOTE = "row lengths unknown"


@dataclass
class MeasureState:
    """The measure action: running, its result, or why it failed."""

    running: bool = False
    measurement: Measurement | None = None
    estimate_bytes: int | None = None  # the estimate the measurement is compared with
    error: str | None = None
    stale: bool = False  # the form changed while it measured


class MemoryPanel(VerticalScroll):
    """The verdict panel of the new-run screen (see the module docstring)."""

    COMPONENT_CLASSES = {"memory-panel--muted"}
    DEFAULT_CSS = """
    MemoryPanel { height: 1fr; padding: 0 1; border-left: vkey $panel-lighten-2;
                  scrollbar-size-vertical: 1; scrollbar-gutter: stable; }
    MemoryPanel > Static { height: auto; }
    MemoryPanel > #memory-title { text-style: bold; }
    MemoryPanel > #memory-title.verdict-fits { color: $text-success; }
    MemoryPanel > #memory-title.verdict-tight { color: $text-warning; }
    MemoryPanel > #memory-title.verdict-wont-fit { color: $text-error; }
    MemoryPanel > BreakdownBar { margin: 0 0 0 0; }
    MemoryPanel > .memory-panel--muted { color: $text-muted; }
    """

    measure_text = ""  # the measure line shown now (empty: none)
    can_focus = True  # tab reaches it, so the keys scroll it when it is taller than the screen

    def compose(self) -> ComposeResult:
        # Few widgets: each one costs time in every frame and layout pass while the user
        # types, so all that follows the bars is one text (see `_details`).
        yield PanelText("Memory", id="memory-title", markup=False)
        yield PanelText("", id="memory-figures", markup=False)
        yield BudgetBar(id="memory-budget-bar")
        yield BreakdownBar(id="memory-bar")
        yield PanelText("", id="memory-details", markup=False)

    def _static(self, name: str) -> Static:
        return self.query_one(f"#memory-{name}", Static)

    def _set(self, name: str, content: str | Text) -> None:
        update_static(self._static(name), content)

    @property
    def _muted(self) -> Style:
        return self.get_component_rich_style("memory-panel--muted")

    def show_message(self, title: str, message: str = "") -> None:
        """No verdict to show: say why (no model yet, fields to fix, budget being read)."""
        header = self._static("title")
        update_static(header, f"Memory · {title}")
        header.remove_class(*(look for _, look in VERDICT_LOOK.values()))
        self.query_one(BreakdownBar).display = False
        self.query_one(BudgetBar).display = False
        self._set("figures", "")
        self._set("details", Text(message, style=self._muted))
        self.measure_text = ""

    def show_plan(self, plan: Plan, *, rows_line: str, suggestion_keys: list[str],
                  applicable: list[bool], measure: MeasureState,
                  disk: DiskAssessment | None = None, duration: Text | None = None,
                  hosts: Text | None = None) -> None:
        assessment = plan.assessment
        estimate = plan.estimate
        budget = assessment.budget
        word, look = VERDICT_LOOK[assessment.verdict]
        header = self._static("title")
        update_static(header, f"Memory · {word}")
        header.remove_class(*(other for _, other in VERDICT_LOOK.values() if other != look))
        header.add_class(look)
        need = assessment.need_bytes  # every rank that trains here, for a distributed run
        share = need / budget.budget_bytes if budget.budget_bytes else 0.0
        figures = Text()
        figures.append(fmt_bytes(need), style="bold")
        figures.append(f" of {fmt_bytes(budget.budget_bytes)} budget ({share:.0%})\n")
        if assessment.ranks_here > 1:
            figures.append(f"{assessment.ranks_here} ranks here × "
                           f"{fmt_bytes(estimate.total_bytes)}\n", style="dim")
        figures.append(f"{budget.budget_source} ({budget.device})", style="dim")
        if duration is not None and duration.plain:  # how long, beside how much
            figures.append("\n")
            figures.append_text(duration)
        self._set("figures", figures)
        gauge = self.query_one(BudgetBar)
        gauge.display = True
        gauge.show(need, budget.budget_bytes, GAUGE_STYLE[assessment.verdict])
        bar = self.query_one(BreakdownBar)
        bar.display = True
        bar.show(estimate.breakdown)
        inner = self.scrollable_content_region.width
        self.measure_text = measure_line(measure)
        # The figures say "fits" and "won't fit"; "tight" needs its reason (which limit).
        reason = assessment.reason if assessment.verdict is Verdict.TIGHT else ""
        notes = [n for n in estimate.notes if not n.startswith(_ROWS_NOTE)]
        self._set("details", self._details(
            legend(estimate.breakdown, inner if inner > 10 else 26), rows_line, reason,
            hosts or Text(), disk_line(disk),
            self._suggestions(plan, suggestion_keys, applicable), self.measure_text,
            "\n".join(f"· {note}" for note in notes[:3])))

    def _details(self, legend_text: Text, rows_line: str, reason: str, hosts: Text,
                 disk: Text, suggestions: Text, measure: str, notes: str) -> Text:
        """The legend, the rows line, the reason, then a distributed run's other hosts, the
        suggestions, the disk verdict, the measurement and the notes, each after a blank line;
        empty parts take no room."""
        muted = self._muted
        text = Text()
        for part, gap in ((legend_text, False), (Text(rows_line), False),
                          (Text(reason, style=muted), False), (hosts, True),
                          (suggestions, True), (disk, True),
                          (Text(measure), True), (Text(notes, style=muted), True)):
            if not part.plain:
                continue
            if text.plain:
                text.append("\n\n" if gap else "\n")
            text.append_text(part)
        return text

    @staticmethod
    def _suggestions(plan: Plan, keys: list[str], applicable: list[bool]) -> Text:
        text = Text()
        if not plan.suggestions:
            return text
        text.append("What would fit", style="bold")
        for index, suggestion in enumerate(plan.suggestions):
            key = keys[index] if index < len(keys) else " "
            text.append("\n")
            text.append(key, style="bold reverse")
            text.append(f" {suggestion.title}")
            text.append(f" → {fmt_bytes(suggestion.estimate.total_bytes)}", style="bold")
            if index < len(applicable) and not applicable[index]:
                text.append(" (convert first)", style="dim")
        return text


def disk_line(disk: DiskAssessment | None) -> Text:
    """The disk verdict beside the memory one: its checkpoints against the store's disk."""
    text = Text()
    if disk is None:
        return text
    if disk.verdict is None:
        text.append("Disk · unknown", style="bold")
    else:
        word, _ = VERDICT_LOOK[disk.verdict]
        text.append(f"Disk · {word}", style=f"bold {GAUGE_STYLE[disk.verdict]}")
    text.append(f"\n{fmt_bytes(disk.disk_bytes)} of checkpoints ({disk.checkpoints} × "
                f"{fmt_bytes(disk.checkpoint_bytes)})")
    if disk.free_bytes is not None:
        text.append(f"; {fmt_bytes(disk.free_bytes)} free, "
                    f"{fmt_bytes(disk.floor_bytes)} kept", style="dim")
    return text


def hosts_lines(verdicts: list[HostVerdict]) -> Text:
    """A distributed run's other hosts, each with its verdict (their one rank against the
    free memory `hosts check` last found there), or why it is unknown."""
    text = Text()
    for verdict in verdicts:
        if text.plain:
            text.append("\n")
        if verdict.verdict is None:
            text.append(f"{verdict.host} · unknown", style="bold")
        else:
            word, _ = VERDICT_LOOK[verdict.verdict]
            text.append(f"{verdict.host} · {word}",
                        style=f"bold {GAUGE_STYLE[verdict.verdict]}")
        text.append(f": {verdict.reason.removeprefix('unknown: ')}")
    return text


def duration_line(duration: DurationEstimate | None, dataset_picked: bool = False) -> Text:
    """How long the run would take, beside the verdicts (core/memory/duration.py), in short:
    the figure and what it rests on, or why it is unknown and what would tell. A dataset
    picked but not counted (still counting, or with errors to fix) is not "no dataset"."""
    text = Text()
    if duration is None:
        return text  # not estimated yet
    basis = duration.basis
    if duration.seconds is None:
        text.append("Time · unknown", style="bold")
        if basis.get("source") is None:
            text.append(": no run finished here yet; t measures")
        else:
            text.append(": no dataset to count a step's tokens")
        return text
    text.append(f"Time · about {fmt_duration(duration.seconds)}", style="bold")
    if basis.get("source") == "measured":
        text.append(", at the measured speed")
    elif basis.get("same_model"):
        text.append(f", from run {basis.get('run_name') or basis.get('run_id')} "
                    "of this model")
    else:
        text.append(f", from run {basis.get('run_name') or basis.get('run_id')} of "
                    f"{basename(str(basis.get('run_model') or ''))}, scaled by size")
    rows_from = basis.get("tokens_per_step_from")  # without a dataset, a step's tokens are a guess
    why = "the dataset's rows not counted" if dataset_picked else "no dataset yet"
    if rows_from == "basis_batch_scaled":
        text.append(f", its rows' lengths ({why})")
    elif rows_from == "max_seq_length":
        text.append(f", rows of max_seq_length ({why})")
    return text


def measure_line(state: MeasureState) -> str:
    if state.running:
        return "Measuring: a few real training steps in a subprocess…"
    if state.error:
        return f"Measure failed: {state.error}"
    measured = state.measurement
    if measured is None:
        return ""
    line = f"Measured {fmt_bytes(measured.peak_bytes)}"
    if state.estimate_bytes:
        off = measured.peak_bytes / state.estimate_bytes - 1
        line += f" · estimated {fmt_bytes(state.estimate_bytes)} ({off:+.0%})"
    line += f" · {measured.seconds:.1f} s"
    return line + (" (the settings before your last change)" if state.stale else "")
