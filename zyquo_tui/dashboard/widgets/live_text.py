"""LiveText: text that changes often, repainted without a layout pass."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget


class LiveText(Widget):
    """A fixed-size block of text for figures that change several times a second (a status
    line, a current value, the latest events). Setting `text` repaints only this widget;
    Static.update would also ask for a layout of the whole screen, which is what made live
    updates expensive. Give it a fixed height in CSS."""

    DEFAULT_CSS = """
    LiveText { height: 1; }
    """

    text: reactive[Text] = reactive(Text, layout=False)

    def render(self) -> Text:
        return self.text
