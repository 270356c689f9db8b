"""`zyquo-tui runs try`: answer a prompt with a run's adapter and with its base model."""

from __future__ import annotations

from zyquo_tui.cli.output import print_json
from zyquo_tui.core.processes.try_session import (
    DEFAULT_MAX_TOKENS,
    shown_answer,
    try_once,
    try_request,
)
from zyquo_tui.core.store.store import RunStore


def register(runs_subparsers) -> None:
    p = runs_subparsers.add_parser(
        "try", help="answer a prompt with the run's adapter and with the base model")
    p.add_argument("id")
    p.add_argument("--step", type=int, help="the checkpoint step (default: the latest)")
    p.add_argument("--prompt", required=True, help="the user's message (through the chat "
                                                   "template when the model has one)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                   help=f"the longest answer, in tokens (default {DEFAULT_MAX_TOKENS})")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 (default) always picks the most likely token; more varies answers")
    p.add_argument("--no-base", action="store_true", help="the adapter's answer only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_try)


def cmd_try(args) -> int:
    request = try_request(RunStore(), args.id, args.step, max_tokens=args.max_tokens,
                          temperature=args.temperature, base=not args.no_base)
    answers = try_once(request, args.prompt)
    if args.json:
        print_json(answers)
        return 0
    print(f"── adapter (step {request.step}) ──")
    print(shown_answer(answers["adapter"]))
    if request.base:
        print("── base ──")
        print(shown_answer(answers["base"]))
    return 0
