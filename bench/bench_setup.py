"""The run setup, measured: the real ZyquoApp and NewRunScreen under Textual's Pilot (headless).

- opening the new-run screen with 50 discovered models, until the model list is filled and
  drawn (target < 0.5 s): the first opening of a session (which looks for the models) and
  the later ones (which show the last look's list at once and look again in a worker)
- a key press in a hyperparameter field until the last frame it causes is drawn: the typed
  character, the verdict, estimate, breakdown, suggestions and field marks recomputed
  (target < 50 ms per key, p99)
- the form's recompute alone (parse, problems, memory plan with its suggestion search)

The 50 models are copies of the sample model's config.json and safetensors file (built once,
offline) with varied names, in $ZYQUO_HOME/models of a temporary home; the MLX probe is run
once before timing (as on any machine after the first launch). Headless means no terminal
output is written; layout, rendering, the compositor and workers run as in a terminal.

    python bench/bench_setup.py [--models 50] [--presses 120] [--targets]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual import events  # noqa: E402

from zyquo_tui.core.memory.budget import machine_budget  # noqa: E402
from zyquo_tui.core.store.store import RunStore  # noqa: E402
from zyquo_tui.dashboard.app import ZyquoApp  # noqa: E402
from zyquo_tui.dashboard.notify import NotificationSettings  # noqa: E402
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen  # noqa: E402
from zyquo_tui.resources import sample_data_dir  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import Target, print_targets  # noqa: E402

QUIET = NotificationSettings(desktop="off", bell=False)
SIZE = (120, 40)


def build_models(home: Path, count: int) -> list[Path]:
    """`count` model folders: the sample model's config.json and weights under new names."""
    scratch = home.parent / "sample"
    subprocess.run([sys.executable, "-m", "zyquo_tui.trainer.sample_model", str(scratch),
                    "--json"], check=True, capture_output=True, stdin=subprocess.DEVNULL)
    source = scratch / "zyquo-tiny"
    models = home / "models"
    made = []
    for index in range(count):
        folder = models / f"bench-{index:02d}-llama-{(index % 7 + 1) * 100}m"
        folder.mkdir(parents=True)
        for name in ("config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json"):
            shutil.copy(source / name, folder / name)
        if index % 3 == 0:  # some differ in shape, as real collections do
            config = json.loads((folder / "config.json").read_text())
            config["max_position_embeddings"] = 4096 * (index % 4 + 1)
            (folder / "config.json").write_text(json.dumps(config))
        made.append(folder)
    return made


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


