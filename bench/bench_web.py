"""`zyquo-tui web`, measured in a real headless chromium (Debian's, under Playwright).

For each of `--loads` page loads (a fresh tab each, so a fresh dashboard process each):
- the runs list drawn: ms from the page's navigation start to its terminal showing a run
- key to screen: ms from the page receiving a key to its terminal showing the result, `--keys`
  times per load for each of: `enter` (a run's view opens), `escape` (back to the runs list),
  `/` (the filter bar opens: a small change) and `escape` (it closes)

The server is started as a user of a venv that was never activated would: the venv's python by
its path, no zyquo-tui on PATH. Times are taken inside the page (performance.now()), from the
key's keydown to the terminal write that shows the result, so Playwright's own round trips do
not count.

    python bench/bench_web.py [--runs 10] [--loads 5] [--keys 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from web_browser import (chromium, free_port, key_latency, missing_browser,  # noqa: E402
                         new_page, served_dashboard, when_shown)

from zyquo_tui.core.runs.run import Run  # noqa: E402
from zyquo_tui.core.runs.settings import Hyperparameters, Method  # noqa: E402
from zyquo_tui.core.store.store import RunStore  # noqa: E402
from zyquo_tui.resources import sample_data_dir  # noqa: E402


# The filter bar's placeholder (dashboard/widgets/filter_bar.py).
FILTER_PROMPT = "filter runs: name"


def fill_store(home: Path, count: int) -> None:
    """`count` configured runs of the sample model on the sample data, named `bench run NN`."""
    store = RunStore(home).ensure()
    for index in range(count):
        run = Run.new(model="zyquo-tiny", data=str(sample_data_dir() / "completions"),
                      method=Method.LORA, name=f"bench run {index:02d}",
                      hyperparameters=Hyperparameters.from_dict({"iters": 60}))
        store.create(run)


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return (f"median {statistics.median(ordered):7.1f}   p90 {p90:7.1f}   "
            f"max {ordered[-1]:7.1f}   (n={len(ordered)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs in the store")
    parser.add_argument("--loads", type=int, default=5, help="page loads (fresh tabs)")
    parser.add_argument("--keys", type=int, default=5, help="presses of each key per load")
    args = parser.parse_args()
    why = missing_browser()
    if why:
        print(f"bench_web: cannot measure: {why}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="zyquo-bench-web-") as tmp:
        home = Path(tmp)
        fill_store(home, args.runs)
        runs_title = f"{args.runs} runs"  # the runs list's title bar
        run_title = "Run · bench run "  # the run view's, whichever run the cursor starts on
        # What each key is measured by: its key, the text awaited, and whether it must go.
        keys = {"enter → run view": ("Enter", run_title, False),
                "escape → runs list": ("Escape", runs_title, False),
                "/ → filter bar": ("/", FILTER_PROMPT, False),
                "escape → bar gone": ("Escape", FILTER_PROMPT, True)}
        drawn, latencies = [], {name: [] for name in keys}
        with served_dashboard(home, free_port()) as url, chromium() as browser:
            chromium_version = browser.version
            print(f"{'load':>4}  {'runs list drawn':>15}" + "".join(f"  {name:>18}"
                                                                for name in keys))
            for load in range(1, args.loads + 1):
                page = new_page(browser)
                page.goto(url)
                shown = when_shown(page, "bench run ", timeout_ms=120_000)
                if shown is None:
                    raise SystemExit(f"load {load}: the runs list never showed")
                drawn.append(shown)
                page.locator(".xterm-helper-textarea").focus()
                this_load = {name: [] for name in keys}
                for _ in range(args.keys):
                    for name, (key, text, gone) in keys.items():
                        latency = key_latency(page, key, text, gone=gone)
                        if latency is None:
                            raise SystemExit(f"load {load}: {name} never happened")
                        this_load[name].append(latency)
                for name, values in this_load.items():
                    latencies[name] += values
                print(f"{load:>4}  {shown:>15.0f}" + "".join(
                    f"  {statistics.median(values):>18.1f}" for values in this_load.values()),
                    flush=True)
                page.close()  # ends this tab's dashboard
        print(f"(ms; runs list drawn: from navigation start; keys: median of {args.keys} "
              "presses each)")

    print()
    print(f"chromium {chromium_version}, textual-serve {version('textual-serve')}, "
          f"textual {version('textual')}, {args.runs} runs in the store")
    print(f"{'runs list drawn (ms)':<24}{summary(drawn)}")
    for name, values in latencies.items():
        print(f"{name + ' (ms)':<24}{summary(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
