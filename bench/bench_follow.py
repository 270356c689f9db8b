"""Following a run: catch-up over 100,000 events, and the cost of an idle follow.

Targets: catch-up under 1 s; an idle follow under 1% of one core.

    python bench/bench_follow.py [--events 100000] [--repeat 5] [--idle-seconds 10] [--targets]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zyquo_tui.core.events.metrics import RunMetrics  # noqa: E402
from zyquo_tui.core.processes.supervisor import Supervisor  # noqa: E402
from zyquo_tui.core.runs.run import Run, RunState  # noqa: E402
from zyquo_tui.core.store.store import RunStore  # noqa: E402
from zyquo_tui.core.system.liveness import identity  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import Target, print_targets  # noqa: E402


def write_events(path: Path, count: int) -> None:
    now = time.time()
    lines = [json.dumps({"v": 1, "type": "started", "time": now, "iters": count, "pid": 1,
                         "resumed_from_step": None})]
    for i in range(1, count):
        if i % 10 == 0:
            event = {"v": 1, "type": "val", "time": now + i, "iteration": i,
                     "val_loss": 2 + 1 / i, "val_time": 0.1}
        else:
            event = {"v": 1, "type": "train", "time": now + i, "iteration": i,
                     "train_loss": 2 + 1 / i, "learning_rate": 1e-5,
                     "iterations_per_second": 20.0, "tokens_per_second": 1500.0,
                     "trained_tokens": 64 * i, "peak_memory_bytes": 7_000_000}
        lines.append(json.dumps(event))
    path.write_text("\n".join(lines) + "\n")


def running_run(store: RunStore) -> Run:
    """A run whose 'trainer' is this process: alive, and writing nothing."""
    run = store.create(Run.new(model="/m", data="/d"))
    me = identity(os.getpid())

    def running(r: Run) -> None:
        r.set_state(RunState.STARTING)
        r.set_state(RunState.RUNNING)
        r.process = {**me, "runner_pid": me["pid"], "runner_start_time": me["start_time"]}
    return store.update(run.id, running)


async def catch_up(supervisor: Supervisor, run_id: str, count: int) -> tuple[float, float]:
    start = time.perf_counter()
    metrics = RunMetrics()
    seen = 0
    read_time = 0.0
    async for batch in supervisor.follow_batches(run_id):
        read_time = time.perf_counter() - start
        metrics.ingest(batch)
        seen += len(batch)
        if seen >= count:
            break
    return read_time, time.perf_counter() - start


async def idle(supervisor: Supervisor, run_id: str, seconds: float) -> float:
    follower = supervisor.follow_batches(run_id)
    await follower.__anext__()  # the backlog
    cpu = time.process_time()
    wall = time.perf_counter()

    async def drain():
        async for _ in follower:
            pass
    task = asyncio.ensure_future(drain())
    await asyncio.sleep(seconds)
    task.cancel()
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--targets", action="store_true",
                        help="add the line of targets bench/check_targets.py reads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp)).ensure()
        run = running_run(store)
        write_events(store.events_path(run.id), args.events)
        supervisor = Supervisor(store)
        reads, totals = [], []
        for _ in range(args.repeat):
            read, total = asyncio.run(catch_up(supervisor, run.id, args.events))
            reads.append(read)
            totals.append(total)
        share = asyncio.run(idle(supervisor, run.id, args.idle_seconds))
    print(f"{'measure':<52} {'median':>9} {'min':>8} {'target':>8}")
    print(f"{f'catch-up: read {args.events} events (s)':<52} {statistics.median(reads):>9.3f} "
          f"{min(reads):>8.3f} {'':>8}")
    print(f"{'catch-up: read and build the metrics (s)':<52} {statistics.median(totals):>9.3f} "
          f"{min(totals):>8.3f} {'< 1':>8}")
    print(f"{f'idle follow, CPU share of one core over {args.idle_seconds:.0f} s':<52} "
          f"{share * 100:>8.2f}% {'':>8} {'< 1%':>8}")
    if args.targets:
        print_targets([
            Target(f"follow: catch up on {args.events:,} events and build the metrics",
                   statistics.median(totals), 1.0, "s",
                   detail=f"median of {args.repeat}; reading alone "
                          f"{statistics.median(reads):.2f} s"),
            Target(f"follow: idle, CPU over {args.idle_seconds:.0f} s", share * 100, 1.0, "%",
                   detail="of one core"),
        ])


if __name__ == "__main__":
    main()
