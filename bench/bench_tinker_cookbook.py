"""tinker-cookbook recipes, unchanged, against `zyquo-tui serve` on the sample model.

tinker-cookbook needs torch and a transformers release mlx-lm does not accept, so it runs from a
virtual environment of its own (made here on first use: about 6 GB, a few minutes). The server
runs from this checkout's environment with a store of its own; the recipe gets nothing but
TINKER_BASE_URL, TINKER_API_KEY and its command-line arguments: the sample model's folder as
`model_name` (its tokenizer loads from there, no download), the `role_colon` renderer, and
local data files (the project's sample data, or made from it in the format the recipe reads).

Prints the recipe's own metrics (its log folder's metrics.jsonl) per step and the run the
session became in our store, then exits with the recipe's status (non-zero when it failed).
`--resume-check` (chat_sl) kills the recipe once it has saved its first checkpoint, runs the
same command again and checks that the second run went on from that checkpoint (at least 20
steps then, so the first run is still going when the kill lands).

    python bench/bench_tinker_cookbook.py [--venv DIR] [--recipe NAME] [--steps N]
        [--resume-check] [--keep-log DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# The cookbook release this was run with, and what its math_rl recipe needs besides.
COOKBOOK = ["tinker-cookbook==0.5.8", "sympy", "pylatexenc", "math-verify"]
DEFAULT_VENV = Path.home() / ".cache" / "zyquo-tui" / "tinker-cookbook-venv"
SAMPLE_DATA = REPO / "sample_data"


@dataclass
class Recipe:
    """A recipe's command line (the module and its chz arguments) and the metrics shown."""

    arguments: Callable[[str, int, Path, Path], list[str]]  # (model, steps, log, scratch)
    shown: tuple[str, ...]
    prepare: Callable[[Path, Path], None] | None = None  # (cookbook python, scratch)


def toolalpaca_arrow(python: Path, scratch: Path) -> None:
    """The sample completions as the Arrow folder sdft's `toolalpaca_data_path` reads
    (`prompt`, `golden_response`), written with the cookbook environment's `datasets`."""
    script = (
        "import json, sys, datasets\n"
        "rows = [json.loads(l) for l in open(sys.argv[1])]\n"
        "datasets.Dataset.from_list([{'prompt': r['prompt'], 'golden_response': "
        "r['completion'].strip()} for r in rows]).save_to_disk(sys.argv[2])\n")
    subprocess.run([str(python), "-c", script, str(SAMPLE_DATA / "completions" / "train.jsonl"),
                    str(scratch / "toolalpaca")], check=True, stdin=subprocess.DEVNULL)


RECIPES = {
    # Arithmetic questions, rewarded by the answer: the cookbook's smallest RL environment.
    "math_rl": Recipe(lambda model, steps, log, scratch: [
        "tinker_cookbook.recipes.math_rl.train", f"model_name={model}",
        "renderer_name=role_colon", "env=arithmetic", "groups_per_batch=4", "group_size=4",
        "max_tokens=5", f"max_steps={steps}", "eval_every=0", "save_every=0", "lora_rank=8",
        "learning_rate=1e-3", f"log_path={log}", "behavior_if_log_dir_exists=delete"],
        ("env/all/reward/total", "env/all/correct", "optim/lr", "progress/done_frac")),
    # Supervised learning on the sample chat rows (a local JSONL: FromConversationFileBuilder),
    # a checkpoint every 2 steps; run again, it goes on from its log folder's last one.
    "chat_sl": Recipe(lambda model, steps, log, scratch: [
        "tinker_cookbook.recipes.chat_sl.train", f"model_name={model}",
        "renderer_name=role_colon", f"dataset={SAMPLE_DATA / 'chat' / 'train.jsonl'}",
        "batch_size=8", "max_length=512", "lora_rank=8", "learning_rate=1e-3",
        f"max_steps={steps}", "save_every=2", "eval_every=0", "infrequent_eval_every=0",
        f"log_path={log}", "behavior_if_log_dir_exists=resume"],
        ("train_mean_nll", "learning_rate", "num_tokens", "progress")),
    # Pairwise preference RL (a preference model that prefers the shorter answer), with
    # the KL between the policy before and after each step (compute_post_kl).
    "shorter": Recipe(lambda model, steps, log, scratch: [
        "tinker_cookbook.recipes.preference.shorter.train", f"model_name={model}",
        "renderer_name=role_colon", "batch_size=2", "group_size=4", "max_tokens=8",
        "learning_rate=1e-3", "eval_every=0", f"max_steps={steps}", f"log_path={log}",
        "behavior_if_log_dir_exists=delete"],
        ("env/all/reward/total", "env/all/by_group/frac_mixed", "grad_norm:mean",
         "kl_pre_post_v1", "kl_pre_post_v2")),
    # Self-distillation (SDFT): the base model, shown the golden answer, is the teacher; its
    # top-k prompt log-probabilities are the student's cross_entropy targets ([N, K]).
    "sdft": Recipe(lambda model, steps, log, scratch: [
        "tinker_cookbook.recipes.sdft.train", f"model_name={model}",
        "renderer_name=role_colon", "dataset=toolalpaca",
        f"toolalpaca_data_path={scratch / 'toolalpaca'}", "groups_per_batch=2",
        "group_size=2", "max_tokens=8", "topk=5", "lora_rank=8", "learning_rate=1e-3",
        "max_context_length=512", "eval_every=0", "save_every=0", f"max_steps={steps}",
        f"log_path={log}", "behavior_if_log_dir_exists=delete"],
        ("sdft/mean_teacher_entropy", "sdft/total_completion_tokens", "grad_norm:mean",
         "optim/lr", "progress/done_frac"), toolalpaca_arrow),
}


