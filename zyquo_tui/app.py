"""The dashboard: a Textual app over the run store (placeholder until the dashboard lands)."""

from __future__ import annotations


def run_dashboard() -> int:
    from .ui.app import ZyquoApp

    ZyquoApp().run()
    return 0
