"""FilterBar: the `/` filter of the runs table, typed into at the bottom of the screen."""

from __future__ import annotations

from textual.widgets import Input


class FilterBar(Input):
    """A one-line input that narrows the runs table as the user types; enter keeps the filter
    and returns to the table, escape clears it."""

    DEFAULT_CSS = """
    FilterBar {
        height: 1;
        border: none;
        padding: 0 1;
        background: $panel;
        display: none;
    }
    FilterBar:focus { border: none; background: $panel; }
    FilterBar.-shown { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(placeholder="filter runs: name, state, model, dataset, id…", id=id)
