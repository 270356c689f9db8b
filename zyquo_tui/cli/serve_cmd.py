"""`zyquo-tui serve`: the Tinker-compatible server (docs/tinker-server.md).

The official `tinker` SDK trains and samples this machine's models through it: a program needs
TINKER_BASE_URL and the server's key, which `--show-key` prints (the server's output never
shows it: that output goes to logs). The server is its own process (it imports
mlx and the SDK; this command imports neither): `python -m zyquo_tui.server`, which this
command becomes.

    zyquo-tui serve                      # http://127.0.0.1:8765, this machine only
    zyquo-tui serve --host 0.0.0.0 --port 9000
    zyquo-tui serve --show-key           # print the key and exit
    zyquo-tui serve --detach             # in the background, as a run trains: survives the
                                         # terminal; its output goes to $ZYQUO_HOME/serve.log
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys

from zyquo_tui.cli.web_cmd import add_address_arguments, check_can_listen
from zyquo_tui.core.errors import UserError

DEFAULT_PORT = 8765
NEEDED = ("tinker", "starlette", "uvicorn")  # the serve extra


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve the Tinker API: tinker programs train local models",
        description="Serve the Tinker API (the tinker SDK 0.38's wire protocol) so that "
                    "programs written for Tinker train and sample this machine's models: "
                    "set TINKER_BASE_URL to the address and TINKER_API_KEY to the key "
                    "`zyquo-tui serve --show-key` prints (made on the first start, kept in the "
                    "store, readable by you only). Limits on each request: config.toml "
                    "[serve]. Needs the serve extra: pip install 'zyquo-tui[serve]'.")
    add_address_arguments(parser, DEFAULT_PORT)
    parser.add_argument("--detach", action="store_true",
                        help="serve in the background, in a session of its own (it survives "
                             "the terminal); prints the address and the server's pid "
                             "once it answers; its output goes to serve.log in the store (rotated at "
                             "start past config.toml [logs] max_bytes)")
    parser.add_argument("--show-key", action="store_true",
                        help="print the server's key (making it if there is none) and exit")
    parser.set_defaults(handler=cmd_serve)


def cmd_serve(args) -> int:
    from zyquo_tui.core.store.server_key import load_or_create_key

    if args.show_key:
        print(load_or_create_key())
        return 0
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"`zyquo-tui serve` needs {', '.join(missing)}, not installed here: "
                        f"run {shlex.quote(sys.executable)} -m pip install 'zyquo-tui[serve]'.")
    from zyquo_tui.core.store.serve_settings import ServeSettings

    ServeSettings.load()  # a wrong [serve] value: one sentence here, before anything starts
    check_can_listen(args.host, args.port)
    key = load_or_create_key()  # a store that cannot hold the key fails here, in one sentence
    from zyquo_tui.core.system.entry_points import TINKER_SERVER, python_command

    argv = python_command(TINKER_SERVER, "--host", args.host, "--port", str(args.port))
    if args.detach:
        return detach(argv, args.host, args.port, key)
    sys.stdout.flush()
    os.execv(argv[0], argv)
    return 0  # not reached


def detach(argv: list[str], host: str, port: int, key: str, wait: float = 180.0) -> int:
    """Start the server in a session of its own and return once it answers."""
    import subprocess
    import time
    import urllib.error
    import urllib.request

    from zyquo_tui.core.store.logs import SERVE_LOG, rotate_if_large
    from zyquo_tui.core.store.paths import zyquo_home
    from zyquo_tui.core.store.user_settings import Settings

    log = zyquo_home() / SERVE_LOG
    settings = Settings.load()
    rotate_if_large(log, settings.log_max_bytes, settings.log_backups)
    with open(log, "ab") as output:
        server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    shown = f"[{host}]" if ":" in host else host
    local = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    health = f"http://{f'[{local}]' if ':' in local else local}:{port}/api/v1/healthz"
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if server.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise UserError(f"the server stopped as it started (exit status "
                            f"{server.returncode}): {tail[0]} (all of it in {log}).")
        try:
            request = urllib.request.Request(health, headers={"X-API-Key": key})
            with urllib.request.urlopen(request, timeout=5):
                break
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    else:
        raise UserError(f"the server (pid {server.pid}) did not answer within {wait:.0f} s; "
                        f"see {log}.")
    print(f"zyquo-tui serve: Tinker API on http://{shown}:{port} (pid {server.pid}, output in "
          f"{log})\n  export TINKER_BASE_URL=http://{shown}:{port}\n"
          f"  export TINKER_API_KEY=$(zyquo-tui serve --show-key)")
    return 0
