"""GRPO runs' real peak against `plan`'s estimate, for the memory table (docs/memory.md).

A generated llama model of a calibrated family (bench/calibrate_memory.py's w128-l4-f32 shape
by default) trains GRPO on sample_data/rl with the real trainer for a few steps; its peak is
the largest `peak_memory_bytes` of its train events (MLX's process peak: sampling, the
reference, the step). `zyquo-tui plan` estimates the same run, in a store of its own (no
history to correct it): by the terms, or for a config of 64 MiB or less by measuring it whole
(core/memory/replica.py); `--no-replica` makes it the terms' alone. Target: within 15%.
`--hidden 64 --layers 2` is the sample model's shape (zyquo-tiny).

    python bench/measure_grpo_memory.py [--hidden 128] [--layers 4] [--iters 3] [--no-replica]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RL = REPO / "sample_data" / "rl"
# (name, method, batch, group, answer tokens, kl_beta)
CONFIGS = [
    ("lora-b1-g2-n16", "lora", 1, 2, 16, 0.1),
    ("lora-b4-g4-n64", "lora", 4, 4, 64, 0.1),
    ("lora-b2-g8-n128", "lora", 2, 8, 128, 0.1),
    ("full-b4-g4-n64", "full", 4, 4, 64, 0.1),
]


def flags(method: str, batch: int, group: int, tokens: int, beta: float, iters: int
          ) -> list[str]:
    return ["--method", method, "--objective", "grpo", "--batch-size", str(batch),
            "--group-size", str(group), "--max-completion-tokens", str(tokens),
            "--kl-beta", str(beta), "--iters", str(iters), "--steps-per-report", "1",
            "--steps-per-eval", "1000", "--save-every", "1000", "--num-layers", "-1",
            "--val-batches", "1"]


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zyquo_tui", *args], capture_output=True,
                          text=True, env={**os.environ, "ZYQUO_HOME": str(home)}, cwd=REPO)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--no-replica", action="store_true",
                        help="plan by the terms alone (no config measured whole)")
    args = parser.parse_args(argv)
    from zyquo_tui.core.events.protocol import read_events
    from zyquo_tui.trainer.sample_model import build_model

    print(f"GRPO peaks: llama {args.hidden}w {args.layers}L 4:2 heads, MLP {args.hidden * 2}, "
          f"vocab 512, float32; sample_data/rl; {args.iters} steps")
    print(f"{'config':<18} {'measured MiB':>13} {'plan MiB':>9} {'by':>6} {'error':>7} "
          f"{'answer tokens (mean of the widest step / most)':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        build_model(model, hidden_size=args.hidden, num_layers=args.layers, num_heads=4,
                    num_kv_heads=2, intermediate_size=args.hidden * 2)
        for name, *config in CONFIGS:
            home = Path(tmp) / name
            home.mkdir()
            common = flags(*config, args.iters)
            planned = cli(home, "plan", "--model", str(model), "--data", str(RL), *common,
                          "--json", *(["--no-replica"] if args.no_replica else []))
            if planned.returncode not in (0, 1):
                print(f"{name}: plan failed: {planned.stderr.strip()}")
                continue
            plan = json.loads(planned.stdout)
            estimate = plan["estimate_bytes"]
            how = "whole" if plan["replica"] else "terms"
            made = cli(home, "runs", "new", "--model", str(model), "--data", str(RL), *common)
            run_id = made.stdout.strip()
            started = cli(home, "runs", "start", run_id, "--wait")
            if started.returncode != 0:
                print(f"{name}: the run failed: {started.stderr.strip()}")
                continue
            events = read_events(home / "runs" / run_id / "events.jsonl")
            trains = [e for e in events if e["type"] == "train"]
            peak = max(e["peak_memory_bytes"] for e in trains)
            # plan assumes every answer is max_completion_tokens long (+ its stop token); a
            # step whose answers stop earlier is narrower than that.
            longest = max(e["completion_length"] for e in trains)
            print(f"{name:<18} {peak / 2**20:>13.2f} {estimate / 2**20:>9.2f} {how:>6} "
                  f"{(estimate - peak) / peak:>+7.1%} {longest:>10.1f}/{config[3] + 1}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
