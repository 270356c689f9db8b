"""Dialog: the frame every modal dialog of the dashboard shares."""

from __future__ import annotations

from typing import TypeVar

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

ResultType = TypeVar("ResultType")


class Dialog(ModalScreen[ResultType]):
    """A box in the middle of the window, over the screen it was opened from: a framed panel
    with an optional bold heading above what `compose_content` yields.

    A dialog sizes its frame in its own DEFAULT_CSS (`ConfirmDialog > .dialog-frame { … }`),
    sets `SCROLLS` when its content can be taller than the window, and binds its own keys
    (escape in every one) to `action_close` or to an answer: the keys stay the dialog's own,
    in its footer and in the ids users remap them by.
    """

    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog > .dialog-frame {
        width: 64;
        max-width: 95%;
        height: auto;
        border: thick $accent;
        background: $surface;
        padding: 1 2;
    }
    Dialog .dialog-heading { text-style: bold; margin-bottom: 1; }
    Dialog .dialog-keys { color: $text-muted; margin-top: 1; }
    """
    SCROLLS = False

    def __init__(self, heading: str = "") -> None:
        super().__init__()
        self.heading = heading

    def compose(self) -> ComposeResult:
        frame = VerticalScroll if self.SCROLLS else Vertical
        with frame(classes="dialog-frame"):
            if self.heading:
                yield Static(self.heading, classes="dialog-heading", markup=False)
            yield from self.compose_content()

    def compose_content(self) -> ComposeResult:
        """The dialog's own widgets, below its heading."""
        yield from ()

    def action_close(self) -> None:
        """Close without an answer."""
        self.dismiss(None)