def cookbook_python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"making {venv} with {' '.join(COOKBOOK)} (a few minutes)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *COOKBOOK], check=True)
    return python


def start_server(home: Path, port: int) -> tuple[subprocess.Popen, str, str]:
    """The server on `port` with the store `home`, once it answers; its key is read from the
    store's key file (zyquo_tui/core/store/server_key.py), never from its output."""
    from zyquo_tui.core.store.server_key import key_path

    env = {**os.environ, "ZYQUO_HOME": str(home)}
    log = (home.parent / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "zyquo_tui.server", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited ({server.returncode}) before answering:\n"
                             + (home.parent / "server.log").read_text()[-2000:])
        if key_path(home).is_file():
            key = key_path(home).read_text(encoding="utf-8").strip()
            try:
                request = urllib.request.Request(f"{url}/api/v1/healthz",
                                                 headers={"X-API-Key": key})
                with urllib.request.urlopen(request, timeout=5) as answer:
                    if answer.status == 200:
                        return server, url, key
            except OSError:
                pass
        time.sleep(0.2)
    server.terminate()
    raise SystemExit(f"the server did not answer on {url} within 120 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="math_rl")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--resume-check", action="store_true",
                        help="kill the recipe after its first checkpoint, run it again and "
                        "check that it went on from that checkpoint")
    parser.add_argument("--keep-log", type=Path, metavar="DIR",
                        help="copy the recipe's log folder (metrics.jsonl, logs.log) to DIR")
    args = parser.parse_args()
    recipe = RECIPES[args.recipe]

    python = cookbook_python(args.venv)
    versions = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(*(p + ' ' + m.version(p) "
         "for p in ('tinker', 'tinker-cookbook', 'torch', 'transformers')), sep=', ')"],
        check=True, capture_output=True, text=True).stdout.strip()
    print(f"cookbook environment: {versions}")

    with tempfile.TemporaryDirectory(prefix="zyquo-cookbook-") as scratch_name:
        scratch = Path(scratch_name)
        home, log = scratch / "home", scratch / "log"
        env = {**os.environ, "ZYQUO_HOME": str(home)}
        made = subprocess.run([sys.executable, "-m", "zyquo_tui", "sample", "--json"], cwd=REPO,
                              env=env, check=True, capture_output=True, text=True)
        model = json.loads(made.stdout)["models"]["zyquo-tiny"]
        if recipe.prepare is not None:
            recipe.prepare(python, scratch)
        server, url, key = start_server(home, args.port)
        # Killed at its first checkpoint (every 2 steps), the run must still have steps to go:
        # with a few steps a quick machine ends it before the kill lands.
        steps = max(args.steps, RESUME_CHECK_STEPS) if args.resume_check else args.steps
        command = [str(python), "-m", *recipe.arguments(model, steps, log, scratch)]
        recipe_env = {**os.environ, "TINKER_BASE_URL": url, "TINKER_API_KEY": key}
        print("recipe:", " ".join(command[2:]), flush=True)
        killed_at = None  # (checkpoint, rows logged) of the run killed for --resume-check
        try:
            if args.resume_check:
                killed_at = interrupted_after_checkpoint(command, recipe_env, log)
                if killed_at is None:
                    return 1
            started = time.perf_counter()
            finished = subprocess.run(command, env=recipe_env, stdin=subprocess.DEVNULL,
                                      capture_output=True, text=True)
            seconds = time.perf_counter() - started
            runs = subprocess.run([sys.executable, "-m", "zyquo_tui", "runs", "list", "--json"],
                                  cwd=REPO, env=env, capture_output=True, text=True).stdout
        finally:
            server.terminate()
            server.wait(timeout=30)
        print(f"recipe exit status {finished.returncode} after {seconds:.1f} s")
        if finished.returncode != 0:
            print(finished.stdout[-3000:], finished.stderr[-3000:], sep="\n")
        rows = metrics_rows(log)
        if args.keep_log is not None and log.is_dir():
            shutil.copytree(log, args.keep_log, dirs_exist_ok=True)
        shown = [name for name in recipe.shown if any(name in row for row in rows)]
        print(f"{'step':>4}  " + "  ".join(f"{name:>26}" for name in shown))
        for row in rows:
            print(f"{row.get('step', '?'):>4}  " + "  ".join(
                f"{_fmt(row.get(name)):>26}" for name in shown))
        status = 0
        if killed_at is not None:
            saved, logged = killed_at
            again = [row.get("step") for row in rows[logged:]]
            status = 0 if again and again[0] == saved.get("batch") else 1
            print(f"second run: steps {again}, "
                  + (f"went on from the checkpoint at batch {saved.get('batch')}" if status == 0
                     else f"did NOT go on from the checkpoint at batch {saved.get('batch')}"))
        print("metrics logged:", ", ".join(sorted({name for row in rows for name in row})))
        for run in json.loads(runs or "[]"):
            print(f"run in the store: {run.get('id')} {run.get('state')}, step "
                  f"{run.get('step')}, last loss {_fmt(run.get('last_train_loss'))} "
                  f"({run.get('name')})")
    return finished.returncode or status


