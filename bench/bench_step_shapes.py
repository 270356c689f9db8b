"""What a training step costs a position, by the step's shape (rows x width).

Packing places a step's rows into fewer positions (docs/CLI.md, Packing). Whether packing more
rows into a step than mlx-lm's batch holds would buy more depends on what a step costs beyond
its positions (the optimizer's update, the dispatch of the compiled step): if that were a large
share, steps of more rows would cost less a position. This bench trains mlx-lm's own compiled
LoRA step (its default loss, Adam) on random tokens at each shape, in-process, the shapes
interleaved across `--repeat` passes, and prints each shape's median time a step and a position
and the latter's ratio to the first shape's.

    python bench/bench_step_shapes.py [--hidden 128] [--layers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from bench_trainer import build_model  # noqa: E402

# mlx-lm's batches of the sample chat rows are 4 rows of 64 or 96 positions; then more rows of
# the same width, and wider sequences (packing's) of the same positions.
SHAPES = ((4, 64), (8, 64), (16, 64), (4, 96), (2, 128), (6, 128), (8, 128), (4, 256))


def step_seconds(model_dir: Path, repeat: int, steps: int) -> dict[tuple[int, int], list[float]]:
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    from mlx_lm.tuner.trainer import default_loss
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import load

    model, _ = load(str(model_dir))
    model.freeze()
    linear_to_lora_layers(model, len(model.layers), {"rank": 8, "scale": 20.0, "dropout": 0.0})
    optimizer = optim.Adam(learning_rate=1e-5)
    state = [model.state, optimizer.state, mx.random.state]
    loss_and_grad = nn.value_and_grad(model, default_loss)

    @partial(mx.compile, inputs=state, outputs=state)
    def step(batch, lengths):
        (loss, tokens), grads = loss_and_grad(model, batch, lengths)
        optimizer.update(model, grads)
        return loss, tokens

    vocab = model.args.vocab_size
    seconds: dict[tuple[int, int], list[float]] = {}
    for _ in range(repeat):
        for rows, width in SHAPES:
            batch = mx.random.randint(0, vocab, (rows, width + 1))
            lengths = mx.array([[0, width]] * rows)
            for _ in range(2):  # compiled for this shape, warmed
                mx.eval(step(batch, lengths), state)
            start = time.perf_counter()
            for _ in range(steps):
                mx.eval(step(batch, lengths), state)
            seconds.setdefault((rows, width), []).append((time.perf_counter() - start) / steps)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "model", args.hidden, args.layers)
        seconds = step_seconds(model_dir, args.repeat, args.steps)
    print(f"generated llama, width {args.hidden}, {args.layers} layers, LoRA on every layer; "
          f"medians of {args.repeat} passes of {args.steps} steps")
    print("| rows x width | positions | ms a step | us a position | a position vs 4 x 64 |")
    print("|---|---:|---:|---:|---:|")
    first = None
    for (rows, width), values in seconds.items():
        median = statistics.median(values)
        per_position = median / (rows * width)
        first = first or per_position
        print(f"| {rows} x {width} | {rows * width} | {median * 1e3:.1f} | "
              f"{per_position * 1e6:.1f} | {per_position / first:.2f} |")


if __name__ == "__main__":
    main()
