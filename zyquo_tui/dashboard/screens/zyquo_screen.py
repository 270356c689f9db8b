"""ZyquoScreen: the base of the dashboard's screens, which knows the App they run in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

if TYPE_CHECKING:
    from textual import getters

    from zyquo_tui.dashboard.app import ZyquoApp
    from zyquo_tui.dashboard.run_service import RunService


class ZyquoScreen(Screen):
    """A full screen of the dashboard. Its `app` is the ZyquoApp, typed as such, so the App's
    services (`service`, `store`, `smoothing`, `show_view`) are known where screens use them;
    `service` is short for the RunService most screens read."""

    if TYPE_CHECKING:
        # Declared for type checkers only: app.py imports every screen, so importing the App
        # class here at run time would close a cycle. Every screen runs inside a ZyquoApp.
        app = getters.app(ZyquoApp)

    @property
    def service(self) -> RunService:
        return self.app.service

    def action_back(self) -> None:
        """Back to the screen underneath."""
        self.app.pop_screen()
