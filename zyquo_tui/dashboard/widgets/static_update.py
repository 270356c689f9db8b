"""Changing what the new-run screen shows at the smallest cost, so typing stays fast.

A layout pass of the new-run screen (about a hundred widgets) costs more than everything
else a key press does, so:

- `update_static` does not update content that did not change, and updates content that
  keeps its height with a repaint only;
- `OneLayoutPass` boxes need no second layout pass when their size changes (Textual lays the
  whole screen out again after any widget changed size, because it sets the new virtual size
  as a layout-changing reactive; for plain, non-scrolling boxes the first pass already put
  everything in place);
- `PanelText` is a Static with both.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from textual.visual import visualize
from textual.widgets import Static


def update_static(static: Static, content: RenderableType | str, *,
                  show: bool | None = None) -> None:
    """Show `content` in `static`; `show` (default: non-empty content) sets its display."""
    visible = bool(str(content)) if show is None else show
    if static.display != visible:
        static.display = visible  # a layout pass in any case
        static.update(content)
        return
    previous: Any = static.content
    if type(previous) is type(content) and previous == content:
        return
    width, height = static.content_size
    if not width or not visible:
        static.update(content)
        return
    same_height = visualize(static, content, markup=False).get_height(static.styles,
                                                                      width) == height
    static.update(content, layout=not same_height)


class OneLayoutPass:
    """Mixin for plain, non-scrolling widgets: a change of size needs no second layout pass
    (see the module docstring)."""

    def _size_updated(self, size, virtual_size, container_size, layout: bool = True) -> bool:
        return super()._size_updated(size, virtual_size, container_size,  # type: ignore[misc]
                                     layout=False)


class PanelText(OneLayoutPass, Static):
    """A Static whose changes of height cost one layout pass, not two."""
