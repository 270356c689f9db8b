"""Does monitoring slow training? Our trainer against bare `mlx_lm lora`, side by side.

Both train the same model, data and config; runs alternate (ours, theirs, ours, ...) so drift
in the machine's load hits both. Tokens per second come from our `train` events and from the
table `mlx_lm lora` prints (read here only to measure the peer; the product never parses it).
The first report of each run is left out (it includes compilation). Target: ratio within 3%.

    python bench/bench_trainer.py [--repeat 3] [--iters 80] [--hidden 128] [--layers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from zyquo_tui.core.events.protocol import read_events  # noqa: E402
from zyquo_tui.core.runs.mlx_config import dump_mlx_yaml, run_to_mlx_config  # noqa: E402
from zyquo_tui.core.runs.run import Run  # noqa: E402
from zyquo_tui.core.runs.settings import Hyperparameters
from zyquo_tui.core.store.store import RunStore  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# mlx-lm 0.32's report row: step, loss and arrow, tokens/sec, trained tokens.
REPORT_ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+[▼▲]\s+([\d,]+)\s+([\d.]+)k\s*$")


def build_model(target: Path, hidden: int, layers: int) -> Path:
    code = ("import sys; from pathlib import Path; "
            "from zyquo_tui.trainer.sample_model import build_model; "
            f"build_model(Path(sys.argv[1]), hidden_size={hidden}, num_layers={layers}, "
            f"num_heads=4, num_kv_heads=2, intermediate_size={hidden * 2})")
    subprocess.run([sys.executable, "-c", code, str(target)], check=True, cwd=REPO,
                   stdin=subprocess.DEVNULL)
    return target


def ours(store: RunStore, run: Run) -> list[float]:
    copy = Run.new(model=run.model, data=run.data, hyperparameters=run.hyperparameters)
    store.create(copy)
    subprocess.run([sys.executable, "-m", "zyquo_tui.trainer", str(store.run_dir(copy.id))],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=REPO)
    events = read_events(store.events_path(copy.id))
    return [e["tokens_per_second"] for e in events if e["type"] == "train"][1:]


def theirs(config_path: Path, workdir: Path) -> list[float]:
    done = subprocess.run([sys.executable, "-m", "mlx_lm", "lora", "-c", str(config_path)],
                          check=True, capture_output=True, text=True, cwd=workdir,
                          stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    rates = []
    for line in ANSI.sub("", done.stdout).splitlines():
        match = REPORT_ROW.match(line)
        if match:
            rates.append(float(match.group(3).replace(",", "")))
    if not rates:
        raise SystemExit("could not read tokens/sec from mlx_lm lora's output:\n" + done.stdout)
    return rates[1:]


def bench_arguments() -> argparse.Namespace:
    """The settings every tokens/s bench of the trainer shares."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--iters", type=int, default=80)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    return parser.parse_args()


def bench_run(tmp: Path, args: argparse.Namespace) -> tuple[Path, RunStore, Run]:
    """A generated llama of the asked size and a LoRA run of it on the sample completions:
    batch 4, every layer, no validation and no checkpoint during the measured steps."""
    model = build_model(tmp / "model", args.hidden, args.layers)
    store = RunStore(tmp / "home").ensure()
    hp = Hyperparameters(iters=args.iters, batch_size=4, learning_rate=1e-4, num_layers=-1,
                         steps_per_report=10, steps_per_eval=10_000, save_every=10_000,
                         val_batches=2)
    run = Run.new(model=str(model), data=str(REPO / "sample_data" / "completions"),
                  hyperparameters=hp)
    return model, store, run


def bench_heading(args: argparse.Namespace) -> str:
    return (f"model: llama hidden {args.hidden}, {args.layers} layers; LoRA all layers, "
            f"batch 4, {args.iters} steps, {args.repeat} repetitions")


def main() -> None:
    args = bench_arguments()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        _, store, run = bench_run(tmp, args)
        config_path = tmp / "config.yaml"
        config_path.write_text(dump_mlx_yaml(run_to_mlx_config(run, str(tmp / "adapters"))))
        our_medians, their_medians = [], []
        for i in range(args.repeat):
            our_medians.append(statistics.median(ours(store, run)))
            their_medians.append(statistics.median(theirs(config_path, tmp)))
            print(f"repetition {i + 1}: ours {our_medians[-1]:.0f} tok/s, "
                  f"mlx_lm lora {their_medians[-1]:.0f} tok/s", flush=True)
    ratios = [o / t for o, t in zip(our_medians, their_medians)]
    print()
    print(bench_heading(args))
    print(f"{'':<24} {'median tok/s':>13}")
    print(f"{'zyquo-tui trainer':<24} {statistics.median(our_medians):>13.0f}")
    print(f"{'mlx_lm lora (bare)':<24} {statistics.median(their_medians):>13.0f}")
    print(f"{'median ratio ours/bare':<24} {statistics.median(ratios):>13.3f}   "
          f"(each: {', '.join(f'{r:.3f}' for r in ratios)}; target 0.97 or more)")
    print(json.dumps({"ratio_median": statistics.median(ratios)}))


if __name__ == "__main__":
    main()
