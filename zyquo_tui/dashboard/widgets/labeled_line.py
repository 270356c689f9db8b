"""LabeledLine: a label with one control right of it, the label drawn by the line itself.

A Static per label would add a widget to every layout pass and every frame of the new-run
screen while the user types (see static_update.py); the line draws the label under its
child instead, in the columns the child's left margin leaves free.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import Horizontal


class LabeledLine(Horizontal):
    """`label`, then the line's child after its left margin (CSS sets the label's width)."""

    COMPONENT_CLASSES = {"labeled-line--label"}
    DEFAULT_CSS = """
    LabeledLine { height: auto; }
    LabeledLine > * { margin-left: 17; }
    LabeledLine > .labeled-line--label { color: $text; }
    """

    def __init__(self, label: str, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.label = label

    def render(self) -> Text:
        width = self.children[0].styles.margin.left if self.children else self.size.width
        return Text(self.label[:width], style=self.get_component_rich_style(
            "labeled-line--label"), no_wrap=True)
