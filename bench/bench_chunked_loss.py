"""The sliced loss against bare `mlx_lm lora`: peak memory and tokens/s, side by side.

A generated llama model with a Qwen-sized vocabulary (151,936 tokens) trains LoRA on every
layer at batch 4, once in our trainer (loss_chunk_tokens at its default) and once with
`mlx_lm lora -c` on the same exported config, at each sequence length. Rows are longer than the
length, so every batch is exactly that wide. Peaks are the process's MLX peak
(`mx.get_peak_memory()`): ours from the `train` events, mlx-lm's printed at exit by a wrapper
that runs its unchanged `lora` command. Tokens/s leave the first step out (it compiles).
Target at 1,024 tokens: peak ratio 0.6 or less, tokens/s ratio 0.95 or more.

    python bench/bench_chunked_loss.py [--lengths 256,512,1024] [--iters 3] [--hidden 64]
                                       [--repeat 1]

Runs alternate (ours, theirs, ours, ...) and the medians are shown: on a shared machine the
tokens/s of single runs swing with the load of other processes.
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
from zyquo_tui.core.runs.settings import Hyperparameters  # noqa: E402
from zyquo_tui.core.store.store import RunStore  # noqa: E402

VOCAB = 151_936
BATCH = 4
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# mlx-lm 0.32's report row: step, loss and arrow, tokens/sec, trained tokens.
REPORT_ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+[▼▲]\s+([\d,]+)\s+([\d.]+)k\s*$")
PEAK_LINE = re.compile(r"^BENCH_PEAK (\d+)$", re.MULTILINE)
# `mlx_lm lora` itself, with the process's peak printed when it ends.
MLX_LM_WITH_PEAK = (
    "import atexit, sys, mlx.core as mx\n"
    "atexit.register(lambda: print(f'BENCH_PEAK {mx.get_peak_memory()}', flush=True))\n"
    "from mlx_lm.lora import main\n"
    "sys.argv = ['mlx_lm.lora', '-c', sys.argv[1]]\n"
    "main()\n"
)


def build_model(target: Path, hidden: int, layers: int) -> Path:
    code = ("import sys; from zyquo_tui.trainer.sample_model import build_model; "
            f"build_model(sys.argv[1], hidden_size={hidden}, num_layers={layers}, "
            f"num_heads=4, num_kv_heads=2, intermediate_size={hidden * 2}, "
            f"vocab_size={VOCAB})")
    subprocess.run([sys.executable, "-c", code, str(target)], check=True, cwd=REPO,
                   stdin=subprocess.DEVNULL)
    return target


def long_rows(folder: Path, rows: int, words: int) -> Path:
    """A text dataset whose rows are longer than any length measured (no valid.jsonl)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (REPO / "sample_data" / "README.md").read_text(encoding="utf-8").split()
    with open(folder / "train.jsonl", "w", encoding="utf-8") as out:
        for i in range(rows):
            body = " ".join(text[(i * 7 + j) % len(text)] for j in range(words))
            out.write(json.dumps({"text": body}) + "\n")
    return folder


def ours(store: RunStore, run: Run) -> tuple[int, float]:
    copy = Run.new(model=run.model, data=run.data, hyperparameters=run.hyperparameters)
    store.create(copy)
    subprocess.run([sys.executable, "-m", "zyquo_tui.trainer", str(store.run_dir(copy.id))],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=REPO)
    events = read_events(store.events_path(copy.id))
    trains = [e for e in events if e["type"] == "train"]
    started = next(e for e in events if e["type"] == "started")
    assert started.get("loss_chunk_tokens") != "off", "the sliced loss was not used"
    return trains[-1]["peak_memory_bytes"], statistics.median(
        e["tokens_per_second"] for e in trains[1:])


def theirs(config_path: Path, workdir: Path) -> tuple[int, float]:
    done = subprocess.run([sys.executable, "-c", MLX_LM_WITH_PEAK, str(config_path)],
                          check=True, capture_output=True, text=True, cwd=workdir,
                          stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    output = ANSI.sub("", done.stdout)
    rates = [float(m.group(3).replace(",", "")) for m in
             (REPORT_ROW.match(line) for line in output.splitlines()) if m]
    peak = PEAK_LINE.search(output)
    if not rates or peak is None:
        raise SystemExit("could not read mlx_lm lora's tokens/sec or peak:\n" + done.stdout)
    return int(peak.group(1)), statistics.median(rates[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="256,512,1024")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_model(tmp / "model", args.hidden, args.layers)
        data = long_rows(tmp / "data", rows=BATCH * (args.iters + 1), words=3 * max(lengths))
        store = RunStore(tmp / "home").ensure()
        for length in lengths:
            hp = Hyperparameters(iters=args.iters, batch_size=BATCH, learning_rate=1e-5,
                                 num_layers=-1, steps_per_report=1, steps_per_eval=10_000,
                                 save_every=10_000, max_seq_length=length)
            run = Run.new(model=str(model), data=str(data), hyperparameters=hp)
            config_path = tmp / f"config-{length}.yaml"
            config_path.write_text(dump_mlx_yaml(run_to_mlx_config(run, str(tmp / "adapters"))))
            pairs = [(ours(store, run), theirs(config_path, tmp)) for _ in range(args.repeat)]
            our_peak = max(pair[0][0] for pair in pairs)
            their_peak = max(pair[1][0] for pair in pairs)
            our_rate = statistics.median(pair[0][1] for pair in pairs)
            their_rate = statistics.median(pair[1][1] for pair in pairs)
            results.append((length, our_peak, their_peak, our_rate, their_rate))
            print(f"{length} tokens: ours {our_peak / 2**30:.2f} GiB {our_rate:.0f} tok/s, "
                  f"mlx_lm lora {their_peak / 2**30:.2f} GiB {their_rate:.0f} tok/s",
                  flush=True)
    print()
    print(f"model: llama hidden {args.hidden}, {args.layers} layers, vocabulary {VOCAB:,}, "
          f"float32; LoRA all layers, batch {BATCH}, {args.iters} steps (the first left out), "
          f"{args.repeat} repetition(s)")
    print("| tokens per row | peak ours | peak mlx_lm lora | peak ratio | tok/s ours "
          "| tok/s mlx_lm lora | tok/s ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for length, our_peak, their_peak, our_rate, their_rate in results:
        print(f"| {length:,} | {our_peak / 2**30:.2f} GiB | {their_peak / 2**30:.2f} GiB "
              f"| {our_peak / their_peak:.2f} | {our_rate:.0f} | {their_rate:.0f} "
              f"| {our_rate / their_rate:.2f} |")
    print(json.dumps({str(r[0]): {"peak_ratio": r[1] / r[2], "tokens_per_second_ratio":
                                  r[3] / r[4]} for r in results}))


if __name__ == "__main__":
    main()
