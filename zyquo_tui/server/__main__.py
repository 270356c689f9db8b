"""The server process: `python -m zyquo_tui.server --host H --port P` (`zyquo-tui serve`
starts it). Prints where it listens and how to get its key (never the key itself: this output
goes to serve.log and service logs), then serves until stopped."""

from __future__ import annotations

import argparse
import logging
import sys

from zyquo_tui.core.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zyquo_tui.server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    try:
        return serve(args.host, args.port)
    except UserError as error:
        print(f"zyquo-tui serve: {error.message}", file=sys.stderr)
        return error.exit_status


def serve(host: str, port: int) -> int:
    import uvicorn

    from zyquo_tui.core.store.logs import SERVE_LOG, rotate_own_output_if_large
    from zyquo_tui.core.store.paths import zyquo_home
    from zyquo_tui.core.store.serve_settings import ServeSettings
    from zyquo_tui.core.store.server_key import load_or_create_key
    from zyquo_tui.core.store.user_settings import Settings
    from zyquo_tui.server.app import make_app
    from zyquo_tui.server.models import capabilities, resolve
    from zyquo_tui.server.service import Service

    home = zyquo_home()
    settings = Settings.load(home)
    # Kept up by a service manager, the server starts again and again into the same log.
    rotate_own_output_if_large(home / SERVE_LOG, settings.log_max_bytes, settings.log_backups)
    limits = ServeSettings.load(home)  # a wrong [serve] value stops it here, in one sentence
    key = load_or_create_key(home)
    app = make_app(Service(home, limits=limits), key, resolve, capabilities, limits)
    shown = f"[{host}]" if ":" in host else host
    print(f"zyquo-tui serve: Tinker API on http://{shown}:{port}\n"
          f"  export TINKER_BASE_URL=http://{shown}:{port}\n"
          f"  export TINKER_API_KEY=$(zyquo-tui serve --show-key)", flush=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    # Two threads share the interpreter: the event loop that answers requests and the MLX
    # thread that builds each step's graph. A request that arrives while the other holds the
    # interpreter waits for it to let go, up to the switch interval (5 ms by default, a
    # tenth of a step of the sample model): 0.5 ms keeps that wait short.
    sys.setswitchinterval(0.0005)
    # On SIGTERM or ctrl+c uvicorn stops taking requests, gives open ones (a retrieve_future
    # holds its poll up to 20 s) 5 s, then runs the app's shutdown, which marks the served
    # runs interrupted and lets the machine go; it then raises the signal again, so the
    # process ends by it (status 143 for SIGTERM, as a shell reports it): docs/tinker-server.md.
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
