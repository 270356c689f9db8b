"""`zyquo-tui plan`'s duration against the run's own, on the sample model.

Each row plans a run (`plan --json`: `duration_seconds` and the finished run it rests on), then
runs it (`runs start --wait`, timed from the request to the end) in the same store, so later
rows have more runs to rest on. Store A starts from one SFT run and plans SFT on other data,
distillation, grpo (other objectives: their speed is SFT's scaled by what their step adds), and
SFT again once the distillation and grpo runs are the latest of the model (the basis must stay
the SFT run). Store B holds only a distillation run, and plans SFT from it (its teacher's share
taken out).

    python bench/bench_duration.py [--home DIR]

`--home` keeps the stores (default: a temporary folder, removed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "sample_data"
COMMON = ("--model", "zyquo-tiny", "--num-layers", "-1", "--learning-rate", "1e-3",
          "--steps-per-eval", "1000", "--save-every", "1000")
SFT = ("--data", str(DATA / "completions"), "--iters", "300")
DISTILL = ("--data", str(DATA / "completions"), "--objective", "distill", "--teacher",
           "zyquo-tiny-teacher", "--iters", "60")
GRPO = ("--data", str(DATA / "rl"), "--objective", "grpo", "--reward", "exact_answer",
        "--iters", "4")
# (store, label, flags, planned first): the first run of each store has nothing to rest on.
ROWS = (
    ("A", "sft (the first run)", SFT, False),
    ("A", "sft, chat rows", ("--data", str(DATA / "chat"), "--iters", "300"), True),
    ("A", "distill, from sft", DISTILL, True),
    ("A", "grpo, from sft", GRPO, True),
    ("A", "sft, batch 8, after them", (*SFT, "--batch-size", "8"), True),
    ("B", "distill (the first run)", DISTILL, False),
    ("B", "sft, from distill", SFT, True),
)


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "zyquo_tui", *args], capture_output=True,
                          text=True, cwd=REPO, stdin=subprocess.DEVNULL,
                          env={**os.environ, "ZYQUO_HOME": str(home), "NO_COLOR": "1"})
    if done.returncode != 0:
        raise SystemExit(f"zyquo-tui {' '.join(args)} exited {done.returncode}: "
                         f"{done.stderr.strip() or done.stdout.strip()}")
    return done


def store(root: Path, name: str, samples: Path) -> Path:
    """A store of its own with the sample models (linked from one build)."""
    home = root / name
    if not home.exists():
        (home / "models").mkdir(parents=True)
        for model in samples.iterdir():
            (home / "models" / model.name).symlink_to(model)
    return home


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="keep the stores here")
    args = parser.parse_args(argv)
    root = args.home or Path(tempfile.mkdtemp(prefix="zyquo-bench-duration-"))
    try:
        build = root / "sample-build"
        if not (build / "models" / "zyquo-tiny").exists():
            cli(build, "sample")
        print(f"{'store':<6} {'run':<28} {'basis':<40} {'planned s':>10} {'took s':>8} "
              f"{'error':>7}")
        for name, label, flags, planned_first in ROWS:
            home = store(root, name, build / "models")
            basis, predicted = "-", None
            if planned_first:
                plan = json.loads(cli(home, "plan", *COMMON, *flags, "--no-replica",
                                      "--json").stdout)
                predicted = plan["duration_seconds"]
                source = plan["duration_basis"]
                basis = (f"{source.get('tokens_per_second', 0):,.0f} tok/s of "
                         f"{source.get('run_name') or source.get('source')}"[:40]
                         if source.get("source") else "none")
            run_id = cli(home, "runs", "new", *COMMON, *flags, "--name", label).stdout.strip()
            started = time.perf_counter()
            cli(home, "runs", "start", run_id, "--wait")
            took = time.perf_counter() - started
            error = f"{predicted / took - 1:+.0%}" if predicted else "-"
            shown = f"{predicted:.1f}" if predicted else "-"
            print(f"{name:<6} {label:<28} {basis:<40} {shown:>10} {took:>8.1f} {error:>7}",
                  flush=True)
    finally:
        if args.home is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
