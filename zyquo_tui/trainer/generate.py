"""Generate with a run's adapter and with its base model, side by side (`runs try`, the try screen).

    python -m zyquo_tui.trainer.generate --model MODEL --adapters RUN/adapters --step N
        [--prompt TEXT] [--max-tokens 100] [--temperature 0] [--no-base]

The model loads once. With --prompt, that prompt is answered and the process ends; without it,
prompts are read from stdin, one JSON object {"prompt": TEXT} a line, until stdin closes (the
dashboard keeps one process for a screen, so each new prompt costs no load).

The prompt goes through the tokenizer's chat template (as one user turn) when it has one.
Output: one JSON object a line on stdout (mlx-lm's own prints go to stderr):
  {"event": "ready", "step": N, "chat_template": true}
  {"event": "text", "index": I, "side": "adapter"|"base", "text": SEGMENT}   as tokens arrive
  {"event": "answer", "index": I, "side": ..., "text": WHOLE, "tokens": N,
   "finish": "stop"|"length"}
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


def _protocol_stream() -> IO[str]:
    """stdout for our JSON lines only: anything else that prints (mlx-lm, transformers) is
    sent to stderr, so a reader never meets a line that is not ours."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def prompt_tokens(tokenizer, prompt: str) -> list[int]:
    """The prompt as the model was trained to see it: one user turn through the chat
    template, ready for the assistant's answer; the plain text without a template."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                             add_generation_prompt=True)
    return tokenizer.encode(prompt)


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
    out = _protocol_stream()

    def say(event: str, **fields) -> None:
        out.write(json.dumps({"event": event, **fields}) + "\n")

    try:
        from mlx_lm.generate import stream_generate
        from mlx_lm.sample_utils import make_sampler

        from zyquo_tui.trainer.adapted_model import AdaptedModel

        adapted = AdaptedModel(args.model, args.adapters, args.step)
    except Exception as error:  # mlx-lm and transformers raise many kinds
        say("error", message=f"The model or the adapter could not be loaded: {error}")
        return EXIT_PROBLEMS
    tokenizer = adapted.tokenizer
    say("ready", step=args.step, chat_template=bool(getattr(tokenizer, "chat_template", None)))
    sampler = make_sampler(temp=args.temperature)

    def answer(index: int, prompt: str) -> None:
        tokens = prompt_tokens(tokenizer, prompt)
        sides = ["adapter"] if args.no_base else ["adapter", "base"]
        for side in sides:
            adapted.use_adapter() if side == "adapter" else adapted.use_base()
            text, count, finish = [], 0, "length"
            for response in stream_generate(adapted.model, tokenizer, tokens,
                                            max_tokens=args.max_tokens, sampler=sampler):
                if response.text:
                    text.append(response.text)
                    say("text", index=index, side=side, text=response.text)
                count = response.generation_tokens
                finish = response.finish_reason or finish
            say("answer", index=index, side=side, text="".join(text), tokens=count,
                finish=finish)
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
