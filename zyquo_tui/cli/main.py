"""The `zyquo-tui` command: the dashboard with no arguments, headless commands otherwise.

Each command group lives in its own module of this package and exposes `register(subparsers)`,
which adds its parser and sets `handler` (a function of the parsed args returning an exit status).
"""

from __future__ import annotations

import argparse
import sys

from .. import __version__
from ..core.errors import EXIT_USAGE, UserError


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one sentence, exit status 2 (as documented)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"zyquo-tui: {message}; see `{self.prog} --help`.\n")


def build_parser() -> argparse.ArgumentParser:
    from . import doctor, runs, sample

    parser = _Parser(
        prog="zyquo-tui",
        description="A keyboard-driven terminal dashboard for MLX fine-tuning. "
        "With no command, opens the dashboard.",
    )
    parser.add_argument("--version", action="version", version=f"zyquo-tui {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (doctor, runs, sample):
        module.register(subparsers)
    _register_optional(subparsers)
    return parser


def _register_optional(subparsers) -> None:
    # Command groups that other modules add; each is optional so the CLI keeps working
    # while one is being built.
    import importlib

    for name in ("models_cmd", "data_cmd", "plan_cmd"):
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as error:
            if error.name == f"{__package__}.{name}":
                continue
            raise
        module.register(subparsers)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from ..app import run_dashboard

            return run_dashboard()
        handler = getattr(args, "handler", None)
        if handler is None:  # a group given without its sub-command
            parser.parse_args([args.command, "--help"])
            return EXIT_USAGE
        return handler(args)
    except UserError as error:
        print(f"zyquo-tui: {error.message}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
