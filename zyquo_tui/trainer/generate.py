"""Generate with a run's adapter and with its base model, side by side (`runs try`, the try screen).

    python -m zyquo_tui.trainer.generate --model MODEL --adapters RUN/adapters --step N
        [--prompt TEXT] [--max-tokens 100] [--temperature 0] [--no-base]

The model loads once. With --prompt, that prompt is answered and the process ends; without it,
prompts are read from stdin, one JSON object {"prompt": TEXT} a line, until stdin closes (the
dashboard keeps one process for a screen, so each new prompt costs no load).

The prompt goes through the tokenizer's chat template (as one user turn) when it has one
(trainer/encoding.py prompt_tokens); the answers are generated as the client's and a run's
samples are (trainer/sampling.py complete).
Output: one JSON object a line on stdout (mlx-lm's own prints go to stderr):
  {"event": "ready", "step": N, "chat_template": true}
  {"event": "text", "index": I, "side": "adapter"|"base", "text": SEGMENT}   as tokens arrive
  {"event": "answer", "index": I, "side": ..., "text": WHOLE, "tokens": N,
   "finish": "stop"|"length"}                   N: the answer's tokens (the end one not counted)
  {"event": "done", "index": I}
  {"event": "error", "message": SENTENCE}                                     then exit 1
I counts the prompts from 0. The adapter answers first, then the base. Temperature 0 is
greedy decoding: the same prompt gives the same answers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import IO

from zyquo_tui.core.errors import EXIT_PROBLEMS
from zyquo_tui.core.system.entry_points import TRY_GENERATE, usage


def protocol_stream() -> IO[str]:
    """stdout for our JSON lines only: anything else that prints (mlx-lm, transformers) is
    sent to stderr, so a reader never meets a line that is not ours."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=usage(TRY_GENERATE),
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--adapters", type=Path, required=True)
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--prompt")
    parser.add_argument("--max-tokens", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--no-base", action="store_true")
    args = parser.parse_args(argv)
    out = protocol_stream()

    def say(event: str, **fields) -> None:
        out.write(json.dumps({"event": event, **fields}) + "\n")

    try:
        from zyquo_tui.trainer.adapted_model import AdaptedModel
        from zyquo_tui.trainer.encoding import has_chat_template, prompt_tokens
        from zyquo_tui.trainer.sampling import complete

        adapted = AdaptedModel(args.model, args.adapters, args.step)
    except Exception as error:  # mlx-lm and transformers raise many kinds
        say("error", message=f"The model or the adapter could not be loaded: {error}")
        return EXIT_PROBLEMS
    tokenizer = adapted.tokenizer
    say("ready", step=args.step, chat_template=has_chat_template(tokenizer))

    def answer(index: int, prompt: str) -> None:
        tokens = prompt_tokens(tokenizer, prompt)
        sides = ["adapter"] if args.no_base else ["adapter", "base"]
        for side in sides:
            adapted.use_adapter() if side == "adapter" else adapted.use_base()
            done = complete(adapted.model, tokenizer, tokens, args.max_tokens, args.temperature,
                            on_text=lambda text, side=side: say("text", index=index, side=side,
                                                                text=text))
            say("answer", index=index, side=side, text=done.text, tokens=len(done.tokens),
                finish=done.finish_reason)
        say("done", index=index)

    prompts = [args.prompt] if args.prompt is not None else _stdin_prompts()
    try:
        for index, prompt in enumerate(prompts):
            answer(index, prompt)
    except Exception as error:
        say("error", message=f"Generation failed: {error}")
        return EXIT_PROBLEMS
    return 0


def _stdin_prompts():
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)["prompt"]


if __name__ == "__main__":
    sys.exit(main())
