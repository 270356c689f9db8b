"""`zyquo-tui completion bash|zsh|fish`: shell completion of commands, flags and run ids.

argcomplete does the work: the script this prints asks `zyquo-tui` itself what completes the
line (with `_ARGCOMPLETE` set, `main` hands the whole parser to argcomplete before anything
runs), so completions follow the commands and flags as they are. A run id completes from the
store's listing, with the run's name beside it where the shell shows descriptions (zsh, fish).

    eval "$(zyquo-tui completion bash)"        # ~/.bashrc
    eval "$(zyquo-tui completion zsh)"         # ~/.zshrc (after compinit)
    zyquo-tui completion fish | source         # ~/.config/fish/config.fish
"""

from __future__ import annotations

import argparse
from typing import Any

SHELLS = ("bash", "zsh", "fish")
# The positional arguments that name runs, whatever command they belong to.
RUN_ID_ARGUMENTS = frozenset({"id", "ids", "run_id", "run_ids"})


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "completion", help="print the shell completion script (bash, zsh or fish)",
        description="Print the script that makes your shell complete zyquo-tui's commands, "
                    "flags and run ids. bash: eval \"$(zyquo-tui completion bash)\" in "
                    "~/.bashrc; zsh: the same with zsh in ~/.zshrc; fish: zyquo-tui "
                    "completion fish | source in config.fish.")
    parser.add_argument("shell", choices=SHELLS)
    parser.set_defaults(handler=cmd_completion)


def cmd_completion(args) -> int:
    import argcomplete

    print(argcomplete.shellcode(["zyquo-tui"], shell=args.shell))
    return 0


def run_ids(**_kwargs: Any) -> dict[str, str]:
    """Every run in the store, by id, with its name (the listing cache: fast for many runs);
    nothing when the store cannot be read (a completion never fails loudly)."""
    try:
        from zyquo_tui.core.store.index import listing_rows
        from zyquo_tui.core.store.store import RunStore

        return {row["id"]: row.get("name") or row.get("state") or ""
                for row in listing_rows(RunStore())}
    except Exception:
        return {}


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (the process exits inside argcomplete)."""
    import argcomplete

    _attach_run_ids(parser)
    argcomplete.autocomplete(parser, always_complete_options=False)  # "-" asks for flags


def _attach_run_ids(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _attach_run_ids(sub)
        elif not action.option_strings and action.dest in RUN_ID_ARGUMENTS:
            action.completer = run_ids  # type: ignore[attr-defined]
