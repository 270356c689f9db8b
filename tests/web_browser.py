"""`zyquo-tui web` as a person meets it: the server started from the venv without the venv on
PATH, and the page in a real headless chromium (Debian's), driven by Playwright.

Used by tests/functional/test_web.py and bench/bench_web.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# Debian's chromium: Playwright's own browser builds cannot be downloaded here.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

# The page draws the terminal on a canvas (xterm.js), so its text is not in the DOM.
# textual-serve's script keeps its xterm.js Terminal in a closure as `this.terminal`; a setter
# on that name, installed before the script runs, hands the same object to the page's window
# too, and xterm.js's public buffer API then reads what the page holds on screen.
CAPTURE_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true,
                                             enumerable: true});
    if (value && value.buffer && typeof value.onWriteParsed === "function") {
      window.zyquoTerminal = value;
    }
  },
});
window.zyquoScreen = () => {
  const terminal = window.zyquoTerminal;
  if (!terminal) return "";
  const buffer = terminal.buffer.active, lines = [];
  for (let y = 0; y < terminal.rows; y++) {
    const line = buffer.getLine(buffer.viewportY + y);
    lines.push(line ? line.translateToString(true) : "");
  }
  return lines.join("\\n");
};
// Resolves with the moment (performance.now(): ms since the page's navigation began) the
// screen first shows `text` (or, with `gone`, first no longer shows it), checked now and after
// every write the terminal parses; null after `timeout` ms. The interval only waits for the
// terminal to exist.
window.zyquoWhenShown = (text, timeout, gone) => new Promise((resolve) => {
  const started = performance.now();
  let listener = null, done = false;
  const finish = (value) => {
    if (done) return;
    done = true;
    clearInterval(poll);
    if (listener) listener.dispose();
    resolve(value);
  };
  const check = () => {
    if (window.zyquoScreen().includes(text) !== Boolean(gone)) finish(performance.now());
  };
  const poll = setInterval(() => {
    if (!listener && window.zyquoTerminal) {
      listener = window.zyquoTerminal.onWriteParsed(check);
      check();
    }
    if (performance.now() - started > timeout) finish(null);
  }, 20);
  if (window.zyquoTerminal) listener = window.zyquoTerminal.onWriteParsed(check);
  check();
});
// The moment of the last key the page received (before xterm.js turns it into input).
window.addEventListener("keydown", () => { window.zyquoKeyAt = performance.now(); }, true);
"""


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM} (apt-get install chromium)"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def path_without_zyquo_tui() -> str:
    """PATH as a shell has it when the venv was never activated: no folder on it holds a
    `zyquo-tui` (neither the venv's bin nor any other install)."""
    entries = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return os.pathsep.join(entry for entry in entries
                           if entry and shutil.which("zyquo-tui", path=entry) is None)


@contextmanager
def served_dashboard(home: Path, port: int, timeout: float = 60) -> Iterator[str]:
    """`python -m zyquo_tui web` on `port` (the venv's python by its path), for the store at
    `home`, with no zyquo-tui on PATH; yields the address once it answers, and stops it
    afterwards."""
    env = {**os.environ, "ZYQUO_HOME": str(home), "PATH": path_without_zyquo_tui()}
    env.pop("VIRTUAL_ENV", None)
    log = open(home / "web.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "zyquo_tui", "web", "--port", str(port)],
                              env=env, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if server.poll() is not None:
                raise AssertionError(f"zyquo-tui web exited {server.returncode}: "
                                     f"{(home / 'web.log').read_text()}")
            try:
                with urllib.request.urlopen(url, timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"zyquo-tui web did not answer at {url} "
                                         f"in {timeout} s")
                time.sleep(0.1)
        yield url
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)  # as ctrl+c: the tabs' dashboards quit too
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=10)
        log.close()


@contextmanager
def chromium():
    """Debian's chromium, headless, under Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser, width: int = 1280, height: int = 800):
    """A tab that can read the served terminal's screen (not yet loaded)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.add_init_script(CAPTURE_TERMINAL)
    return page


def screen_text(page) -> str:
    """The page's terminal as text, trailing blanks dropped."""
    text = page.evaluate("window.zyquoScreen()")
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip() or "(blank)"


def when_shown(page, text: str, timeout_ms: float = 60_000) -> float | None:
    """The moment (ms since the page's navigation began) the page's terminal first shows
    `text`, measured in the page; None if it does not within `timeout_ms`."""
    return page.evaluate("([text, timeout]) => window.zyquoWhenShown(text, timeout)",
                         [text, timeout_ms])


def key_latency(page, key: str, text: str, timeout_ms: float = 30_000,
                gone: bool = False) -> float | None:
    """Milliseconds from the page receiving `key` to its terminal showing `text` (with `gone`:
    to `text` leaving it); None if that does not happen within `timeout_ms`."""
    if (text in screen_text(page)) != gone:
        raise ValueError(f"{text!r} is {'not ' if gone else ''}on the screen before {key}")
    page.evaluate("([text, timeout, gone]) => { window.zyquoAwaited = "
                  "window.zyquoWhenShown(text, timeout, gone); }", [text, timeout_ms, gone])
    page.keyboard.press(key)
    shown = page.evaluate("window.zyquoAwaited")
    return None if shown is None else shown - page.evaluate("window.zyquoKeyAt")