RESUME_CHECK_STEPS = 20  # --resume-check's least max_steps


def interrupted_after_checkpoint(command: list[str], env: dict, log: Path
                                 ) -> tuple[dict, int] | None:
    """Start the recipe and kill it (SIGKILL) once its log folder records a resumable
    checkpoint: (that checkpoint, the metrics rows logged by then); the caller then runs the
    same command again. None when the recipe ended or saved none within 10 minutes."""
    first = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    saved = None
    while time.monotonic() < deadline and first.poll() is None and saved is None:
        time.sleep(0.2)
        saved = last_checkpoint(log)
    if saved is None:
        first.kill()
        first.wait()
        print(f"the first run saved no checkpoint (exit status {first.returncode})")
        return None
    first.send_signal(signal.SIGKILL)
    first.wait()
    if first.returncode != -signal.SIGKILL:
        print(f"the first run ended by itself (exit status {first.returncode}) before it could "
              "be killed at its checkpoint: nothing to resume; give more --steps")
        return None
    steps = [row.get("step") for row in metrics_rows(log)]
    print(f"first run killed after its checkpoint {saved.get('name')} (batch "
          f"{saved.get('batch')}, {saved.get('state_path')}); steps logged: {steps}",
          flush=True)
    return saved, len(steps)


def last_checkpoint(log: Path) -> dict | None:
    """The last row of the recipe's checkpoints.jsonl with a state_path (what it resumes)."""
    try:
        lines = (log / "checkpoints.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return None
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line still being written
            pass
    saved = [row for row in rows if row.get("state_path")]
    return saved[-1] if saved else None


def metrics_rows(log: Path) -> list[dict]:
    metrics = log / "metrics.jsonl"
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] \
        if metrics.exists() else []


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    sys.exit(main())
