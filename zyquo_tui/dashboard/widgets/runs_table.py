"""RunsTable: every run in one table, filtered and sorted, updated cell by cell; a grid's
runs (`runs grid`) can be collapsed into one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.widgets import DataTable

from zyquo_tui.core.formatting import (
    DASH,
    basename,
    fmt_duration,
    fmt_loss,
    fmt_rate,
    fmt_reward,
    progress_bar,
)
from zyquo_tui.dashboard.run_service import RunRow

# State shown as a symbol and a word, so it reads without colour (NO_COLOR) too.
STATE_LOOK = {
    "running": ("▶", "bold green"),
    "starting": ("◌", "green"),
    "queued": ("…", "cyan"),
    "configured": ("○", ""),
    "completed": ("✓", "blue"),
    "failed": ("✗", "bold red"),
    "cancelled": ("■", "yellow"),
    "interrupted": ("!", "magenta"),
    "damaged": ("?", "red"),
}
STATE_ORDER = {state: i for i, state in enumerate(
    ("running", "starting", "queued", "failed", "interrupted", "cancelled", "configured",
     "completed", "damaged"))}
PROGRESS_WIDTH = 16
MARK = "◆ "  # before the name of a run marked for comparison (space)
GROUP_PREFIX = "group:"  # the row key of a collapsed grid


@dataclass(frozen=True)
class Column:
    """A column: its key, header, width and how rows sort by it."""

    key: str
    label: str
    width: int
    sort_key: Callable[[RunRow], Any]


def _missing_last(value: Any) -> tuple:
    return (value is None, value if value is not None else 0)


NAME_MIN_WIDTH = 18  # the Name column's width when the table has no room to spare

COLUMNS = (
    Column("state", "State", 13, lambda r: STATE_ORDER.get(r.state, 99)),
    Column("name", "Name", NAME_MIN_WIDTH, lambda r: r.name.lower()),
    Column("progress", "Progress", PROGRESS_WIDTH, lambda r: _missing_last(r.fraction)),
    # A grpo run's mean reward stands in its loss's place (`r 0.62`): losses sort first,
    # then rewards.
    Column("train", "Train", 6, lambda r: (r.reward_mean is not None, _missing_last(
        r.reward_mean if r.reward_mean is not None else r.train_loss))),
    Column("val", "Val", 6, lambda r: _missing_last(r.val_loss)),
    Column("eta", "ETA", 6, lambda r: _missing_last(r.eta)),
    Column("elapsed", "Elapsed", 7, lambda r: _missing_last(r.elapsed)),
    Column("tps", "Tok/s", 6, lambda r: _missing_last(r.tokens_per_second)),
    Column("queue", "Q", 2, lambda r: _missing_last(r.queue_position)),
    Column("method", "Method", 6, lambda r: r.method),
    Column("model", "Model", 28, lambda r: basename(r.model).lower()),
    Column("data", "Dataset", 16, lambda r: basename(r.data).lower()),
    Column("id", "ID", 24, lambda r: r.id),
)
COLUMN_BY_KEY = {c.key: c for c in COLUMNS}
SORTABLE = tuple(c.key for c in COLUMNS)


def name_width(available: int, padding: int) -> int:
    """The Name column's width in a table whose cells have `available` cells across (each
    column takes its width and `padding` on both sides): the columns that fit whole beside a
    name of NAME_MIN_WIDTH keep their widths and the name takes the rest, so names read in full
    where there is room and no column shows cut at its edge (Elapsed read "El" at 80 columns,
    its figure easy to misread); the columns that don't fit are a scroll away, whole."""
    used = NAME_MIN_WIDTH + 2 * padding
    for column in COLUMNS:
        if column.key == "name":
            continue
        if used + column.width + 2 * padding > available:
            break
        used += column.width + 2 * padding
    return NAME_MIN_WIDTH + max(0, available - used)


def progress_cell(row: RunRow | GroupRow) -> Text:
    if row.step is None and row.iters is None:
        return Text(DASH)
    label = f"{row.step or 0}/{row.iters or '?'}"
    bar_width = max(3, PROGRESS_WIDTH - len(label) - 1)
    filled, empty = progress_bar(row.fraction, bar_width)
    text = Text(label + " ")
    text.append(filled, style="green" if row.state in ("running", "starting") else "")
    text.append(empty, style="dim")
    return text


