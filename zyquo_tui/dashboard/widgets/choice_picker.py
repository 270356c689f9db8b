"""ChoicePicker: a few choices on one line, with the ones that do not apply struck through.

The screen tells the picker which choices are `allowed` (the method the model allows, the
objective the dataset trains); the others stay visible, dimmed and struck through, so the
user sees what exists, and the cursor skips them. ← and → move (and choose) at once. Where
the line is too narrow for every choice, the refused ones give way (the chosen one stays,
refused or not).
"""

from __future__ import annotations

from typing import Any

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget


def choice_text(choice: Any) -> str:
    """How a choice is written (an enum's value, or the string itself)."""
    return str(getattr(choice, "value", choice))


class ChoicePicker(Widget, can_focus=True):
    """Choose one of `choices` (see the module docstring)."""

    BINDINGS = [
        Binding("left", "move(-1)", "Previous choice", show=False),
        Binding("right", "move(1)", "Next choice", show=False),
    ]
    COMPONENT_CLASSES = {"choice-picker--chosen", "choice-picker--refused"}
    DEFAULT_CSS = """
    ChoicePicker { height: 1; width: 1fr; }
    ChoicePicker > .choice-picker--chosen { text-style: bold; color: $text-success; }
    ChoicePicker:focus > .choice-picker--chosen { background: $block-cursor-background;
                                                  color: $block-cursor-foreground; }
    ChoicePicker > .choice-picker--refused { color: $text-disabled; text-style: strike; }
    """

    value: reactive[Any] = reactive(None)
    allowed: reactive[frozenset] = reactive(frozenset())

    class Changed(Message):
        """The user chose another value."""

        def __init__(self, picker: ChoicePicker, value: Any) -> None:
            super().__init__()
            self.picker = picker
            self.value = value

        @property
        def control(self) -> ChoicePicker:
            return self.picker

    def __init__(self, choices: tuple, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.choices = tuple(choices)
        self.set_reactive(ChoicePicker.value, self.choices[0])
        self.set_reactive(ChoicePicker.allowed, frozenset(self.choices))

    def shown_choices(self) -> tuple:
        """Every choice where the line has room for them all; else the allowed ones and the
        chosen one."""
        width = self.size.width
        full = sum(len(choice_text(choice)) + 3 for choice in self.choices) - 1
        if not width or full <= width:
            return self.choices
        return tuple(choice for choice in self.choices
                     if choice in self.allowed or choice == self.value)

    def _spans(self) -> list[tuple[Any, int, int]]:
        spans, x = [], 0
        for choice in self.shown_choices():
            width = len(choice_text(choice)) + 2
            spans.append((choice, x, x + width))
            x += width + 1
        return spans

    def render(self) -> Text:
        chosen = self.get_component_rich_style("choice-picker--chosen")
        refused = self.get_component_rich_style("choice-picker--refused")
        text = Text()
        for index, choice in enumerate(self.shown_choices()):
            if index:
                text.append(" ")
            mark = "●" if choice == self.value else "○"
            style = chosen if choice == self.value else (
                refused if choice not in self.allowed else "")
            if choice == self.value and choice not in self.allowed:
                style = chosen + Style(strike=True)  # kept as asked for, and refused
            text.append(f"{mark} {choice_text(choice)}", style=style)
        return text

    def choose(self, value: Any) -> None:
        """Set the value from the program (no Changed)."""
        self.value = value

    def _chosen_by_user(self, value: Any) -> None:
        self.value = value
        self.post_message(self.Changed(self, value))

    def action_move(self, step: int) -> None:
        index = self.choices.index(self.value) if self.value in self.choices else 0
        for _ in range(len(self.choices)):
            index = (index + step) % len(self.choices)
            if self.choices[index] in self.allowed:
                break
        if self.choices[index] != self.value:
            self._chosen_by_user(self.choices[index])

    def on_click(self, event: events.Click) -> None:
        for choice, start, end in self._spans():
            if start <= event.x < end and choice in self.allowed and choice != self.value:
                self._chosen_by_user(choice)
