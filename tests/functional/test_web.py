"""`zyquo-tui web`: the dashboard served to a real headless chromium, from a virtual environment
that was never activated; and the sentences when it cannot serve."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA, zyquo_cli
from helpers import make_run
from web_browser import (
    chromium,
    free_port,
    key_latency,
    missing_browser,
    new_page,
    path_without_zyquo_tui,
    screen_text,
    served_dashboard,
    when_shown,
)

WHY_NO_BROWSER = missing_browser()


@pytest.fixture
def browser_here() -> None:
    """Skips where chromium or Playwright is missing, but not in CI, whose .ci/run installs
    both: a skip there would hide a broken install step."""
    if WHY_NO_BROWSER is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser test, but {WHY_NO_BROWSER}")
        pytest.skip(f"no browser here: {WHY_NO_BROWSER}")


def test_a_browser_shows_the_runs_list_and_a_key_opens_a_run(browser_here, isolated_home,
                                                             tiny_model):
    _, run = make_run(tiny_model, SAMPLE_DATA / "completions")
    # The venv has its zyquo-tui script, and the server's PATH leaves its folder out.
    venv_bin = Path(sys.executable).parent
    assert shutil.which("zyquo-tui", path=str(venv_bin)) is not None
    assert str(venv_bin) not in path_without_zyquo_tui().split(os.pathsep)

    with served_dashboard(isolated_home, free_port()) as url, chromium() as browser:
        page = new_page(browser)
        page.goto(url)
        # Generous: the dashboard process starts per tab, on a machine the suite keeps busy.
        drawn = when_shown(page, run.name, timeout_ms=120_000)
        assert drawn is not None, (f"the runs list never showed; the page:\n{screen_text(page)}"
                                   f"\nthe server:\n{(isolated_home / 'web.log').read_text()}")
        runs_list = screen_text(page)
        assert "configured" in runs_list and "1 run" in runs_list

        page.locator(".xterm-helper-textarea").focus()  # where xterm.js takes the keys
        opened = key_latency(page, "Enter", f"Run · {run.name}", timeout_ms=60_000)
        assert opened is not None, f"enter did not open the run; the page:\n{screen_text(page)}"
        # The rest of the run's view follows its title, a frame or more later.
        assert when_shown(page, "waiting for the first loss", timeout_ms=60_000) is not None
        assert run.id in screen_text(page)


def test_without_textual_serve_one_sentence_says_what_to_install():
    # The extra missing, as in an environment where only `pip install zyquo-tui` was done.
    code = ("import sys; sys.modules['textual_serve'] = None; "
            "from zyquo_tui.cli.main import main; sys.exit(main(['web']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    [sentence] = done.stderr.splitlines()
    assert "needs textual-serve" in sentence
    # The pip of this very environment, so the install lands where the command runs.
    assert f"{sys.executable} -m pip install 'zyquo-tui[web]'" in sentence


def test_a_taken_port_is_one_sentence_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = zyquo_cli("web", "--port", str(port), timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    [sentence] = done.stderr.splitlines()
    assert sentence.startswith(f"zyquo-tui: port {port} on 127.0.0.1 is already in use")
    assert sentence.endswith("choose another with --port.")


@pytest.mark.parametrize("argv, says", [
    (["--port", "70000"], "'70000' is not a port number (1 to 65535)"),
    (["--host", "no-such-host.invalid"], "cannot listen on no-such-host.invalid port"),
])
def test_a_bad_address_is_one_sentence_and_exit_2(argv, says):
    done = zyquo_cli("web", *argv, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    [sentence] = done.stderr.splitlines()
    assert says in sentence


def test_the_page_address_is_one_a_browser_can_open():
    # The page's websocket goes to this address: a wildcard host cannot be dialled, so the
    # machine's name stands in; an IPv6 literal needs its brackets in a URL.
    from zyquo_tui.cli.web_cmd import page_url

    assert page_url("127.0.0.1", 8000) == "http://127.0.0.1:8000"
    assert page_url("::1", 8080) == "http://[::1]:8080"
    assert page_url("0.0.0.0", 8000) == f"http://{socket.gethostname()}:8000"
    assert page_url("::", 8000) == f"http://{socket.gethostname()}:8000"
    assert page_url("mini.local", 8000) == "http://mini.local:8000"
