"""The dashboard, measured: the real ZyquoApp under Textual's Pilot (headless), on a real store.

- time to first frame with 1,000 runs in the store (target < 1 s)
- opening a run with 100,000 events until its charts are drawn (target < 0.3 s): train lines
  as the trainer writes them today, and as written before they carried peak_rss_bytes; the
  run has ended, so the runner kept its metrics.cache (the opening without it is printed too)
- while a synthetic trainer appends 500 events/s to the followed run: key press to screen
  update latency, p99 (target < 50 ms), and the dashboard's CPU (target < 10% of one core)
- resident memory after opening 10 runs of 100,000 events each in turn (target < 150 MiB)

Headless means no terminal output is written; everything else (layout, rendering of every
widget, the compositor, workers, file reads) runs as in a terminal. `--targets` adds a line
that bench/check_targets.py reads.

    python bench/bench_dashboard.py [--runs 1000] [--events 100000] [--follow-seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from textual import events as events_module  # noqa: E402

from zyquo_tui.core.events.history import keep_cache  # noqa: E402
from zyquo_tui.core.events.metrics_cache import cache_path  # noqa: E402
from zyquo_tui.core.runs.run import Run, RunState  # noqa: E402
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.store import RunStore  # noqa: E402
from zyquo_tui.core.system.liveness import identity  # noqa: E402
from zyquo_tui.dashboard.app import ZyquoApp  # noqa: E402
from zyquo_tui.dashboard.notify import NotificationSettings  # noqa: E402
from zyquo_tui.dashboard.screens.live_metrics_screen import LiveMetricsScreen  # noqa: E402
from zyquo_tui.dashboard.widgets.loss_chart import LossChart  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import Target, figure, print_targets  # noqa: E402

QUIET = NotificationSettings(desktop="off", bell=False)
SIZE = (120, 40)
T0 = 1_764_403_200.0
STATES = [RunState.COMPLETED] * 6 + [RunState.FAILED, RunState.CANCELLED, RunState.CONFIGURED,
                                      RunState.INTERRUPTED]

# A train line as the trainer writes it today, and as it wrote them before it recorded its
# resident peak (older runs, and a system where it cannot be read).
TRAIN = ('{"v": 1, "type": "train", "time": %.3f, "iteration": %d, "train_loss": %.6f, '
         '"learning_rate": 1e-05, "iterations_per_second": 20.0, "tokens_per_second": %.1f, '
         '"trained_tokens": %d, "peak_memory_bytes": %d, "peak_rss_bytes": 318767104}\n')
TRAIN_BEFORE_RESIDENT_PEAK = TRAIN.replace(', "peak_rss_bytes": 318767104', "")
VAL = '{"v": 1, "type": "val", "time": %.3f, "iteration": %d, "val_loss": %.6f, "val_time": 0.5}\n'
CHECKPOINT = ('{"v": 1, "type": "checkpoint", "time": %.3f, "iteration": %d, '
              '"adapter_file": "adapters/%07d_adapters.safetensors", "bytes": 4456448}\n')


def run_id(i: int) -> str:
    return f"20251129-{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}-{i % 1000:03d}-{i:04x}"


def make_run(store: RunStore, rid: str, state: RunState, iters: int, step: int,
             process: dict | None = None) -> Run:
    run = Run(id=rid, name=f"bench run {rid[-4:]}", method=Method.LORA,
              model="/models/Qwen2.5-0.5B-Instruct-4bit", data="/data/support-chat",
              hyperparameters=Hyperparameters(iters=iters), state=state,
              summary={"step": step, "iters": iters, "last_train_loss": 1.2,
                       "last_val_loss": 1.4, "best_val_loss": 1.3, "tokens_per_second": 1800.0,
                       "started_at": T0, "ended_at": T0 + 600},
              process=process)
    return store.create(run)


def write_history(path: Path, events: int, start_step: int = 1, train: str = TRAIN) -> int:
    """`events` events: train every step (lines shaped as `train`), val every 200,
    checkpoint every 1,000."""
    lines = ['{"v": 1, "type": "started", "time": %.3f, "iters": %d, "resumed_from_step": null}\n'
             % (T0, events * 2)]
    step = start_step
    while len(lines) < events:
        now = T0 + step * 0.05
        lines.append(train % (now, step, 3.0 / (1 + step / 5000) + (step % 7) * 0.01,
                              1800 + step % 50, step * 64, 3_000_000_000 + step))
        if step % 200 == 0:
            lines.append(VAL % (now, step, 3.2 / (1 + step / 5000)))
        if step % 1000 == 0:
            lines.append(CHECKPOINT % (now, step, step))
        step += 1
    path.write_text("".join(lines))
    return step


async def until(pilot, predicate, timeout: float = 60.0, poll: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the dashboard never got there")
        await pilot.pause(poll)


# -- 1. first frame with 1,000 runs -----------------------------------------------------------


async def first_frame(home: Path, count: int) -> dict:
    store = RunStore(home).ensure()
    for i in range(count):
        make_run(store, run_id(i), STATES[i % len(STATES)], 1000, 1000)
    start = time.perf_counter()
    app = ZyquoApp(store, notifications=QUIET)
    async with app.run_test(size=SIZE) as pilot:
        mounted = time.perf_counter() - start  # the runs screen is up (title, empty table)
        await until(pilot, lambda: app.screen.table.row_count == count)
        await pilot.pause()
        filled = time.perf_counter() - start
    return {"mounted": mounted, "filled": filled}


# -- 2. opening a run with 100,000 events -------------------------------------------------------


async def open_long_run(home: Path, events: int, repeat: int = 3, train: str = TRAIN) -> dict:
    """From the enter key to the first frame of the run screen, and to the first frame
    that shows the charts (frames timed where the app hands them to the driver).

    The run has ended, so its runner kept its metrics.cache: `repeat` openings as a user
    makes them. Then once without it (a run opened for the first time while it trains, or
    one that ended before the cache existed): the events read from events.jsonl.
    """
    store = RunStore(home).ensure()
    rid = run_id(1)
    make_run(store, rid, RunState.COMPLETED, events * 2, events)
    write_history(store.events_path(rid), events, train=train)
    keep_cache(store.events_path(rid))  # as the runner does when a run ends
    cache = cache_path(store.events_path(rid))
    screen_times, chart_times = [], []
    app = ZyquoApp(store, notifications=QUIET)
    frames: dict[str, float] = {}
    original_display = app._display

    def display(screen, renderable):
        original_display(screen, renderable)
        if isinstance(screen, LiveMetricsScreen) and screen.is_mounted:
            frames.setdefault("screen", time.perf_counter())
            chart = screen.query_one(LossChart)
            if chart.train is not None and len(chart.train):
                frames.setdefault("charts", time.perf_counter())
    app._display = display  # type: ignore[method-assign]

    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.screen.table.row_count == 1)
        await pilot.pause(0.5)
        for attempt in range(repeat + 1):
            uncached = attempt == repeat
            if uncached:
                cache.unlink()
            app.service.feeds.clear()  # a cold open every time
            frames.clear()
            start = time.perf_counter()
            app.post_message(events_module.Key("enter", None))
            await until(pilot, lambda: "charts" in frames, poll=0.02)
            if uncached:
                uncached_charts = frames["charts"] - start
            else:
                screen_times.append(frames["screen"] - start)
                chart_times.append(frames["charts"] - start)
            await pilot.press("escape")
            await pilot.pause(0.3)
    return {"screen": statistics.median(screen_times), "charts": statistics.median(chart_times),
            "uncached": uncached_charts}


# -- 3. following 500 events/s: latency and CPU -------------------------------------------------

WRITER = textwrap.dedent("""
    import sys, time
    path, rate, step = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    template = %r
    with open(path, "a") as handle:
        tick = 0.02
        per_tick = max(1, int(rate * tick))
        next_time = time.monotonic()
        while True:
            now = time.time()
            handle.write("".join(template %% (now, step + i, 1.5 + (step + i) %% 7 * 0.01,
                                               1800.0, (step + i) * 64, 3000000000)
                                  for i in range(per_tick)))
            handle.flush()
            step += per_tick
            next_time += tick
            time.sleep(max(0.0, next_time - time.monotonic()))
