"""`zyquo-tui serve`: the Tinker-compatible server (docs/tinker-server.md).

The official `tinker` SDK trains and samples this machine's models through it: a program needs
TINKER_BASE_URL and the key this command prints. The server is its own process (it imports
mlx and the SDK; this command imports neither): `python -m zyquo_tui.server`, which this
command becomes.

    zyquo-tui serve                      # http://127.0.0.1:8765, this machine only
    zyquo-tui serve --host 0.0.0.0 --port 9000
    zyquo-tui serve --show-key           # print the key and exit
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys

from zyquo_tui.cli.web_cmd import check_can_listen, port_number
from zyquo_tui.core.errors import UserError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
NEEDED = ("tinker", "starlette", "uvicorn")  # the serve extra


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve the Tinker API: tinker programs train local models",
        description="Serve the Tinker API (the tinker SDK 0.38's wire protocol) so that "
                    "programs written for Tinker train and sample this machine's models: "
                    "set TINKER_BASE_URL to the address and TINKER_API_KEY to the key it "
                    "prints (made on the first start, kept in the store, readable by you "
                    "only). Needs the serve extra: pip install 'zyquo-tui[serve]'.")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help="the address to listen on (default: %(default)s, this machine "
                             "only; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                        help="the TCP port (default: %(default)s)")
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
    check_can_listen(args.host, args.port)
    load_or_create_key()  # a store that cannot hold the key fails here, in one sentence
    from zyquo_tui.core.system.entry_points import TINKER_SERVER, python_command

    sys.stdout.flush()
    argv = python_command(TINKER_SERVER, "--host", args.host, "--port", str(args.port))
    os.execv(argv[0], argv)
    return 0  # not reached
