"""HelpDialog: every key that works where the user is, and what it does."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static

from zyquo_tui.dashboard.dialogs.dialog import Dialog

EVERYWHERE = (
    ("1 2 3 4", "Runs, metrics, checkpoints, logs of the selected run"),
    ("n / N", "New run / new run like the selected one"),
    ("M / D", "The models / the datasets found"),
    ("m", "The machine: memory, budget, swap, CPU, what the trainer uses"),
    ("?", "This help"),
    ("ctrl+p", "Command palette: every action by name (\"Area: Action\")"),
    ("esc", "Back"),
    ("q", "Quit the dashboard; training goes on in the background"),
)


class HelpDialog(Dialog[None]):
    """The keys of the screen underneath (only those valid now), then the keys that work
    everywhere, and a reminder that quitting never stops training."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "Close", id="help.close")]
    DEFAULT_CSS = """
    HelpDialog > .dialog-frame { width: 84; max-width: 98%; max-height: 95%; padding: 0 1; }
    """
    SCROLLS = True

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.under = screen

    def compose_content(self) -> ComposeResult:
        area = getattr(self.under, "AREA", "Dashboard")
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        table.add_row(Text(f"{area}", style="bold underline"), "")
        seen = set()
        for key, active in self.under.active_bindings.items():
            binding = active.binding
            # Our own bindings all carry a tooltip; widgets' navigation keys (arrows, page
            # keys) are left out unless shown in the footer.
            if (not active.enabled or binding.system or not binding.description
                    or not (binding.show or binding.tooltip)
                    or active.node is self.app or binding.action in seen):
                continue
            seen.add(binding.action)
            table.add_row(self.app.get_key_display(binding),
                          binding.tooltip or binding.description)
        table.add_row("", "")
        table.add_row(Text("Everywhere", style="bold underline"), "")
        for key, text in EVERYWHERE:
            table.add_row(key, text)
        table.add_row("", "")
        table.add_row("", Text("Training runs in its own process: closing the dashboard or the "
                               "SSH session never stops it.", style="italic"))
        yield Static(table)
