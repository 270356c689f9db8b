"""TryScreen: ask a prompt, read the adapter's answer beside the base model's as they stream in.

Generation needs mlx, so it runs in a generator subprocess (core/processes/try_session.py)
that the screen keeps while it is open: the model loads once, each prompt costs only its
answers. A worker thread reads the subprocess's JSON lines and hands each event to the screen;
closing the screen ends the subprocess.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Input, Static

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.processes.try_session import (
    TryRequest,
    TrySession,
    shown_answer,
    try_request,
)
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.screens.run_view_screen import RunViewScreen
from zyquo_tui.dashboard.widgets.title_bar import TitleBar

# How many exchanges the screen keeps; older ones scroll away for good.
HISTORY = 5
SIDES = ("adapter", "base")


def open_session(store: RunStore, run_id: str, step: int | None) -> TrySession:
    """The real generator: the run's model with the adapter of `step` (None: the latest)."""
    return TrySession(try_request(store, run_id, step))


class Exchange(Vertical):
    """One prompt and its two answers, side by side, filled in as the text arrives."""

    DEFAULT_CSS = """
    Exchange { height: auto; margin-bottom: 1; }
    Exchange .prompt { text-style: bold; padding: 0 1; }
    Exchange Horizontal { height: auto; }
    Exchange .answer {
        width: 1fr; height: auto; min-height: 3; padding: 0 1;
        border: round $panel-lighten-2; border-title-color: $text-muted;
    }
    Exchange .answer.-adapter { border: round $accent; border-title-color: $accent; }
    """

    def __init__(self, prompt: str, step: int, base: bool) -> None:
        super().__init__()
        self.prompt = prompt
        self.step = step
        self.base = base
        self.texts = {side: "" for side in SIDES}
        self.finished = {side: False for side in SIDES}

    def compose(self) -> ComposeResult:
        yield Static(Text(f"› {self.prompt}"), classes="prompt")
        with Horizontal():
            for side in SIDES if self.base else SIDES[:1]:
                answer = Static("…", classes=f"answer -{side}", markup=False)
                answer.border_title = f"adapter · step {self.step}" if side == "adapter" \
                    else "base"
                yield answer

    def on_mount(self) -> None:
        for side in SIDES if self.base else SIDES[:1]:
            self._show(side)

    def add(self, side: str, text: str, whole: bool = False) -> None:
        self.texts[side] = text if whole else self.texts[side] + text
        self.finished[side] = whole
        if self.is_mounted:  # else on_mount shows it: the first tokens can beat the mount
            self._show(side)

    def _show(self, side: str) -> None:
        text = self.texts[side]
        shown = shown_answer(text) if self.finished[side] or text.strip("\n") else "…"
        self.query_one(f".-{side}", Static).update(shown)


class TryScreen(RunViewScreen):
    """Type a prompt, press enter: the run's adapter (at the checkpoint chosen) and its base
    model answer it, each in its own box, as tokens arrive. The last few exchanges stay."""

    AREA = "Try"
    BINDINGS = [
        Binding("escape", "back", "Back", id="app.back", tooltip="Back"),
    ]
    DEFAULT_CSS = """
    TryScreen #try-status { height: 1; padding: 0 1; color: $text-muted; }
    TryScreen #try-status.-error { color: $error; }
    TryScreen #try-history { height: 1fr; padding: 0 1; }
    TryScreen #try-prompt { dock: bottom; margin: 0 1 1 1; }
    """

    def __init__(self, run_id: str, step: int | None = None, *,
                 session_factory: Callable[[RunStore, str, int | None], Any] = open_session
                 ) -> None:
        super().__init__(run_id)
        self.step = step
        self.session_factory = session_factory
        self.session: Any = None
        self.request: TryRequest | None = None
        self.exchanges: dict[int, Exchange] = {}
        self.ready = False
        self.waiting = 0  # prompts sent and not yet answered
        self.closing = False
        self.early_prompt: str | None = None  # asked while the model loaded: sent once ready
        self.failed = False

    def compose(self) -> ComposeResult:
        yield TitleBar("try", id="title")
        yield Static("Loading the model and the adapter…", id="try-status")
        yield VerticalScroll(id="try-history")
        yield Input(placeholder="Ask something; enter sends it to both models", id="try-prompt")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.show_title("Try")
        field = self.query_one("#try-prompt", Input)
        field.cursor_blink = False
        field.focus()
        self.generate()

    def on_unmount(self) -> None:
        self.closing = True
        if self.session is not None:
            self.session.close()  # its reader sees the end; a cancelled worker would not

    # -- the generator, in a worker thread --------------------------------------------------------

    @work(thread=True, exit_on_error=False, group="try", name="generator")
    def generate(self) -> None:
        try:
            session = self.session_factory(self.service.store, self.run_id, self.step)
        except UserError as error:
            self.app.call_from_thread(self._failed, error.message)
            return
        if self.closing:
            session.close()
            return
        self.session = session
        while True:
            event = session.next_event()
            if event is None:
                if not self.closing:
                    tail = session.stderr_tail()
                    self.app.call_from_thread(
                        self._failed, "The generator stopped" + (f": {tail}" if tail else "."))
                return
            self.app.call_from_thread(self._received, event)

    def _received(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "ready":
            self.request = self.session.request
            self.ready = True
            self._say_ready()
            if self.early_prompt is not None:
                prompt, self.early_prompt = self.early_prompt, None
                self._send(prompt)
        elif kind in ("text", "answer"):
            exchange = self.exchanges.get(event.get("index", -1))
            if exchange is not None:
                exchange.add(event["side"], event.get("text", ""), whole=kind == "answer")
                self.query_one("#try-history", VerticalScroll).scroll_end(animate=False)
        elif kind == "done":
            self.waiting = max(0, self.waiting - 1)
            if not self.waiting:
                self._say_ready()
        elif kind == "error":
            self._failed(event.get("message", "The generator failed."))

    def _say_ready(self) -> None:
        request = self.session.request
        how = "greedy" if request.temperature == 0 else f"temperature {request.temperature}"
        self._status(f"Adapter at step {request.step} vs the base · {how}, up to "
                     f"{request.max_tokens} tokens · enter sends")

    def _status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#try-status", Static)
        status.update(Text(text))
        status.set_class(error, "-error")

    def _failed(self, message: str) -> None:
        self.ready = False
        self.failed = True
        self._status(message, error=True)

    # -- asking -----------------------------------------------------------------------------------

    @on(Input.Submitted, "#try-prompt")
    def ask(self, event: Input.Submitted) -> None:
        prompt = event.value.strip()
        if not prompt or self.failed:  # the status line says why nothing can be asked
            return
        event.input.value = ""
        if not self.ready:
            self.early_prompt = prompt
            self._status("Loading the model and the adapter… your question goes as soon as "
                         "they are ready")
            return
        self._send(prompt)

    def _send(self, prompt: str) -> None:
        try:
            index = self.session.ask(prompt)
        except UserError as error:
            self._failed(error.message)
            return
        request = self.session.request
        exchange = Exchange(prompt, request.step, request.base)
        self.exchanges[index] = exchange
        history = self.query_one("#try-history", VerticalScroll)
        history.mount(exchange)
        for old in sorted(self.exchanges)[:-HISTORY]:
            self.exchanges.pop(old).remove()
        history.scroll_end(animate=False)
        self.waiting += 1
        self._status("Answering…")
