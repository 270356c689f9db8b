"""`zyquo-tui eval`: a run's adapter and its base model side by side on rows with answers (or
one model alone): mean NLL of the answers, and exact match or a reward of greedy answers."""

from __future__ import annotations

import sys
from pathlib import Path

from zyquo_tui.cli.output import print_json, print_table
from zyquo_tui.core.processes.evaluation import (
    DEFAULT_EVAL_MAX_TOKENS,
    REWARD_TIMEOUT_SECONDS,
    eval_request,
    result_headers,
    result_rows,
    run_evaluation,
)
from zyquo_tui.core.runs.settings import BUILTIN_REWARDS
from zyquo_tui.core.store.store import RunStore


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="evaluate a run's checkpoint against its base model (or a model alone)")
    p.add_argument("id", nargs="?", help="the run whose adapter is evaluated")
    p.add_argument("--checkpoint", type=int, metavar="STEP",
                   help="the checkpoint's step (default: the best, else the latest)")
    p.add_argument("--model", metavar="MODEL",
                   help="evaluate this model alone (a folder, or a name `zyquo-tui models` "
                        "lists), instead of a run")
    p.add_argument("--data", type=Path, metavar="FILE.jsonl",
                   help="rows with answers: completions, chat or {prompt, answer} (default: "
                        "the run's test.jsonl)")
    scored = p.add_mutually_exclusive_group()
    scored.add_argument("--exact", action="store_true",
                        help="score greedy answers by exact match with the reference "
                             "(whitespace, trailing punctuation and case aside)")
    scored.add_argument("--reward", metavar="NAME|FILE.py:FUNC",
                        help=f"score greedy answers with a reward ({', '.join(BUILTIN_REWARDS)}"
                             ", or a file's function with mlx-lm-lora's signature)")
    p.add_argument("--reward-timeout", type=float, default=REWARD_TIMEOUT_SECONDS,
                   metavar="SECONDS",
                   help=f"a reward still running after this long on one answer stops the "
                        f"evaluation (default {REWARD_TIMEOUT_SECONDS:g})")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_EVAL_MAX_TOKENS,
                   help=f"the longest greedy answer, in tokens (default "
                        f"{DEFAULT_EVAL_MAX_TOKENS})")
    p.add_argument("--limit", type=int, metavar="N", help="evaluate the first N rows only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_eval)


def cmd_eval(args) -> int:
    request = eval_request(RunStore(), args.id, step=args.checkpoint, model=args.model,
                           data=args.data, exact=args.exact, reward=args.reward,
                           max_tokens=args.max_tokens, limit=args.limit,
                           reward_timeout=args.reward_timeout)
    if not args.json and sys.stderr.isatty():  # for a person waiting; a script reads stdout
        what = (f"step {request.step} of run {request.run_id}" if request.run_id
                else request.model)
        print(f"evaluating {what} on {request.rows} rows of {request.data}…", file=sys.stderr,
              flush=True)
    result = run_evaluation(request)
    if args.json:
        print_json(result)
        return 0
    print_table(result_headers(result), result_rows(result))
    return 0
