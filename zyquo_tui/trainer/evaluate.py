"""Evaluate a run's adapter and its base model side by side on rows with answers (`zyquo-tui
eval`, the checkpoints screen's Eval).

    python -m zyquo_tui.trainer.evaluate --model MODEL [--adapters RUN/adapters --step N]
        --data FILE.jsonl [--exact | --reward NAME|FILE.py:FUNC] [--max-tokens 64] [--limit N]

Without --adapters, the model alone is evaluated. The model loads once; the adapter is switched
in and out of it (trainer/adapted_model.py). The figures are trainer/evaluation.py's.
Output: one JSON object a line on stdout (anything else that prints goes to stderr):
  {"event": "progress", "side": "adapter"|"base", "done": I, "total": N}   after each row
  {"event": "result", "metric": "exact"|"reward"|null, "rows": N,
   "base": SIDE, "adapter": SIDE|null, "difference": DIFFERENCE|null}
  {"event": "error", "message": SENTENCE, "bad_input": BOOL}
        then exit 2 when bad_input (a reward that cannot be loaded), else 1
SIDE is {"nll": {"mean", "se", "n"}, "score": {"mean", "se", "n"}|null}; DIFFERENCE the same
of adapter minus base, row by row. docs/CLI.md (`eval --json`) documents the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE, UserError
from zyquo_tui.core.library.eval_rows import DEFAULT_EVAL_MAX_TOKENS, read_eval_rows
from zyquo_tui.core.system.entry_points import EVALUATE, usage
from zyquo_tui.trainer.generate import protocol_stream


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=usage(EVALUATE), description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--adapters", type=Path)
    parser.add_argument("--step", type=int)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--reward")
    parser.add_argument("--reward-timeout", type=float)
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_EVAL_MAX_TOKENS)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args(argv)
    out = protocol_stream()

    def say(event: str, **fields) -> None:
        out.write(json.dumps({"event": event, **fields}) + "\n")

    try:
        rows = read_eval_rows(args.data, args.limit)
    except UserError as error:
        say("error", message=error.message, bad_input=True)
        return EXIT_USAGE
    try:
        from zyquo_tui.trainer.evaluation import (
            Scorer,
            evaluate_rows,
            paired_difference,
            side_summary,
        )
        from zyquo_tui.trainer.rewards import RewardError
    except Exception as error:  # a broken MLX install
        say("error", message=f"MLX could not be loaded: {error}", bad_input=False)
        return EXIT_PROBLEMS
    try:
        scorer = Scorer(exact=args.exact, rewards=[args.reward] if args.reward else None,
                        reward_timeout=args.reward_timeout)
    except RewardError as error:
        say("error", message=f"The reward {error.name} cannot be used: {error}; give a "
                             "built-in reward or FILE.py:FUNCTION.", bad_input=True)
        return EXIT_USAGE
    try:
        if args.adapters is not None:
            from zyquo_tui.trainer.adapted_model import AdaptedModel

            adapted = AdaptedModel(args.model, args.adapters, args.step)
            model, tokenizer = adapted.model, adapted.tokenizer
        else:
            from mlx_lm import load

            adapted = None
            model, tokenizer = load(args.model)
    except Exception as error:  # mlx-lm and transformers raise many kinds
        say("error", message=f"The model or the adapter could not be loaded: {error}",
            bad_input=False)
        return EXIT_PROBLEMS

    def run(side: str):
        def done(index: int) -> None:
            say("progress", side=side, done=index + 1, total=len(rows))
        return evaluate_rows(model, tokenizer, rows, scorer, args.max_tokens, on_row=done)

    try:
        adapter = None
        if adapted is not None:
            adapted.use_adapter()
            adapter = run("adapter")
            adapted.use_base()
        base = run("base")
    except RewardError as error:
        say("error", message=f"The reward {error.name} failed: {error}.", bad_input=False)
        return EXIT_PROBLEMS
    except Exception as error:
        say("error", message=f"The evaluation failed: {error}", bad_input=False)
        return EXIT_PROBLEMS
    metric = scorer.metric
    say("result", metric=metric, rows=len(rows), base=side_summary(base, metric),
        adapter=None if adapter is None else side_summary(adapter, metric),
        difference=None if adapter is None else paired_difference(adapter, base, metric))
    return 0


if __name__ == "__main__":
    sys.exit(main())
