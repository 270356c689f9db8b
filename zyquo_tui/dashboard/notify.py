"""Telling the user that a run ended: a toast, the terminal bell, a desktop notification through
the terminal (OSC 9 or OSC 777: it travels over SSH to the laptop's terminal), and an optional
ntfy-style webhook so a phone hears about it.

Settings come from $ZYQUO_HOME/config.toml's [notifications], read with the rest of the file
(core/store/user_settings.py NotificationSettings):

    [notifications]
    desktop = "auto"        # "auto", "osc9", "osc777" or "off"
    bell = true
    webhook_url = "https://ntfy.sh/my-private-topic"

The webhook is a POST with urllib in a daemon thread; a failure is logged, never raised.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.request
from typing import TYPE_CHECKING, Mapping

from zyquo_tui.core.store.user_settings import NotificationSettings

if TYPE_CHECKING:
    from textual.app import App

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_SECONDS = 10.0

# Terminals known to show OSC 9 / OSC 777 as desktop notifications. Over SSH only TERM and
# (with the default macOS ssh_config) LC_* reach the server, so LC_TERMINAL is the best clue.
_OSC9_PROGRAMS = {"iTerm.app", "WezTerm", "ghostty"}
_OSC9_TERMINALS = {"iTerm2"}
_OSC9_TERMS = ("xterm-ghostty",)
_OSC777_TERMS = ("foot", "rxvt-unicode")


def desktop_protocol(choice: str, environ: Mapping[str, str]) -> str | None:
    """"osc9", "osc777" or None for this terminal and setting."""
    if choice in ("osc9", "osc777"):
        return choice
    if choice != "auto":
        return None
    term = environ.get("TERM", "")
    if (environ.get("TERM_PROGRAM") in _OSC9_PROGRAMS
            or environ.get("LC_TERMINAL") in _OSC9_TERMINALS
            or term.startswith(_OSC9_TERMS)):
        return "osc9"
    if term.startswith(_OSC777_TERMS):
        return "osc777"
    return None


def _clean(text: str) -> str:
    # Control characters (and ';' for OSC 777's fields) would end or split the sequence.
    return "".join(ch for ch in text if ch >= " " and ch != "\x7f").replace(";", ",")


def osc_sequence(protocol: str, title: str, body: str, environ: Mapping[str, str]) -> str:
    """The escape sequence, wrapped for tmux or screen so it reaches the outer terminal."""
    if protocol == "osc777":
        sequence = f"\x1b]777;notify;{_clean(title)};{_clean(body)}\x07"
    else:
        sequence = f"\x1b]9;{_clean(title)}: {_clean(body)}\x07"
    if environ.get("TMUX"):
        # tmux passes it on with `set -g allow-passthrough on` (tmux 3.3 and later).
        return "\x1bPtmux;" + sequence.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    if environ.get("STY") or environ.get("TERM", "").startswith("screen"):
        return "\x1bP" + sequence + "\x1b\\"
    return sequence


def post_webhook(url: str, title: str, body: str, *, failed: bool,
                 timeout: float = WEBHOOK_TIMEOUT_SECONDS) -> None:
    """An ntfy-style POST: the body is the message; Title, Tags and Priority as headers."""
    request = urllib.request.Request(
        url, data=body.encode("utf-8"), method="POST",
        headers={"Title": title.encode("ascii", "replace").decode("ascii"),
                 "Tags": "x" if failed else "white_check_mark",
                 "Priority": "high" if failed else "default",
                 "Content-Type": "text/plain; charset=utf-8"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read(1024)


class Notifier:
    """Sends one notification through every channel the user turned on."""

    def __init__(self, app: "App", settings: NotificationSettings,
                 environ: Mapping[str, str] | None = None) -> None:
        self.app = app
        self.settings = settings
        self.environ = dict(os.environ if environ is None else environ)
        self.webhook_threads: list[threading.Thread] = []
        self.webhook_errors: list[str] = []

    def desktop_enabled(self) -> bool:
        """Off under the test driver and in a browser (`textual serve`), where no terminal
        would turn the sequence into a notification."""
        driver = getattr(self.app, "_driver", None)
        if driver is None or self.app.is_headless or type(driver).__name__ == "WebDriver":
            return False
        return desktop_protocol(self.settings.desktop, self.environ) is not None

    def send(self, title: str, body: str, *, failed: bool, warning: bool = False) -> None:
        severity = "error" if failed else "warning" if warning else "information"
        self.app.notify(body, title=title, severity=severity,
                        timeout=12 if failed or warning else 8)
        if self.settings.bell:
            self.app.bell()
        if self.desktop_enabled():
            protocol = desktop_protocol(self.settings.desktop, self.environ)
            # Textual has no public way to send a raw sequence; App.bell() writes the same way.
            self.app._driver.write(osc_sequence(protocol, title, body, self.environ))
        if self.settings.webhook_url:
            thread = threading.Thread(target=self._webhook, args=(title, body, failed),
                                      name="zyquo-webhook", daemon=True)
            self.webhook_threads.append(thread)
            thread.start()

    def _webhook(self, title: str, body: str, failed: bool) -> None:
        url = self.settings.webhook_url
        try:
            post_webhook(url, title, body, failed=failed)
        except Exception as error:  # a phone not hearing about a run must not break anything
            message = f"webhook {url} failed: {type(error).__name__}: {error}"
            self.webhook_errors.append(message)
            log.warning(message)