def fitted_name(name: str, width: int) -> str:
    """A name that fits `width`: as it is when it does; else a grid run's name (`runs grid`
    names each run by its base name, then its values: `qwen lora learning_rate=1e-4 rank=8`)
    keeps its values, which tell it from the other runs of its grid, with long keys shortened
    to their initials (`lr=1e-4 rank=8`) and its first words dropped as needed (`…`); the
    Model column and the grid's own line hold the base. Other names are cut at the end."""
    if len(name) <= width or "=" not in name:
        return name
    words = [_short_setting(word) for word in name.split()]
    if len(" ".join(words)) <= width:
        return " ".join(words)
    dropped = False
    while "=" not in words[0] and len("… " + " ".join(words)) > width:
        words.pop(0)
        dropped = True
    return ("… " if dropped else "") + " ".join(words)


def _short_setting(word: str) -> str:
    """`learning_rate=1e-4` as `lr=1e-4`; a key of one word stays."""
    key, equals, value = word.partition("=")
    if not equals or "_" not in key:
        return word
    return "".join(part[:1] for part in key.split("_") if part) + "=" + value


def name_cell(row: RunRow, marked: bool, width: int = NAME_MIN_WIDTH) -> str | Text:
    """The name (fitted to the column's `width`: `fitted_name`); the objective of a run that
    is not SFT before it (`dpo helpful`, `grpo sums`), so it reads apart from SFT runs at a
    glance (SFT runs show their name alone)."""
    prefix = (MARK if marked else "") + ("" if row.objective == "sft" else row.objective + " ")
    name = fitted_name(row.name, width - len(prefix))
    if row.objective == "sft":
        return Text(MARK + name, style="bold") if marked else name
    text = Text(MARK, style="bold") if marked else Text()
    text.append(row.objective, style="magenta")
    text.append(" ")
    text.append(name, style="bold" if marked else "")
    return text


def row_cells(row: RunRow | GroupRow, marked: bool = False,
              name_width: int = NAME_MIN_WIDTH) -> tuple:
    if isinstance(row, GroupRow):
        return group_cells(row)
    symbol, style = STATE_LOOK.get(row.state, ("?", ""))
    if row.damaged is not None:
        return (Text(f"{symbol} damaged", style=style), Text(row.damaged, style="red"),
                DASH, DASH, DASH, DASH, DASH, DASH, "", "", "", "", row.id)
    return (
        Text(f"{symbol} {row.state}", style=style),
        name_cell(row, marked, name_width),
        progress_cell(row),
        fmt_reward(row.reward_mean) if row.reward_mean is not None else fmt_loss(row.train_loss),
        fmt_loss(row.val_loss),
        fmt_duration(row.eta) if row.eta is not None else DASH,
        fmt_duration(row.elapsed) if row.elapsed is not None else DASH,
        fmt_rate(row.tokens_per_second) if row.tokens_per_second else DASH,
        str(row.queue_position) if row.queue_position else "",
        row.method,
        basename(row.model),
        basename(row.data),
        row.id,
    )


@dataclass(frozen=True)
class GroupRow:
    """A grid (`runs grid`) collapsed into one line: its name, how many runs, their states,
    the progress of them all and the best validation loss among them."""

    id: str  # GROUP_PREFIX + the group id
    group: str
    name: str
    count: int
    states: tuple[tuple[str, int], ...]  # (state, runs in it), most pressing first
    step: int | None
    iters: int | None
    val_loss: float | None
    method: str
    model: str
    data: str

    @property
    def fraction(self) -> float | None:
        if self.step is None or not self.iters:
            return None
        return min(1.0, self.step / self.iters)

    @property
    def state(self) -> str:
        return "grid"

    @classmethod
    def of(cls, group: str, members: list[RunRow]) -> GroupRow:
        counts: dict[str, int] = {}
        for row in members:
            counts[row.state] = counts.get(row.state, 0) + 1
        states = tuple(sorted(counts.items(), key=lambda c: STATE_ORDER.get(c[0], 99)))
        steps = [row.step or 0 for row in members]
        iters = [row.iters for row in members if row.iters]
        vals = [row.val_loss for row in members if row.val_loss is not None]
        return cls(GROUP_PREFIX + group, group, grid_name(group, members), len(members),
                   states, sum(steps), sum(iters) if len(iters) == len(members) else None,
                   min(vals) if vals else None, _common(row.method for row in members),
                   _common(row.model for row in members), _common(row.data for row in members))


def _common(values) -> str:
    """The one value every run of a grid shares, or "" when they differ."""
    found = set(values)
    return found.pop() if len(found) == 1 else ""


