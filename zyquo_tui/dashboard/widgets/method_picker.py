"""MethodPicker: lora, dora, qlora or full on one line, with the ones the model rules out.

qlora needs a quantized base and full fine-tuning an unquantized one, so the screen tells the
picker which methods the chosen model allows; the others stay visible, dimmed and struck
through, and the cursor skips them. ← and → move (and choose) at once.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from zyquo_tui.core.runs.settings import Method

METHODS = (Method.LORA, Method.DORA, Method.QLORA, Method.FULL)


class MethodPicker(Widget, can_focus=True):
    """Choose the fine-tuning method (see the module docstring)."""

    BINDINGS = [
        Binding("left", "move(-1)", "Previous method", show=False),
        Binding("right", "move(1)", "Next method", show=False),
    ]
    COMPONENT_CLASSES = {"method-picker--chosen", "method-picker--refused"}
    DEFAULT_CSS = """
    MethodPicker { height: 1; width: 1fr; }
    MethodPicker > .method-picker--chosen { text-style: bold; color: $text-success; }
    MethodPicker:focus > .method-picker--chosen { background: $block-cursor-background;
                                                  color: $block-cursor-foreground; }
    MethodPicker > .method-picker--refused { color: $text-disabled; text-style: strike; }
    """

    method: reactive[Method] = reactive(Method.LORA)
    allowed: reactive[frozenset] = reactive(frozenset(METHODS))

    class Changed(Message):
        """The user chose another method."""

        def __init__(self, picker: "MethodPicker", method: Method) -> None:
            super().__init__()
            self.picker = picker
            self.method = method

        @property
        def control(self) -> "MethodPicker":
            return self.picker

    def _spans(self) -> list[tuple[Method, int, int]]:
        spans, x = [], 0
        for method in METHODS:
            width = len(method.value) + 2
            spans.append((method, x, x + width))
            x += width + 1
        return spans

    def render(self) -> Text:
        chosen = self.get_component_rich_style("method-picker--chosen")
        refused = self.get_component_rich_style("method-picker--refused")
        text = Text()
        for index, method in enumerate(METHODS):
            if index:
                text.append(" ")
            mark = "●" if method is self.method else "○"
            style = chosen if method is self.method else (
                refused if method not in self.allowed else "")
            text.append(f"{mark} {method.value}", style=style)
        return text

    def choose(self, method: Method) -> None:
        """Set the method from the program (no Changed)."""
        self.method = method

    def action_move(self, step: int) -> None:
        index = METHODS.index(self.method)
        for _ in range(len(METHODS)):
            index = (index + step) % len(METHODS)
            if METHODS[index] in self.allowed:
                break
        if METHODS[index] is not self.method:
            self.method = METHODS[index]
            self.post_message(self.Changed(self, self.method))

    def on_click(self, event: events.Click) -> None:
        for method, start, end in self._spans():
            if start <= event.x < end and method in self.allowed and method is not self.method:
                self.method = method
                self.post_message(self.Changed(self, method))
