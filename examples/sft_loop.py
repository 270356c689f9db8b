"""A custom SFT loop with the step-level client: train, save, come back, go on.

    python examples/sft_loop.py --model zyquo-tiny --steps 20 --out /tmp/sft-state

Trains on the sample completions in batches of 4, saves the full state half way, then loads it
into a new client (as tomorrow's session would) and trains the second half there. The losses
printed after the load go on from where they were.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from zyquo_tui.client import TrainingBatch, TrainingClient
from zyquo_tui.resources import sample_data_dir


def batches(rows: list[dict], size: int):
    """Endless batches of prompt/completion rows, in file order."""
    while True:
        for start in range(0, len(rows) - size + 1, size):
            chunk = rows[start:start + size]
            yield TrainingBatch([r["prompt"] for r in chunk], [r["completion"] for r in chunk])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="zyquo-tiny")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("sft-state"))
    args = parser.parse_args()

    train = sample_data_dir() / "completions" / "train.jsonl"
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    settings = {"learning_rate": 1e-3, "num_layers": -1}
    stream = batches(rows, 4)
    half = args.steps // 2

    with TrainingClient.from_model(args.model, method="lora", **settings) as client:
        for _ in range(half):
            result = client.forward_backward(next(stream))
            step = client.optim_step().result()  # submitted before waiting: one step
            loss = result.result().loss
            print(f"step {step.step}: loss {loss:.4f}, grad norm {step.grad_norm:.3f}")
        saved = client.save_state(args.out, {"rows_seen": half * 4}).result()
        print(f"saved step {saved.step} to {saved.path}")

    with TrainingClient.from_model(args.model, method="lora", **settings) as client:
        loaded = client.load_state(args.out).result()
        print(f"loaded step {loaded.step} ({loaded.metadata['rows_seen']} rows seen)")
        for _ in range(args.steps - half):
            result = client.forward_backward(next(stream))
            step = client.optim_step().result()  # submitted before waiting: one step
            loss = result.result().loss
            print(f"step {step.step}: loss {loss:.4f}, grad norm {step.grad_norm:.3f}")


if __name__ == "__main__":
    main()