def grid_name(group: str, members: list[RunRow]) -> str:
    """A grid's name: the words its runs' names begin with (`runs grid` names each run by its
    base name, then its values), else its group id."""
    names = [row.name.split() for row in members]
    common: list[str] = []
    for words in zip(*names):
        if len(set(words)) != 1 or "=" in words[0]:
            break
        common.append(words[0])
    return " ".join(common) or group


def group_cells(row: GroupRow) -> tuple:
    """A collapsed grid's line: its states (a symbol and a count each), ▸, the count and its
    name, the progress of all its runs together, the best validation loss."""
    states = Text()
    for state, count in row.states:
        symbol, style = STATE_LOOK.get(state, ("?", ""))
        if states.plain:
            states.append(" ")
        states.append(f"{symbol}{count}", style=style)
    name = Text("▸ ", style="bold")
    name.append(f"×{row.count} ", style="bold")
    name.append(row.name)
    return (states, name, progress_cell(row), DASH, fmt_loss(row.val_loss), DASH, DASH, DASH,
            "", row.method, basename(row.model), basename(row.data), row.group)


def matches(row: RunRow, words: list[str]) -> bool:
    haystack = " ".join((row.id, row.name, row.state, row.method, row.objective,
                         basename(row.model), basename(row.data))).lower()
    return all(word in haystack for word in words)


Row = RunRow | GroupRow


