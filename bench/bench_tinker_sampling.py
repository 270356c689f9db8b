"""The Tinker server's `sample` with num_samples answers: decoded together against one at a time.

The server's own sampling (server/trained_model.py `TrainedModel.sample`, what `asample`
runs on the MLX thread), in this process, on a generated llama model (the sample tokenizer,
random weights; --hidden and --layers size it), LoRA rank 8. "together" is the server as it
is: the answers decoded as one batch (trainer/sampling.py complete_batch, the prompt read
once); "one at a time" is the same code with SAMPLE_ROWS = 1: one answer after another, each
reading the prompt again. Temperature 1, `stop=[]`: every answer is exactly --tokens
long in both, the same work. Rounds alternate; the first call of each is left out
(compilation); medians over the rest.

    python bench/bench_tinker_sampling.py [--samples 4,16] [--tokens 32] [--calls 2]
                                          [--rounds 2] [--hidden 256] [--layers 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def timed_calls(trained, prompt: list[int], samples: int, tokens: int, calls: int,
                rows: int) -> list[float]:
    from zyquo_tui.server import trained_model

    trained_model.SAMPLE_ROWS = rows
    params = {"max_tokens": tokens, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
              "stop": [], "seed": 0}
    seconds = []
    for _ in range(calls + 1):
        tic = time.perf_counter()
        sequences, _ = trained.sample(None, prompt, samples, params, False)
        seconds.append(time.perf_counter() - tic)
        assert len(sequences) == samples and all(len(s.tokens) == tokens for s in sequences)
    return seconds[1:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="4,16")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args(argv)

    from zyquo_tui.server.trained_model import ModelSpec, TrainedModel
    from zyquo_tui.trainer.sample_model import build_model

    with tempfile.TemporaryDirectory() as temp:
        folder = build_model(Path(temp) / "model", hidden_size=args.hidden,
                             num_layers=args.layers, num_heads=4, num_kv_heads=2,
                             intermediate_size=args.hidden * 2)
        trained = TrainedModel.load(ModelSpec(base_model="bench", folder=str(folder), rank=8,
                                              seed=0))
        prompt = trained.tokenizer.encode("Count from one to ten: one, two, three")
        print(f"{args.rounds} rounds of {args.calls} sample calls, {args.tokens} tokens an "
              f"answer, a {args.layers}-layer model of width {args.hidden}, LoRA rank 8 "
              "(medians, seconds a call):")
        print(f"{'num_samples':>11}  {'one at a time':>13}  {'together':>9}  {'speed-up':>8}")
        for samples in (int(n) for n in args.samples.split(",")):
            apart, together = [], []
            for _ in range(args.rounds):
                apart += timed_calls(trained, prompt, samples, args.tokens, args.calls, 1)
                together += timed_calls(trained, prompt, samples, args.tokens, args.calls,
                                        samples)
            one, many = statistics.median(apart), statistics.median(together)
            print(f"{samples:>11}  {one:>13.3f}  {many:>9.3f}  {one / many:>7.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
