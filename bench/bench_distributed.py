"""One process against two ranks on this machine, and plan's duration against what runs took.

For each world size (1, then 2 with --ranks 2), a run of the sample model on the sample
completions is started through the supervisor (so the 2-rank run goes through mlx.launch) and
timed from its start request to its last event. Before each timed run, `plan --json` of the
same config is asked how long it will take (after a short warm-up run of the same world size
gives it a basis). With --repeat N each pair (warm-up and timed run) runs N times, each in a
store of its own so every plan has the same kind of basis. Prints a table: world size, steps,
tokens per second (median report), wall seconds, plan's estimate and its error, medians over
the repeats with each repeat's error beside them. On a machine with two cores, two ranks
share them: the figure to read is the overhead of the launch and of the exchanges, not a
speed-up.

    python bench/bench_distributed.py [--iters 60] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from zyquo_tui.core.events.protocol import read_events  # noqa: E402
from zyquo_tui.core.processes.supervisor import Supervisor  # noqa: E402
from zyquo_tui.core.runs.run import Run  # noqa: E402
from zyquo_tui.core.runs.settings import Hyperparameters  # noqa: E402
from zyquo_tui.core.store.store import RunStore  # noqa: E402

SETTINGS = {"batch_size": 4, "learning_rate": 1e-3, "num_layers": -1, "steps_per_report": 5,
            "steps_per_eval": 20, "save_every": 20, "val_batches": 2}


def train(store: RunStore, model: Path, data: Path, iters: int, ranks: int) -> dict:
    own = {"ranks": ranks} if ranks > 1 else {}
    hp = Hyperparameters.from_dict({**SETTINGS, "iters": iters, "zyquo_tui": own})
    run = store.create(Run.new(model=str(model), data=str(data), hyperparameters=hp))
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    done = asyncio.run(supervisor.wait(run.id, timeout=3600))
    events = read_events(store.events_path(run.id))
    speeds = [e["tokens_per_second"] for e in events if e["type"] == "train"][1:]
    return {"state": done.state.value, "seconds": events[-1]["time"] -
            done.process["requested_at"], "tokens_per_second": statistics.median(speeds)}


def plan_seconds(model: Path, data: Path, iters: int, ranks: int, home: Path) -> float | None:
    flags = ["--iters", str(iters), "--num-layers", "-1", "--steps-per-eval", "20",
             "--val-batches", "2"]
    done = subprocess.run([sys.executable, "-m", "zyquo_tui", "plan", "--model", str(model),
                           "--data", str(data), *flags, "--json"], capture_output=True,
                          text=True, env={**os.environ, "ZYQUO_HOME": str(home)}, check=True)
    return json.loads(done.stdout)["duration_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as folder:
        home = Path(folder) / "home"
        os.environ["ZYQUO_HOME"] = str(home)
        made = subprocess.run([sys.executable, "-m", "zyquo_tui.trainer.sample_model",
                               str(Path(folder) / "models"), "--json"], capture_output=True,
                              text=True, check=True)
        model = Path(json.loads(made.stdout)["models"]["zyquo-tiny"])
        data = REPO / "sample_data" / "completions"
        rows = []
        for ranks in (1, 2):
            results, estimates, errors = [], [], []
            for repeat in range(args.repeat):
                store = RunStore(home / f"world-{ranks}-{repeat}").ensure()
                os.environ["ZYQUO_HOME"] = str(store.home)
                train(store, model, data, 20, ranks)  # the plan's basis
                estimate = plan_seconds(model, data, args.iters, ranks, store.home)
                result = train(store, model, data, args.iters, ranks)
                results.append(result)
                if estimate:
                    estimates.append(estimate)
                    errors.append((estimate - result["seconds"]) / result["seconds"])
            states = sorted({result["state"] for result in results})
            rows.append([ranks, args.iters,
                         f"{statistics.median(r['tokens_per_second'] for r in results):.0f}",
                         f"{statistics.median(r['seconds'] for r in results):.1f}",
                         f"{statistics.median(estimates):.1f}" if estimates else "-",
                         f"{statistics.median(errors):+.0%}" if errors else "-",
                         " ".join(f"{error:+.0%}" for error in errors) or "-",
                         ",".join(states)])
        header = ["ranks", "steps", "tokens/s", "wall s", "plan s", "plan error", "each",
                  "state"]
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(str(cell).rjust(width) for cell, width in zip(row, widths)))


if __name__ == "__main__":
    main()