""") % TRAIN


async def follow_under_load(home: Path, events: int, rate: float, seconds: float,
                            presses: int) -> dict:
    store = RunStore(home).ensure()
    rid = run_id(2)
    path = store.events_path(rid)
    make_run(store, rid, RunState.CONFIGURED, 10_000_000, 0)
    next_step = write_history(path, events)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(rate),
                               str(next_step)], stdin=subprocess.DEVNULL)
    try:
        me = identity(writer.pid)

        def running(r: Run) -> None:
            r.set_state(RunState.STARTING)
            r.set_state(RunState.RUNNING)
            r.process = {"pid": me["pid"], "start_time": me["start_time"],
                         "requested_at": time.time()}
        store.update(rid, running)

        app = ZyquoApp(store, notifications=QUIET)
        shown: dict[str, float] = {}
        original_display = app._display

        def display(screen, renderable):
            # The frame that first shows the new smoothing setting.
            original_display(screen, renderable)
            key = f"smoothing={app.smoothing}"
            shown.setdefault(key, time.perf_counter())
        app._display = display  # type: ignore[method-assign]

        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.screen.table.row_count == 1)
            await pilot.press("enter")
            await until(pilot, lambda: app.service.feed(rid) is not None
                        and app.service.feed(rid).following)
            await pilot.pause(1.0)

            process = psutil.Process()
            cpu_start = process.cpu_times()
            wall_start = time.perf_counter()
            step_start = app.service.feed(rid).metrics.step
            await asyncio.sleep(seconds)
            cpu_end = process.cpu_times()
            wall = time.perf_counter() - wall_start
            received = app.service.feed(rid).metrics.step - step_start
            cpu = ((cpu_end.user - cpu_start.user) + (cpu_end.system - cpu_start.system)) / wall

            latencies = []
            for _ in range(presses):
                shown.clear()
                target = f"smoothing={not app.smoothing}"
                start = time.perf_counter()
                await pilot.press("s")
                await until(pilot, lambda: target in shown, timeout=5, poll=0.001)
                latencies.append(shown[target] - start)
                await asyncio.sleep(0.05)
    finally:
        writer.kill()
        writer.wait()
    latencies.sort()
    return {"cpu": cpu, "events_per_second": received / wall,
            "p50": latencies[len(latencies) // 2],
            "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "max": latencies[-1], "presses": len(latencies)}


# -- 4. memory after opening 10 long runs in turn --------------------------------------------------


async def memory_after_opening(home: Path, runs: int, events: int) -> dict:
    store = RunStore(home).ensure()
    ids = [run_id(100 + i) for i in range(runs)]
    for rid in ids:
        make_run(store, rid, RunState.COMPLETED, events * 2, events)
        write_history(store.events_path(rid), events)
    process = psutil.Process()
    gc.collect()
    app = ZyquoApp(store, notifications=QUIET)
    peaks = []
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.screen.table.row_count == runs)
        gc.collect()
        baseline = process.memory_info().rss
        for rid in ids:
            app.screen.table.select_run(rid)
            await pilot.press("enter")
            await until(pilot, lambda: app.service.feed(rid) is not None
                        and app.service.feed(rid).loaded)
            await pilot.pause()
            peaks.append(process.memory_info().rss)
            await pilot.press("escape")
            await pilot.pause()
        gc.collect()
        await pilot.pause(0.5)
        final = process.memory_info().rss
    return {"baseline": baseline, "final": final, "peak": max(peaks)}


def import_seconds() -> float:
    """A cold `import zyquo_tui.dashboard.app` in a new interpreter (what a user waits for first)."""
    code = "import time; t = time.perf_counter(); import zyquo_tui.dashboard.app; " \
           "print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, check=True)
    return float(done.stdout)


PARTS = ("first_frame", "open_long_run", "open_older_run", "follow_under_load",
         "memory_after_opening")


def run_part(part: str, args: argparse.Namespace) -> dict:
    """One measurement in this process (a fresh one: no other app's objects around)."""
    os.environ.pop("NO_COLOR", None)
    root = Path(tempfile.mkdtemp(prefix="zyquo-bench-dashboard-"))
    try:
        if part == "first_frame":
            return asyncio.run(first_frame(root, args.runs))
        if part == "open_long_run":
            return asyncio.run(open_long_run(root, args.events))
        if part == "open_older_run":
            return asyncio.run(open_long_run(root, args.events,
                                             train=TRAIN_BEFORE_RESIDENT_PEAK))
        if part == "follow_under_load":
            return asyncio.run(follow_under_load(root, args.events, args.rate,
                                                 args.follow_seconds, args.presses))
        return asyncio.run(memory_after_opening(root, args.memory_runs, args.events))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def in_subprocess(part: str, argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, "--part", part, *argv],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"{part} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--follow-seconds", type=float, default=10.0)
    parser.add_argument("--presses", type=int, default=100)
    parser.add_argument("--memory-runs", type=int, default=10)
    parser.add_argument("--targets", action="store_true",
                        help="add the line of targets bench/check_targets.py reads")
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        print(json.dumps(run_part(args.part, args)))
        return 0

    argv = [f"--runs={args.runs}", f"--events={args.events}", f"--rate={args.rate}",
            f"--follow-seconds={args.follow_seconds}", f"--presses={args.presses}",
            f"--memory-runs={args.memory_runs}"]
    imported = import_seconds()
    frame = in_subprocess("first_frame", argv)
    opened = in_subprocess("open_long_run", argv)
    older = in_subprocess("open_older_run", argv)
    follow = in_subprocess("follow_under_load", argv)
    memory = in_subprocess("memory_after_opening", argv)

    mib = 1024 * 1024
    opening = f"open a run with {args.events:,} events, charts drawn"
    targets = [
        Target(f"first frame, {args.runs:,} runs in the store", frame["mounted"], 1.0, "s",
               detail=f"table filled {frame['filled']:.2f} s"),
        Target(opening, opened["charts"], 0.3, "s",
               detail=f"screen {opened['screen'] * 1000:.0f} ms; without metrics.cache "
                      f"{opened['uncached']:.2f} s"),
        Target(f"{opening}, lines without peak_rss_bytes", older["charts"], 0.3, "s",
               detail=f"screen {older['screen'] * 1000:.0f} ms; without metrics.cache "
                      f"{older['uncached']:.2f} s"),
        Target(f"key to screen update, p99, {args.rate:.0f} events/s", follow["p99"] * 1000,
               50.0, "ms", detail=f"p50 {follow['p50'] * 1000:.1f}, max "
                                  f"{follow['max'] * 1000:.1f}, n={follow['presses']}"),
        Target(f"dashboard CPU while following {args.rate:.0f} events/s", follow["cpu"] * 100,
               10.0, "%", detail=f"of one core; {follow['events_per_second']:.0f} events/s "
                                 "arrived"),
        Target(f"resident memory, {args.memory_runs} runs x {args.events:,} events opened",
               memory["final"] / mib, 150.0, "MiB",
               detail=f"peak {memory['peak'] / mib:.0f}, before opening any "
                      f"{memory['baseline'] / mib:.0f}"),
    ]
    rows = [("cold import of zyquo_tui.dashboard.app (new interpreter)", "-",
             f"{imported:.2f} s", "")]
    rows += [(t.measure, t.bound_text, figure(t.measured, t.unit) + f" ({t.detail})",
              "ok" if t.met else "MISSED") for t in targets]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)}  {'target':<10} measured")
    for name, target, value, status in rows:
        print(f"{name.ljust(width)}  {target:<10} {value}  {status}".rstrip())
    print(f"\n({os.cpu_count()} cores, Python {sys.version.split()[0]}, load average "
          f"{os.getloadavg()[0]:.1f}; each measurement in its own process)")
    if args.targets:
        print_targets(targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
