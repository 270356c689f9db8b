"""`zyquo-tui web`: the dashboard in a browser, served by textual-serve (the `web` extra).

Each browser tab gets a dashboard process of its own, started with this very interpreter
(`python -m zyquo_tui`). textual-serve runs its command through /bin/sh, where a bare
`zyquo-tui` is found only while the virtual environment's bin is on PATH; from a venv that was
not activated the page would wait on its splash for good, with no error shown.

    zyquo-tui web                       # http://127.0.0.1:8000, this machine only
    zyquo-tui web --host 0.0.0.0 --port 8080
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import shlex
import socket
import sys

from zyquo_tui.core.errors import UserError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# Hosts that mean "every interface": a browser cannot be sent there, so the page names this
# machine instead.
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "web", help="serve the dashboard to a web browser",
        description="Serve the dashboard to a web browser (needs the web extra: "
                    "pip install 'zyquo-tui[web]'). Each browser tab runs a dashboard of its "
                    "own; training goes on when a tab closes. There is no login: anyone who "
                    "reaches the address can start, cancel and delete runs, so it listens on "
                    "this machine only unless --host says otherwise.")
    add_address_arguments(parser, DEFAULT_PORT)
    parser.set_defaults(handler=cmd_web)


def add_address_arguments(parser, default_port: int) -> None:
    """--host (this machine only unless it says otherwise) and --port, for a server."""
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help="the address to listen on (default: %(default)s, this machine "
                             "only; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=port_number, default=default_port,
                        help="the TCP port (default: %(default)s)")


def port_number(text: str) -> int:
    import argparse

    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1 to 65535)")
    return port


def dashboard_command() -> str:
    """The shell command textual-serve runs for each tab: this interpreter, by its full path."""
    return f"{shlex.quote(sys.executable)} -m zyquo_tui"


def page_url(host: str, port: int) -> str:
    """The address a browser opens, which the page also uses for its websocket."""
    shown = socket.gethostname() if host in WILDCARD_HOSTS else host
    try:
        if ipaddress.ip_address(shown).version == 6:
            shown = f"[{shown}]"
    except ValueError:
        pass  # a host name
    return f"http://{shown}:{port}"


def cmd_web(args) -> int:
    try:
        from textual_serve.server import Server
    except ImportError:
        raise UserError("`zyquo-tui web` needs textual-serve, which is not installed here: "
                        f"run {shlex.quote(sys.executable)} -m pip install 'zyquo-tui[web]'.") from None
    check_can_listen(args.host, args.port)
    url = page_url(args.host, args.port)

    class DashboardServer(Server):
        def initialize_logging(self) -> None:
            super().initialize_logging()
            # A line per HTTP request buries the address; textual-serve's own notes (a tab's
            # dashboard that failed to start, with its stderr) stay.
            logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

        async def on_startup(self, app) -> None:
            # One line with the address instead of textual-serve's banner.
            print(f"The dashboard is at {url} (a dashboard per tab; ctrl+c stops serving, "
                  "training goes on).", flush=True)

    server = DashboardServer(dashboard_command(), host=args.host, port=args.port,
                             title="zyquo-tui", public_url=url)
    try:
        server.serve()
    except OSError as error:  # the port was taken between the check and the server's bind
        raise UserError(cannot_listen(args.host, args.port, error)) from None
    return 0


def check_can_listen(host: str, port: int) -> None:
    """Bind the address once before serving, so a taken port or a foreign address is one
    sentence before anything is printed, not a traceback from inside the server."""
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
    except OSError as error:  # a name that does not resolve
        raise UserError(cannot_listen(host, port, error)) from None
    bound, refused = 0, []
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            # As the server binds: a port left in TIME_WAIT by the last run is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
                bound += 1
            except OSError as error:
                refused.append(error)
    # A family the machine lacks (::1 without IPv6) is skipped by the server too.
    taken = [error for error in refused if error.errno != errno.EADDRNOTAVAIL]
    if taken or not bound:
        raise UserError(cannot_listen(host, port, (taken or refused)[0]))


def cannot_listen(host: str, port: int, error: OSError) -> str:
    reason = error.strerror or str(error)
    if error.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is already in use ({reason}); "
                "choose another with --port.")
    if error.errno == errno.EACCES:
        return (f"port {port} on {host} needs privileges ({reason}); "
                "choose one above 1023 with --port.")
    return (f"cannot listen on {host} port {port} ({reason}); give --host an address of this "
            f"machine ({DEFAULT_HOST} for this machine only, 0.0.0.0 for every interface).")
