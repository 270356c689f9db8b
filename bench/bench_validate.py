"""How fast dataset validation runs, and in how much memory, on a 1,000,000-row chat dataset.

    python bench/bench_validate.py [--rows N] [--keep DIR]

Generates a chat dataset (train.jsonl with N rows, some repeated, plus valid.jsonl), then times
each stage in a fresh child process, so each peak RSS is that stage's own:
  read lines     binary line iteration only (the floor)
  json.loads     plus UTF-8 decoding and parsing of every row (what any check must pay)
  validate x1    zyquo_tui.core.library.datasets.validate_dataset in one process: every structure check
  validate xN    the same with one worker process per core (the default above 64 MB)
rows/cpu-s divides by the CPU time of the stage and its workers: it stays put when other work
shares the machine, while rows/s (wall clock) does not.
Targets: validate above 100,000 rows/s and below 200 MB peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS_PER_SECOND_TARGET = 100_000
PEAK_RSS_TARGET_MB = 200

_TOPICS = ["the weather", "a recipe", "prime numbers", "the moon", "a train timetable",
           "French verbs", "a poem about rain", "sorting algorithms", "tea", "the river"]


def generate(folder: Path, rows: int, seed: int = 0) -> Path:
    """Write a chat dataset of `rows` rows (about 1 in 100 repeated) into `folder`."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w", encoding="utf-8") as file:
        previous = ""
        for index in range(rows):
            if index and rng.random() < 0.01:
                file.write(previous)
                continue
            topic = rng.choice(_TOPICS)
            messages = []
            if rng.random() < 0.3:
                messages.append({"role": "system", "content": "You are a helpful assistant."})
            for turn in range(rng.randint(1, 3)):
                messages.append({"role": "user",
                                 "content": f"Question {index}.{turn}: tell me about {topic}."})
                messages.append({"role": "assistant",
                                 "content": f"Here is what I know about {topic}: "
                                            + "fact " * rng.randint(3, 30)})
            previous = json.dumps({"messages": messages}, ensure_ascii=False) + "\n"
            file.write(previous)
    with open(folder / "valid.jsonl", "w", encoding="utf-8") as file:
        for index in range(1000):
            file.write(json.dumps({"messages": [
                {"role": "user", "content": f"Valid question {index}"},
                {"role": "assistant", "content": "A valid answer."}]}) + "\n")
    return folder


def _stage(stage: str, folder: Path) -> None:
    # Runs in the child: one stage, then one JSON line with its figures.
    train = folder / "train.jsonl"
    started = time.perf_counter()
    rows = 0
    if stage == "read lines":
        with open(train, "rb", buffering=1 << 20) as file:
            for _ in file:
                rows += 1
    elif stage == "json.loads":
        decode = json.JSONDecoder().decode
        with open(train, "rb", buffering=1 << 20) as file:
            for raw in file:
                decode(raw.decode("utf-8"))
                rows += 1
    else:
        from zyquo_tui.core.library.datasets import validate_dataset
        from zyquo_tui.core.library.parallel_validation import default_workers

        workers = 1 if stage == "validate x1" else default_workers(train.stat().st_size)
        report = validate_dataset(folder, workers=workers)
        rows = report.rows["train"]
        if report.errors:
            raise SystemExit(f"unexpected errors: {report.problems[:3]}")
    seconds = time.perf_counter() - started
    me = resource.getrusage(resource.RUSAGE_SELF)
    workers_usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + workers_usage.ru_utime + workers_usage.ru_stime
    scale = 1024 if sys.platform != "darwin" else 1024 * 1024  # ru_maxrss: KiB, bytes on macOS
    print(json.dumps({"stage": stage, "rows": rows, "seconds": seconds, "cpu_seconds": cpu,
                      "peak_mb": me.ru_maxrss / scale,
                      "worker_peak_mb": workers_usage.ru_maxrss / scale}))


def run(folder: Path) -> list[dict]:
    results = []
    stages = ["read lines", "json.loads", "validate x1"]
    if (os.cpu_count() or 1) > 1:
        stages.append("validate xN")
    for stage in stages:
        output = subprocess.run(
            [sys.executable, __file__, "--stage", stage, str(folder)],
            check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        ).stdout
        results.append(json.loads(output.splitlines()[-1]))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="generate into (or reuse) this folder")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("folder", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        _stage(args.stage, args.folder)
        return 0

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch) / "chat"
        if not (folder / "train.jsonl").is_file():
            print(f"generating {args.rows:,} chat rows in {folder} ...", flush=True)
            generate(folder, args.rows)
        size_mb = (folder / "train.jsonl").stat().st_size / 1e6
        results = run(folder)
    workers = min(os.cpu_count() or 1, 8)
    print(f"\ntrain.jsonl: {results[0]['rows']:,} rows, {size_mb:.0f} MB; {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.1f} before the run\n")
    print(f"{'stage':<12} {'seconds':>8} {'rows/s':>10} {'rows/cpu-s':>11} {'peak RSS':>9} "
          f"{'per worker':>11}")
    for r in results:
        per_worker = f"{r['worker_peak_mb']:>8.0f} MB" if r["worker_peak_mb"] else ""
        print(f"{r['stage']:<12} {r['seconds']:>8.2f} {r['rows'] / r['seconds']:>10,.0f} "
              f"{r['rows'] / r['cpu_seconds']:>11,.0f} {r['peak_mb']:>6.0f} MB {per_worker:>11}")
    print(f"\nvalidate xN uses {workers} worker processes; its total memory is at most the "
          "parent's peak plus each worker's.")
    best = max(results[2:], key=lambda r: r["rows"] / r["seconds"])
    speed = best["rows"] / best["seconds"]
    memory = best["peak_mb"] + (workers * best["worker_peak_mb"] if best["worker_peak_mb"] else 0)
    print(f"targets ({best['stage']}): > {ROWS_PER_SECOND_TARGET:,} rows/s: "
          f"{'met' if speed > ROWS_PER_SECOND_TARGET else 'MISSED'} ({speed:,.0f}); "
          f"< {PEAK_RSS_TARGET_MB} MB: "
          f"{'met' if memory < PEAK_RSS_TARGET_MB else 'MISSED'} ({memory:.0f} MB)")
    return 0


if __name__ == "__main__":
    # Run from a checkout without installing: make zyquo_tui importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
