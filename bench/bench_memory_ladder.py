"""What each rung of the out-of-memory ladder buys and costs (docs/unattended.md).

One run of each setting the ladder steps down to (the original, gradient checkpointing on,
then half the micro-batch, then loss slices), trained by the real trainer on the same model,
data and settings; rounds alternate the four, so drift in the machine's load hits them alike.
Per run: MLX's peak (the largest `peak_memory_bytes` of its train events) and the median
tokens per second of its reports (the first, which compiles, left out); per rung: the medians
over the rounds, their ratios to the original's, and the largest difference of a step's loss
from the original's (the rungs are meant to change nothing of what is learnt).

    python bench/bench_memory_ladder.py [--model FOLDER] [--data FOLDER] [--repeat 3]
        [--iters 24] [--batch-size 8]

Without --model the sample model is built (zyquo-tiny, in a temporary folder).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from zyquo_tui.core.events.protocol import read_events  # noqa: E402
from zyquo_tui.core.formatting import fmt_bytes  # noqa: E402
from zyquo_tui.core.runs.out_of_memory import next_rung, step_down  # noqa: E402
from zyquo_tui.core.runs.run import Run  # noqa: E402
from zyquo_tui.core.runs.settings import Hyperparameters  # noqa: E402
from zyquo_tui.core.store.store import RunStore  # noqa: E402


def ladder(hp: Hyperparameters) -> list[tuple[str, Hyperparameters]]:
    """The original settings and each rung below them, in the ladder's order."""
    steps, taken = [("original", hp)], []
    while (rung := next_rung(hp, taken, sliced="off")) is not None:
        taken.append(rung.setting)
        hp = step_down(hp, rung)
        steps.append((f"+ {rung.setting} {rung.value}".lower(), hp))
    return steps


def train(store: RunStore, model: str, data: str, hp: Hyperparameters) -> dict:
    run = Run.new(model=model, data=data, hyperparameters=Hyperparameters.from_dict(
        hp.to_dict()))
    store.create(run)
    subprocess.run([sys.executable, "-m", "zyquo_tui.trainer", str(store.run_dir(run.id))],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=REPO)
    trains = [e for e in read_events(store.events_path(run.id)) if e["type"] == "train"]
    return {"peak": max(e["peak_memory_bytes"] for e in trains),
            "speed": statistics.median(e["tokens_per_second"] for e in trains[1:]),
            "losses": {e["iteration"]: e["train_loss"] for e in trains}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--data", default=str(REPO / "sample_data" / "chat"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--iters", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-layers", type=int, default=-1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zyquo-ladder-") as folder:
        model = args.model
        if model is None:
            subprocess.run([sys.executable, "-m", "zyquo_tui.trainer.sample_model",
                            f"{folder}/models", "--no-teacher"], check=True, cwd=REPO,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            model = f"{folder}/models/zyquo-tiny"
        store = RunStore(Path(folder) / "home").ensure()
        hp = Hyperparameters.from_dict({
            "iters": args.iters, "batch_size": args.batch_size, "steps_per_report": 1,
            "steps_per_eval": args.iters + 1, "val_batches": 1, "save_every": args.iters,
            "learning_rate": 1e-4, "num_layers": args.num_layers,
            "max_seq_length": 1024})
        rungs = ladder(hp)
        results: dict[str, list[dict]] = {name: [] for name, _ in rungs}
        for _ in range(args.repeat):
            for name, settings in rungs:
                results[name].append(train(store, model, args.data, settings))
        base_peak = statistics.median(r["peak"] for r in results["original"])
        base_speed = statistics.median(r["speed"] for r in results["original"])
        base_losses = results["original"][0]["losses"]
        print(f"model {model}, batch {args.batch_size}, {args.iters} steps, "
              f"{args.repeat} rounds (medians)")
        print(f"{'settings':<26} {'MLX peak':>10} {'ratio':>6} {'tokens/s':>9} {'ratio':>6} "
              f"{'max |Δloss|':>11}")
        for name, _ in rungs:
            peak = statistics.median(r["peak"] for r in results[name])
            speed = statistics.median(r["speed"] for r in results[name])
            drift = max(abs(r["losses"][step] - base_losses[step])
                        for r in results[name] for step in base_losses)
            print(f"{name:<26} {fmt_bytes(peak):>10} {peak / base_peak:>6.2f} "
                  f"{speed:>9.0f} {speed / base_speed:>6.2f} {drift:>11.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
