"""How fast `data convert` turns ShareGPT rows into a dataset folder, and in how much memory.

    python bench/bench_convert.py [--rows N] [--keep DIR]

Writes N ShareGPT conversations (a system turn in one of five, then a question and its answer)
as JSON Lines and as one parquet file, then converts each in a fresh child process, so each
peak RSS is that conversion's own. rows/cpu-s divides by the conversion's CPU time: it stays put
when other work shares the machine, while rows/s (wall clock) does not.
The rows stream through a staging file, so peak RSS should barely grow with N.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_TOPICS = ["the weather", "a recipe", "prime numbers", "the moon", "a train timetable",
           "French verbs", "a poem about rain", "sorting algorithms", "tea", "the river"]

_CHILD = """
import resource, sys, time
from zyquo_tui.core.library.dataset_conversion import convert_dataset
start, cpu = time.perf_counter(), time.process_time()
convert_dataset(sys.argv[1], sys.argv[2])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:  # Linux: ru_maxrss keeps the parent's high-water mark across exec; VmHWM does not
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
except OSError:
    pass
print(time.perf_counter() - start, time.process_time() - cpu, peak)
"""


def sharegpt_rows(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        topic = rng.choice(_TOPICS)
        turns = [{"from": "system", "value": "Answer briefly."}] if index % 5 == 0 else []
        turns += [{"from": "human", "value": f"Tell me about {topic}, question {index}."},
                  {"from": "gpt", "value": f"Here is what I know about {topic}. " * 4}]
        rows.append({"id": str(index), "conversations": turns})
    return rows


def convert_in_child(source: Path, out: Path) -> tuple[float, float, float]:
    """(wall and CPU seconds of the conversion, the child's peak RSS in MB)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, str(source), str(out)],
                          capture_output=True, text=True, check=True)
    seconds, cpu, peak = done.stdout.split()
    kilobytes = float(peak) / (1024 if sys.platform == "darwin" else 1)  # macOS: bytes
    return float(seconds), float(cpu), kilobytes / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keep", type=Path, help="write the files here and keep them")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-convert-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = sharegpt_rows(args.rows)
    jsonl = folder / "sharegpt.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    import pyarrow
    import pyarrow.parquet

    parquet = folder / "train-00000-of-00001.parquet"
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), parquet)
    del rows

    print(f"{args.rows:,} ShareGPT rows; {jsonl.stat().st_size / 1e6:.1f} MB as JSON Lines, "
          f"{parquet.stat().st_size / 1e6:.1f} MB as parquet")
    print(f"{'SOURCE':<12}{'SECONDS':>9}{'ROWS/S':>11}{'ROWS/CPU-S':>12}{'PEAK RSS MB':>13}")
    for name, source in (("jsonl", jsonl), ("parquet", parquet)):
        seconds, cpu, peak = convert_in_child(source, folder / f"out-{name}")
        print(f"{name:<12}{seconds:>9.2f}{args.rows / seconds:>11,.0f}"
              f"{args.rows / cpu:>12,.0f}{peak:>13.0f}")


if __name__ == "__main__":
    main()
