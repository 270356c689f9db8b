"""TitleBar: where the user is (view and run) and the number keys to the other views."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

VIEWS = (("1", "runs", "Runs", "Runs"), ("2", "run", "Metrics", "Metrics"),
         ("3", "checkpoints", "Checkpoints", "Ckpts"), ("4", "logs", "Logs", "Logs"))
WIDE = 110  # below this many columns the tabs use short labels


class TitleBar(Widget):
    """One line: the app and view on the left, the view keys (1-4) on the right, the current
    one highlighted, as in k9s and btop."""

    COMPONENT_CLASSES = {"title-bar--app", "title-bar--current", "title-bar--key",
                         "title-bar--context"}
    DEFAULT_CSS = """
    TitleBar {
        height: 1;
        background: $panel;
        color: $foreground;
    }
    TitleBar > .title-bar--app { text-style: bold; color: $accent; }
    TitleBar > .title-bar--context { color: $foreground; }
    TitleBar > .title-bar--key { color: $foreground-muted; }
    TitleBar > .title-bar--current { background: $accent; color: $background; text-style: bold; }
    """

    context: reactive[str] = reactive("")

    def __init__(self, view: str, context: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view = view
        self.set_reactive(TitleBar.context, context)

    def render(self) -> Text:
        width = self.size.width
        tabs = Text()
        for key, view, label, short in VIEWS:
            style = self.get_component_rich_style(
                "title-bar--current" if view == self.view else "title-bar--key")
            tabs.append(f" {key} {label if width >= WIDE else short} ", style=style)
        left = Text()
        left.append(" zyquo-tui ", style=self.get_component_rich_style("title-bar--app"))
        left.append(self.context, style=self.get_component_rich_style("title-bar--context"))
        room = max(0, width - tabs.cell_len - 1)
        left.truncate(room, overflow="ellipsis")
        left.pad_right(room - left.cell_len + 1)
        return left + tabs
