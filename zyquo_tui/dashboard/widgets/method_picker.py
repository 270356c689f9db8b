"""MethodPicker: lora, dora, qlora or full on one line, with the ones the model rules out.

qlora needs a quantized base and full fine-tuning an unquantized one, so the screen tells the
picker which methods the chosen model allows; the others stay visible, dimmed and struck
through, and the cursor skips them (a ChoicePicker of the methods).
"""

from __future__ import annotations

from zyquo_tui.core.runs.settings import Method
from zyquo_tui.dashboard.widgets.choice_picker import ChoicePicker

METHODS = (Method.LORA, Method.DORA, Method.QLORA, Method.FULL)


class MethodPicker(ChoicePicker):
    """Choose the fine-tuning method (see the module docstring)."""

    class Changed(ChoicePicker.Changed):
        """The user chose another method."""

        @property
        def method(self) -> Method:
            return self.value

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(METHODS, id=id)

    @property
    def method(self) -> Method:
        return self.value