class RunsTable(DataTable):
    """The runs table: one row per run, damaged ones included. `show()` takes every row and
    applies the filter and the sort; unchanged rows are left alone, changed cells updated in
    place, and the table is rebuilt only when the order or the set of rows changes."""

    BINDINGS = [
        Binding("enter", "select_cursor", "Open", id="run.open",
                tooltip="Open the selected run's live metrics"),
    ]
    DEFAULT_CSS = """
    RunsTable { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self.sort_column = "id"
        self.sort_reverse = True  # newest first: ids sort by creation time
        self.filter_text = ""
        self._rows: dict[str, RunRow] = {}
        self._keys: list[str] = []
        self._cells: dict[str, tuple] = {}
        self._shown_rows: dict[str, Row] = {}
        self.marked: list[str] = []  # runs marked for comparison, in the order marked
        self.collapsed: set[str] = set()  # grids shown as one line (g)
        self.name_width = NAME_MIN_WIDTH  # the Name column's, fitted to the table (name_width)

    def on_mount(self) -> None:
        for column in COLUMNS:
            self.add_column(column.label, width=column.width, key=column.key)
        self._mark_sorted_column()

    def on_resize(self) -> None:
        self._fit_name_column()

    def watch_show_vertical_scrollbar(self, shown: bool) -> None:
        # The scrollbar takes its columns from the cells' width, and no resize need follow
        # (more rows than fit, on a screen of the same size): fit once it is laid out.
        self.call_after_refresh(self._fit_name_column)

    def _fit_name_column(self) -> None:
        """Give the Name column the width the others leave (name_width), for the width the
        cells have now."""
        width = name_width(self.scrollable_content_region.width, self.cell_padding)
        if width != self.name_width:
            self.name_width = width
            self.columns["name"].width = width
            rows = self.visible_rows()
            self._rebuild(rows, [row.id for row in rows])  # names fitted to the new width

    def _mark_sorted_column(self) -> None:
        """The sorted column's header ends with an arrow (↓ for descending)."""
        for column in COLUMNS:
            label = column.label
            if column.key == self.sort_column:
                label = f"{label or '#'}{'↓' if self.sort_reverse else '↑'}"
            self.columns[column.key].label = Text(label)
        self._require_update_dimensions = True
        self.refresh()

    # -- data -------------------------------------------------------------------------------------

    def show(self, rows: list[RunRow]) -> None:
        self._rows = {row.id: row for row in rows}
        self.marked = [run_id for run_id in self.marked if run_id in self._rows]
        self._render_rows()

    def set_sort(self, column: str, reverse: bool | None = None) -> None:
        if column == self.sort_column and reverse is None:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column = column
            self.sort_reverse = bool(reverse)
        self._mark_sorted_column()
        self._render_rows()

    def toggle_mark(self, run_id: str) -> None:
        """Mark the run for comparison, or unmark it; its name cell says which."""
        if run_id in self.marked:
            self.marked.remove(run_id)
        else:
            self.marked.append(run_id)
        row = self._rows.get(run_id)
        if row is not None and run_id in self._cells:
            cells = row_cells(row, run_id in self.marked, self.name_width)
            self._cells[run_id] = cells
            self.update_cell(run_id, "name", cells[1])

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._render_rows()

    def visible_rows(self) -> list[Row]:
        words = self.filter_text.lower().split()
        rows = [r for r in self._rows.values() if not words or matches(r, words)]
        column = COLUMN_BY_KEY[self.sort_column]
        rows.sort(key=lambda r: r.id, reverse=True)  # ties: newest first
        rows.sort(key=column.sort_key, reverse=self.sort_reverse)
        return self._folded(rows)

    def _folded(self, rows: list[RunRow]) -> list[Row]:
        """A collapsed grid's runs as one line, where its first run (in this order) stood."""
        if not self.collapsed:
            return list(rows)
        members: dict[str, list[RunRow]] = {}
        for row in rows:
            if row.group in self.collapsed:
                members.setdefault(row.group, []).append(row)
        folded: list[Row] = []
        for row in rows:
            if row.group not in members:
                folded.append(row)
            elif row is members[row.group][0]:
                folded.append(GroupRow.of(row.group, members[row.group]))
        return folded

    # -- grids ------------------------------------------------------------------------------------

    def selected_group(self) -> str | None:
        """The grid of the line at the cursor: a collapsed grid, or a run made in one."""
        key = self._selected_key()
        if key is None:
            return None
        if key.startswith(GROUP_PREFIX):
            return key[len(GROUP_PREFIX):]
        row = self._rows.get(key)
        return row.group if row is not None else None

    def group_run_ids(self, group: str) -> list[str]:
        """Every run of a grid (the filter aside), oldest first: the order it was made in."""
        return sorted(run_id for run_id, row in self._rows.items() if row.group == group)

    def toggle_group(self, group: str) -> None:
        """Collapse the grid into one line, or expand it; the cursor stays on the grid."""
        if group in self.collapsed:
            self.collapsed.discard(group)
            self._render_rows()
            visible = [key for key in self._keys if key in self._rows
                       and self._rows[key].group == group]
            if visible:
                self.select_run(visible[0])
        else:
            self.collapsed.add(group)
            self._render_rows()
            self.select_run(GROUP_PREFIX + group)

    def _render_rows(self) -> None:
        rows = self.visible_rows()
        keys = [row.id for row in rows]
        if keys != self._keys:
            self._rebuild(rows, keys)
            return
        previous = self._shown_rows
        for row in rows:
            if previous.get(row.id) == row:
                continue  # the same figures: nothing to format
            cells = row_cells(row, row.id in self.marked, self.name_width)
            before = self._cells.get(row.id)
            if cells == before:
                continue
            for column, old, new in zip(COLUMNS, before or (None,) * len(COLUMNS), cells):
                if old != new:
                    self.update_cell(row.id, column.key, new)
            self._cells[row.id] = cells
        self._shown_rows = {row.id: row for row in rows}

    def _rebuild(self, rows: list[Row], keys: list[str]) -> None:
        selected = self._selected_key()
        self.clear()
        self._cells = {row.id: row_cells(row, row.id in self.marked, self.name_width)
                       for row in rows}
        for row in rows:
            self.add_row(*self._cells[row.id], key=row.id)
        self._keys = keys
        self._shown_rows = {row.id: row for row in rows}
        if selected in keys:
            self.move_cursor(row=keys.index(selected), animate=False)

    def _update_dimensions(self, new_rows) -> None:  # type: ignore[override]
        # DataTable measures every cell of every new row to size auto-width columns: about a
        # second for 1,000 runs. Every column here has a fixed width and every row one line,
        # so only the scrollable size needs updating. (DataTable internals, Textual 8.)
        cells_width = sum(column.get_render_width(self) for column in self.columns.values())
        header_height = self.header_height if self.show_header else 0
        self.virtual_size = Size(cells_width + self._row_label_column_width,
                                 self._total_row_height + header_height)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "select_cursor" and not self._keys:
            return False  # nothing to open
        return super().check_action(action, parameters)

    def _selected_key(self) -> str | None:
        if not self._keys or self.cursor_row < 0 or self.cursor_row >= len(self._keys):
            return None
        return self._keys[self.cursor_row]

    def selected_run_id(self) -> str | None:
        """The run at the cursor (None on a collapsed grid's line)."""
        key = self._selected_key()
        return None if key is None or key.startswith(GROUP_PREFIX) else key

    def select_run(self, run_id: str) -> None:
        if run_id in self._keys:
            self.move_cursor(row=self._keys.index(run_id), animate=False)

    @property
    def shown_count(self) -> int:
        return len(self._keys)
