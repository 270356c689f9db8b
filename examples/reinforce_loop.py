"""REINFORCE on a toy reward: sample answers, score them, train on the scores.

    python examples/reinforce_loop.py --model zyquo-tiny --iterations 5

A short SFT warm-up on the sample completions comes first, so that the answers are sentences
about numbers. Each iteration then samples 4 answers to each of 2 arithmetic prompts with the current weights, gives
an answer reward 1 when it holds the right number (else 0), and takes one step of GRPO-style
policy gradient: the rewards, normalized within each prompt's group, weigh each answer's
log-likelihood. A prompt whose answers all scored the same teaches nothing (its advantages are
0); when that holds for every prompt the iteration takes no step at all, because with Adam (the
default optimizer) a step on zero gradients still moves the weights by momentum.
"""

from __future__ import annotations

import argparse
import json
import re

from zyquo_tui.client import TrainingBatch, TrainingClient
from zyquo_tui.resources import sample_data_dir

PROMPTS = {"What is 2 plus 3?": 5, "What is 4 plus 4?": 8}


def reward(prompt: str, answer: str) -> float:
    numbers = [int(n) for n in re.findall(r"\d+", answer)]
    return 1.0 if PROMPTS[prompt] in numbers[-1:] else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="zyquo-tiny")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--warmup-steps", type=int, default=60)
    args = parser.parse_args()

    with TrainingClient.from_model(args.model, method="lora", learning_rate=3e-3,
                                   num_layers=-1) as client:
        train = sample_data_dir() / "completions" / "train.jsonl"
        rows = [json.loads(line) for line in train.read_text().splitlines()]
        for step in range(args.warmup_steps):
            chunk = rows[(step * 8) % (len(rows) - 8):][:8]
            client.forward_backward(TrainingBatch([r["prompt"] for r in chunk],
                                                  [r["completion"] for r in chunk])).result()
            client.optim_step().result()
        for iteration in range(1, args.iterations + 1):
            prompts = [p for p in PROMPTS for _ in range(args.samples)]
            answers = client.sample(prompts, max_tokens=16, temperature=0.7,
                                    seed=iteration).result().texts
            rewards = [reward(p, a) for p, a in zip(prompts, answers, strict=True)]
            mean = sum(rewards) / len(rewards)
            if all(len({r for q, r in zip(prompts, rewards, strict=True) if q == p}) == 1
                   for p in PROMPTS):
                print(f"iteration {iteration}: mean reward {mean:.2f}, no step (each prompt's "
                      f"answers scored alike), e.g. {answers[0]!r}")
                continue
            batch = TrainingBatch(prompts, answers, advantages=rewards, loss_type="grpo")
            result = client.forward_backward(batch)
            client.optim_step().result()  # submitted before waiting: one compiled step
            result = result.result()
            print(f"iteration {iteration}: mean reward {mean:.2f}, loss {result.loss:.4f}, "
                  f"e.g. {answers[0]!r}")


if __name__ == "__main__":
    main()
