"""How long does `zyquo-tui runs list --json` take over a store of 10,000 runs?

Target: under 0.5 s. Prints the median of several runs, in-process (RunStore.list) and for the
whole command (a fresh Python process, as a user or a script runs it). The command runs as an
installed package does, from compiled bytecode: kept in a temporary folder
(PYTHONPYCACHEPREFIX) and made by one untimed run first, whether or not the environment says
PYTHONDONTWRITEBYTECODE (then every run would compile zyquo_tui's sources again, which no
user's installed copy does).

    python bench/bench_runs_list.py [--runs 10000] [--repeat 5] [--targets]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zyquo_tui.core.runs.run import Run, RunState, new_run_id  # noqa: E402
from zyquo_tui.core.runs.settings import Hyperparameters
from zyquo_tui.core.store.atomic import write_json_atomic  # noqa: E402
from zyquo_tui.core.store.index import INDEX_FILE, listing_rows  # noqa: E402
from zyquo_tui.core.store.store import RunStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import Target, print_targets  # noqa: E402


def make_store(home: Path, count: int) -> None:
    store = RunStore(home).ensure()
    start = time.time() - count
    for i in range(count):
        run = Run.new(model="/models/zyquo-tiny", data="/data/completions",
                      hyperparameters=Hyperparameters(iters=1000), run_id=new_run_id(start + i))
        run.state = RunState.COMPLETED
        run.summary = {"step": 1000, "last_train_loss": 1.23, "last_val_loss": 1.34,
                       "best_val_loss": 1.3, "tokens_per_second": 1234.5}
        folder = store.run_dir(run.id)
        folder.mkdir()
        write_json_atomic(folder / "run.json", run.to_dict())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--targets", action="store_true",
                        help="add the line of targets bench/check_targets.py reads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        t0 = time.perf_counter()
        make_store(home, args.runs)
        print(f"made a store of {args.runs} runs in {time.perf_counter() - t0:.1f} s")
        store = RunStore(home)
        cold, warm = [], []
        for _ in range(args.repeat):
            (store.runs_root / INDEX_FILE).unlink(missing_ok=True)
            t = time.perf_counter()
            listed = listing_rows(store)  # parses every run.json, writes the index
            cold.append(time.perf_counter() - t)
            t = time.perf_counter()
            listed = listing_rows(store)  # stats every run.json, parses none
            warm.append(time.perf_counter() - t)
        assert len(listed) == args.runs
        command = []
        env = {**os.environ, "ZYQUO_HOME": str(home),
               "PYTHONPYCACHEPREFIX": str(Path(tmp) / "bytecode")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "zyquo_tui", "runs", "list", "--json"],
                       env=env, check=True, stdout=subprocess.DEVNULL)  # writes the bytecode
        for _ in range(args.repeat):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "zyquo_tui", "runs", "list", "--json"],
                           env=env, check=True, stdout=subprocess.DEVNULL)
            command.append(time.perf_counter() - t)
        print()
        print(f"{'measure':<42} {'median s':>9} {'min s':>7} {'target':>7}")
        for label, times in (("listing, no index (first listing)", cold),
                             ("listing, index warm", warm)):
            print(f"{label:<42} {statistics.median(times):>9.3f} {min(times):>7.3f} {'':>7}")
        print(f"{'zyquo-tui runs list --json (whole command)':<42} "
              f"{statistics.median(command):>9.3f} {min(command):>7.3f} {'< 0.5':>7}")
        if args.targets:
            print_targets([Target(f"zyquo-tui runs list --json, {args.runs:,} runs",
                                   statistics.median(command), 0.5, "s",
                                   detail=f"median of {args.repeat}")])


if __name__ == "__main__":
    main()
