"""Every speed and memory target of the dashboard, the event format and the metrics, checked.

Runs the benches that guard a target stated in docs (docs/dashboard.md, "How it stays fast";
docs/setup.md for the setup form), each in its own process, `--repeat` times, and prints each
target with the median of what was measured, the target, and whether it was met. Exits 1 when
a target is missed, 2 when a bench could not run. Run it before resolving any change to the
dashboard, the event format or the metrics; the machine's load is printed beside the figures,
since other work on a shared machine slows every measurement.

    python bench/check_targets.py [--repeat 3] [--only dashboard,follow,runs_list,setup]

Training's own targets (bench_trainer.py, bench_client.py, bench_chunked_loss.py,
bench_stop.py) are measured by those scripts; they train, and take minutes each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from targets import Target, figure, read_targets  # noqa: E402

# name: the script and its arguments (the defaults the docs' figures use)
BENCHES = {
    "dashboard": ["bench_dashboard.py"],
    "follow": ["bench_follow.py"],
    "runs_list": ["bench_runs_list.py"],
    "setup": ["bench_setup.py"],
}

EXIT_MISSED = 1
EXIT_FAILED = 2


def run_bench(name: str) -> list[Target]:
    script, *arguments = BENCHES[name]
    done = subprocess.run([sys.executable, str(BENCH / script), *arguments, "--targets"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    targets = read_targets(done.stdout) if done.returncode == 0 else None
    if targets is None:
        raise RuntimeError(f"{script} exited with status {done.returncode} and no targets:\n"
                           f"{(done.stderr or done.stdout)[-2000:]}")
    return targets


def load_average() -> str:
    try:
        return " ".join(f"{value:.1f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each bench; the median of each figure is judged")
    parser.add_argument("--only", default=",".join(BENCHES),
                        help=f"benches to run, comma-separated (of {', '.join(BENCHES)})")
    args = parser.parse_args()
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in BENCHES]
    if unknown:
        parser.error(f"no bench named {', '.join(unknown)}; there are {', '.join(BENCHES)}")

    runs: dict[str, list[list[Target]]] = {name: [] for name in names}
    loads = []
    started = time.monotonic()
    for round_ in range(args.repeat):
        for name in names:
            loads.append(load_average())
            print(f"[{round_ + 1}/{args.repeat}] {name} (load average {loads[-1]})...",
                  file=sys.stderr, flush=True)
            try:
                runs[name].append(run_bench(name))
            except RuntimeError as error:
                print(f"bench {name} failed: {error}", file=sys.stderr)
                return EXIT_FAILED
            for target in runs[name][-1]:
                print(f"    {target.measure}: {figure(target.measured, target.unit)} "
                      f"({target.bound_text})", file=sys.stderr, flush=True)

    rows = []
    missed = 0
    for name in names:
        first = runs[name][0]
        for index, target in enumerate(first):
            values = [results[index].measured for results in runs[name]]
            judged = Target(target.measure, statistics.median(values), target.bound,
                            target.unit, target.at_least)
            missed += not judged.met
            spread = ", ".join(figure(v, target.unit) for v in values)
            rows.append((judged.measure, figure(judged.measured, judged.unit),
                         judged.bound_text, "ok" if judged.met else "MISSED",
                         spread if len(values) > 1 else target.detail))
    headers = ("measure", "measured (median)", "target", "status", "runs")
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(4)]
    for row in [headers, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths))
              + "  " + row[4])
    print(f"\n{len(rows) - missed} of {len(rows)} targets met; {args.repeat} run(s) of each "
          f"bench in {time.monotonic() - started:.0f} s; {os.cpu_count()} cores; load average "
          f"(1, 5, 15 min) at each bench's start: {'; '.join(loads)}")
    return EXIT_MISSED if missed else 0


if __name__ == "__main__":
    sys.exit(main())
