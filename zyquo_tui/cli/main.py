"""The `zyquo-tui` command: the dashboard with no arguments, headless commands otherwise.

Each command group lives in its own module of this package and exposes `register(subparsers)`,
which adds its parser and sets `handler` (a function of the parsed args returning an exit status).
"""

from __future__ import annotations

import argparse
import os
import sys

from zyquo_tui import __version__
from zyquo_tui.core.errors import EXIT_USAGE, UserError


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one sentence, exit status 2 (as documented)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"zyquo-tui: {message}; see `{self.prog} --help`.\n")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """As argparse's, but an unknown flag names the help of the command it was given to
        (`zyquo-tui runs new --help`), not the top level's."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            words = [getattr(parsed, "command", None)]
            words += [value for name, value in vars(parsed).items()
                      if name.endswith(("_command", "_action")) and isinstance(value, str)]
            where = " ".join([self.prog, *filter(None, words)])
            self.exit(EXIT_USAGE, f"zyquo-tui: unrecognized arguments: {' '.join(extras)}; "
                                  f"see `{where} --help`.\n")
        return parsed


# Command name -> module. Only the module of the command given is imported (each brings its part
# of core), so `runs list` does not pay for the memory model or the dataset validator.
COMMAND_MODULES = {"runs": "runs", "plan": "plan_cmd", "models": "models_cmd",
                   "data": "data_cmd", "sample": "sample", "doctor": "doctor",
                   "service": "service_cmd",
                   "hosts": "hosts_cmd", "completion": "completion", "web": "web_cmd",
                   "serve": "serve_cmd", "eval": "eval_cmd"}


def build_parser(command: str | None = None, action: str | None = None
                 ) -> argparse.ArgumentParser:
    """The parser of every command, or only of `command` when one is given; `action` (its
    sub-command, for `runs`) may narrow it further (runs.register says when)."""
    import importlib

    parser = _Parser(
        prog="zyquo-tui",
        description="A keyboard-driven terminal dashboard for MLX fine-tuning. "
        "With no command, opens the dashboard.",
    )
    parser.add_argument("--version", action="version", version=f"zyquo-tui {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    names = [command] if command in COMMAND_MODULES else list(COMMAND_MODULES)
    for name in names:
        module_name = COMMAND_MODULES[name]
        if name == "runs" and action == "list":
            module_name = "runs_list"  # alone: `runs list` starts fast (runs_list.py says why)
        module = importlib.import_module(f"{__package__}.{module_name}")
        if name == "runs":
            module.register(subparsers, action=action)
        else:
            module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "_ARGCOMPLETE" in os.environ:  # the shell asks what completes its line
        from zyquo_tui.cli.completion import complete

        complete(build_parser())
    parser = build_parser(argv[0] if argv else None, argv[1] if len(argv) > 1 else None)
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from zyquo_tui.dashboard.app import run_dashboard

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
