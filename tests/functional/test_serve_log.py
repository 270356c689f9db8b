"""serve.log is rotated at the server's start once it passes config.toml [logs] max_bytes,
keeping [logs] backups older files: when `serve --detach` opens it, and when a service
manager (launchd) opened it as the server's stdout and stderr, which then write on into the
new file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from zyquo_tui.core.store.logs import rotate_own_output_if_large

WRITER = """
import sys
from pathlib import Path
from zyquo_tui.core.store.logs import rotate_own_output_if_large
rotated = rotate_own_output_if_large(Path(sys.argv[1]), int(sys.argv[2]), 3)
print(f"started, rotated={rotated}", flush=True)
print("an error line", file=sys.stderr, flush=True)
"""


def start_as_launchd_does(log: Path, max_bytes: int) -> None:
    """A process whose stdout and stderr are the log, opened for it (StandardOutPath)."""
    with open(log, "ab") as output:
        subprocess.run([sys.executable, "-c", WRITER, str(log), str(max_bytes)], stdout=output,
                       stderr=output, check=True, timeout=60, stdin=subprocess.DEVNULL)


def test_a_large_log_is_rotated_at_start_and_the_output_goes_to_a_new_file(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"old line\n" * 2000)  # 18 000 bytes
    start_as_launchd_does(log, max_bytes=10_000)
    assert log.read_text() == "started, rotated=True\nan error line\n"
    assert (tmp_path / "serve.log.1").read_bytes() == b"old line\n" * 2000


def test_a_small_log_is_appended_to(tmp_path):
    log = tmp_path / "serve.log"
    log.write_text("earlier start\n")
    start_as_launchd_does(log, max_bytes=10_000)
    assert log.read_text() == "earlier start\nstarted, rotated=False\nan error line\n"
    assert not (tmp_path / "serve.log.1").exists()


def test_restarts_keep_three_older_files_and_drop_the_oldest(tmp_path):
    log = tmp_path / "serve.log"
    for start in range(5):
        with open(log, "a") as handle:
            handle.write(f"start {start}\n" + "x" * 5000 + "\n")
        start_as_launchd_does(log, max_bytes=4096)
    assert sorted(p.name for p in tmp_path.glob("serve.log*")) == [
        "serve.log", "serve.log.1", "serve.log.2", "serve.log.3"]
    kept = [(tmp_path / f"serve.log.{n}").read_text() for n in (1, 2, 3)]
    assert ["start 4\n" in kept[0], "start 3\n" in kept[1], "start 2\n" in kept[2]] == [True] * 3
    assert not any("start 1\n" in text or "start 0\n" in text for text in kept)


def test_a_log_this_process_does_not_write_to_is_left_alone(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"y" * 50_000)
    assert rotate_own_output_if_large(log, 4096, 3) is False  # pytest's output is not the log
    assert log.stat().st_size == 50_000 and not (tmp_path / "serve.log.1").exists()


def test_serve_detach_rotates_a_large_serve_log_before_it_starts(tmp_path):
    import re

    from test_tinker_server import free_port, stop_detached

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[logs]\nmax_bytes = 4096\nbackups = 2\n")
    (home / "serve.log").write_bytes(b"from before\n" * 1000)
    env = {**os.environ, "ZYQUO_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "zyquo_tui", "serve", "--detach", "--port",
                           str(free_port())], capture_output=True, text=True, timeout=300,
                          env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    pid = int(re.search(r"\(pid (\d+),", done.stdout).group(1))
    try:
        assert (home / "serve.log.1").read_bytes() == b"from before\n" * 1000
        assert "Tinker API on" in (home / "serve.log").read_text()
    finally:
        stop_detached(pid)