async def until(pilot, predicate, timeout: float = 60.0, poll: float = 0.002) -> None:
    """Wait with plain sleeps: Pilot.pause would also force a screen update of its own."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the screen never got there")
        await asyncio.sleep(poll)


async def measure(home: Path, count: int, presses: int, repeat: int = 5) -> dict:
    store = RunStore(home).ensure()
    app = ZyquoApp(store, notifications=QUIET)
    frames: list[float] = []
    original_display = app._display

    def display(screen, renderable):
        original_display(screen, renderable)
        frames.append(time.perf_counter())
    app._display = display  # type: ignore[method-assign]

    opens: list[float] = []
    firsts: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.service.loaded)
        # 1. opening, with the model list filled and drawn
        for attempt in range(repeat + 1):
            screen = NewRunScreen()
            marks: dict[str, float] = {}
            apply_start = screen._apply_start

            def listed(apply_start=apply_start, marks=marks) -> None:
                apply_start()  # the lists are filled just before this
                marks["listed"] = time.perf_counter()
            screen._apply_start = listed  # type: ignore[method-assign]
            start = time.perf_counter()
            app.push_screen(screen)
            await until(pilot, lambda: "listed" in marks)
            assert len(screen.models) == count, len(screen.models)
            await until(pilot, lambda: frames[-1] > marks["listed"])
            took = next(t for t in frames if t > marks["listed"]) - start
            (firsts if attempt == 0 else opens).append(took)
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is not screen)

        # 2. typing: the model and dataset chosen, rows counted, then keys into a field
        screen = NewRunScreen(model=str(home / "models" / "bench-00-llama-100m"),
                              data=str(sample_data_dir() / "chat"))
        app.push_screen(screen)
        await until(pilot, lambda: screen.ready and screen.plan is not None
                    and screen.lengths is not None, timeout=120)
        recomputed: list[float] = []
        original_recompute = screen.recompute

        def recompute() -> None:
            original_recompute()
            recomputed.append(time.perf_counter())
        screen.recompute = recompute  # type: ignore[method-assign]
        field = screen.form.row("batch_size").control
        field.cursor_blink = False  # a blink is a frame the key press did not cause
        field.focus()
        await pilot.press("end", "ctrl+u")
        await pilot.pause(0.2)
        keys = []
        while len(keys) < presses:
            # batch sizes 1 to 100000 and back: the largest won't fit (the suggestion search
            # runs), the smaller ones fit
            keys += [*"100000", *["backspace"] * 6]
        latencies: list[float] = []
        relaid: list[float] = []  # the keys that changed what lines there are (a layout pass)
        cpu: list[float] = []
        layouts = [0]
        refresh_layout = screen._refresh_layout

        def counted(*args, **kwargs):
            if screen._layout_required:  # not a scroll-only reflow
                layouts[0] += 1
            return refresh_layout(*args, **kwargs)
        screen._refresh_layout = counted  # type: ignore[method-assign]
        verdicts = set()
        for key in keys[:presses]:
            done = len(recomputed)
            passes = layouts[0]
            cpu_start = time.process_time()
            start = time.perf_counter()
            # As the terminal driver delivers a key (Pilot.press would add its own wait for
            # every widget of the screen to fall idle, which a user never waits for).
            app._driver.send_message(events.Key(key, key if len(key) == 1 else None))
            await until(pilot, lambda: len(recomputed) > done, timeout=5)
            after = recomputed[-1]
            # Whatever the key changed is drawn in the frames that follow it (at most 60 per
            # second); a recompute that changed nothing visible needs no frame.
            await asyncio.sleep(0.08)
            drawn = [t for t in frames if start < t <= after + 0.08]
            took = max([after, *drawn]) - start
            (relaid if layouts[0] > passes else latencies).append(took)
            cpu.append(time.process_time() - cpu_start - 0.0)
            if screen.plan is not None:
                verdicts.add(screen.plan.assessment.verdict.value)

        # 3. the recompute alone
        alone = []
        for _ in range(200):
            start = time.perf_counter()
            original_recompute()
            alone.append(time.perf_counter() - start)
    return {"first": firsts, "open": opens, "keys": latencies + relaid, "plain": latencies,
            "relaid": relaid, "cpu": cpu, "recompute": alone, "verdicts": sorted(verdicts)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--presses", type=int, default=120)
    parser.add_argument("--targets", action="store_true",
                        help="add the line of targets bench/check_targets.py reads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zyquo-bench-setup-") as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        os.environ["ZYQUO_HOME"] = str(home)
        os.environ["HF_HUB_CACHE"] = str(Path(scratch) / "no-hf-cache")
        build_models(home, args.models)
        machine_budget(home)  # the probe, once, as after a first launch
        result = asyncio.run(measure(home, args.models, args.presses))
    rows = [
        (f"first open, {args.models} models looked for", result["first"], 0.5),
        (f"open again, {args.models} models listed", result["open"], 0.5),
        (f"key press → verdict drawn (n={len(result['keys'])})", result["keys"], 0.050),
        (f"  keys that only change text (n={len(result['plain'])})", result["plain"], 0.050),
        (f"  keys that add or remove lines (n={len(result['relaid'])})", result["relaid"],
         0.050),
        ("  CPU time of this process per key", result["cpu"], None),
        ("recompute alone (n=200)", result["recompute"], None),
    ]
    print(f"{'measure':<42} {'p50':>9} {'p99':>9} {'max':>9}  target")
    for label, values, target in rows:
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        verdict = "" if target is None else (
            f"< {target * 1000:.0f} ms {'ok' if p99 < target else 'MISSED'}")
        print(f"{label:<42} {p50 * 1000:>7.1f}ms {p99 * 1000:>7.1f}ms "
              f"{max(values) * 1000:>7.1f}ms  {verdict}")
    print(f"verdicts seen while typing: {', '.join(result['verdicts'])}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average (1 min) of this machine: {load:.2f} on {os.cpu_count()} cores")
    if args.targets:
        print_targets([Target(f"setup: {label.strip()}", percentile(values, 0.99) * 1000,
                              target * 1000, "ms", detail="p99")
                       for label, values, target in rows[:3]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
