"""BreakdownBar: what a memory estimate is made of, as one stacked bar.

Each term of the estimate (weights, adapters, gradients, optimizer, activations, attention,
loss, overhead) is a coloured run of cells, as wide as its share of the estimate, in the order
of docs/memory.md. `legend()` names the terms in the same order and colours, and
`budget_gauge()` draws the estimate against the budget.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from zyquo_tui.core.formatting import progress_bar

# term, short name, colour (also readable without colour: the legend keeps the bar's order)
TERM_STYLES: tuple[tuple[str, str, str], ...] = (
    ("base_weights", "weights", "#4f8fd8"),
    ("trainable_parameters", "adapters", "#3fb6b2"),
    ("gradients", "grads", "#9a7fd1"),
    ("optimizer_state", "optim", "#d17fc0"),
    ("activations", "activ", "#d8b23f"),
    ("attention", "attn", "#e08a3c"),
    ("loss", "loss", "#6cbf5a"),
    ("reference", "reference", "#7f9fbf"),  # a DPO reference's copy, when there is one
    ("teacher", "teacher", "#bf7f9f"),  # a distillation's teacher, when there is one
    ("overhead", "other", "#9aa0a6"),
    ("history_correction", "history", "#b0b0b0"),
    ("replica_correction", "replica", "#c8c8c8"),  # above the terms, when a replica says so
)
EMPTY = "░"
FULL = "█"
GAUGE_WIDTH = 10


def segment_widths(values: list[int], scale: int, width: int) -> list[int]:
    """Cells per value, `scale` bytes being `width` cells: largest remainders first, and at
    least one cell for a value of at least a hundredth of the scale (so it stays visible)."""
    if scale <= 0 or width <= 0:
        return [0] * len(values)
    exact = [max(v, 0) * width / scale for v in values]
    cells = [int(e) for e in exact]
    for index, value in enumerate(values):
        if cells[index] == 0 and value >= scale / 100:
            cells[index] = 1
    room = min(width, round(sum(exact))) - sum(cells)
    order = sorted(range(len(values)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for index in order:
        if room <= 0:
            break
        if values[index] > 0:
            cells[index] += 1
            room -= 1
    while sum(cells) > width:  # the minimum cells pushed it over: take from the largest
        cells[cells.index(max(cells))] -= 1
    return cells


class BreakdownBar(Widget):
    """The estimate's terms as a stacked bar (see the module docstring)."""

    DEFAULT_CSS = """
    BreakdownBar { height: 1; width: 1fr; }
    """

    breakdown: reactive[dict[str, int]] = reactive(dict)

    def show(self, breakdown: dict[str, int]) -> None:
        self.breakdown = dict(breakdown)

    def render(self) -> Text:
        width = self.size.width
        values = [max(int(self.breakdown.get(name, 0)), 0) for name, _, _ in TERM_STYLES]
        total = sum(values)
        if width <= 0 or total <= 0:
            return Text(EMPTY * max(width, 0), style="dim")
        bar = Text()
        for (_, _, style), count in zip(TERM_STYLES, segment_widths(values, total, width)):
            if count:
                bar.append(FULL * count, style=style)
        return bar


def short_bytes(value: float) -> str:
    """417K, 3.8M, 12G: sizes for a narrow legend."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= size:
            scaled = value / size
            return f"{scaled:.1f}{unit}" if scaled < 10 else f"{scaled:.0f}{unit}"
    return f"{value:.0f}B"


def legend(breakdown: dict[str, int], width: int = 40) -> Text:
    """`█ weights 417K  █ attn 944M ...`: the terms above zero, in the bar's order, in lines
    of at most `width` cells; a line breaks between terms, never inside one."""
    text = Text()
    used = 0
    for name, short, style in TERM_STYLES:
        value = breakdown.get(name, 0)
        if value <= 0:
            continue
        item = f" {short} {short_bytes(value)}"
        size = 1 + len(item)
        if used and used + 2 + size > width:
            text.append("\n")
            used = 0
        elif used:
            text.append("  ")
            used += 2
        text.append(FULL, style=style)
        text.append(item)
        used += size
    return text


class BudgetBar(Widget):
    """The estimate against the budget: filled by its share, in the verdict's colour; an
    estimate above the budget fills it and ends in `▶`."""

    DEFAULT_CSS = """
    BudgetBar { height: 1; width: 1fr; }
    """

    share: reactive[float] = reactive(0.0)
    look: reactive[str] = reactive("green")

    def show(self, need: int, budget: int, look: str) -> None:
        self.set_reactive(BudgetBar.look, look)
        self.share = need / budget if budget else 0.0

    def render(self) -> Text:
        width = self.size.width
        over = self.share > 1
        filled, empty = progress_bar(min(self.share, 1.0), width - 1 if over else width)
        text = Text(filled, style=self.look)
        text.append(empty, style="dim")
        if over:
            text.append("▶", style=f"bold {self.look}")
        return text
