"""A tinker-cookbook recipe, unchanged, against `zyquo-tui serve` on the sample model.

tinker-cookbook needs torch and a transformers release mlx-lm does not accept, so it runs from a
virtual environment of its own (made here on first use: about 6 GB, a few minutes). The server
runs from this checkout's environment with a store of its own; the recipe gets nothing but
TINKER_BASE_URL, TINKER_API_KEY and its command-line arguments: the sample model's folder as
`model_name` (its tokenizer loads from there, no download) and the `role_colon` renderer.

Prints the recipe's own metrics (its log folder's metrics.jsonl) per step, and the run the
session became in our store (`runs show`), then exits 0 when the recipe finished.

    python bench/bench_tinker_cookbook.py [--venv DIR] [--recipe math_rl] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# The cookbook release this was run with, and what its math_rl recipe needs besides.
COOKBOOK = ["tinker-cookbook==0.5.8", "sympy", "pylatexenc", "math-verify"]
DEFAULT_VENV = Path.home() / ".cache" / "zyquo-tui" / "tinker-cookbook-venv"

RECIPES = {
    # Arithmetic questions, rewarded by the answer: the cookbook's smallest RL environment.
    "math_rl": lambda model, steps, log: [
        "tinker_cookbook.recipes.math_rl.train", f"model_name={model}",
        "renderer_name=role_colon", "env=arithmetic", "groups_per_batch=4", "group_size=4",
        "max_tokens=5", f"max_steps={steps}", "eval_every=0", "save_every=0", "lora_rank=8",
        "learning_rate=1e-3", f"log_path={log}", "behavior_if_log_dir_exists=delete"],
    # Supervised learning on a chat dataset from the hub is not offline; sl_basic's
    # no-robots needs a download, so math_rl is the offline recipe here.
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
    args = parser.parse_args()

    python = cookbook_python(args.venv)
    versions = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(*(p + ' ' + m.version(p) "
         "for p in ('tinker', 'tinker-cookbook', 'torch', 'transformers')), sep=', ')"],
        check=True, capture_output=True, text=True).stdout.strip()
    print(f"cookbook environment: {versions}")

    with tempfile.TemporaryDirectory(prefix="zyquo-cookbook-") as scratch:
        home, log = Path(scratch) / "home", Path(scratch) / "log"
        env = {**os.environ, "ZYQUO_HOME": str(home)}
        made = subprocess.run([sys.executable, "-m", "zyquo_tui", "sample", "--json"], cwd=REPO,
                              env=env, check=True, capture_output=True, text=True)
        model = json.loads(made.stdout)["models"]["zyquo-tiny"]
        server, url, key = start_server(home, args.port)
        try:
            command = [str(python), "-m", *RECIPES[args.recipe](model, args.steps, log)]
            print("recipe:", " ".join(command[2:]), flush=True)
            started = time.perf_counter()
            recipe = subprocess.run(command, env={**os.environ, "TINKER_BASE_URL": url,
                                                  "TINKER_API_KEY": key},
                                    stdin=subprocess.DEVNULL, capture_output=True, text=True)
            seconds = time.perf_counter() - started
            runs = subprocess.run([sys.executable, "-m", "zyquo_tui", "runs", "list", "--json"],
                                  cwd=REPO, env=env, capture_output=True, text=True).stdout
        finally:
            server.terminate()
            server.wait(timeout=30)
        print(f"recipe exit status {recipe.returncode} after {seconds:.1f} s")
        if recipe.returncode != 0:
            print(recipe.stdout[-3000:], recipe.stderr[-3000:], sep="\n")
        metrics = log / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()] \
            if metrics.exists() else []
        print(f"{'step':>4}  " + "  ".join(f"{k:>24}" for k in _shown(rows)))
        for row in rows:
            print(f"{row.get('step', '?'):>4}  " + "  ".join(
                f"{_fmt(row.get(k)):>24}" for k in _shown(rows)))
        for run in json.loads(runs or "[]"):
            print(f"run in the store: {run.get('id')} {run.get('state')}, step "
                  f"{run.get('step')}, last loss {_fmt(run.get('last_train_loss'))} "
                  f"({run.get('name')})")
    return recipe.returncode


def _shown(rows: list[dict]) -> list[str]:
    wanted = ("env/all/reward/total", "env/all/correct", "optim/lr", "progress/done_frac")
    present = {key for row in rows for key in row}
    return [key for key in wanted if key in present]


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    sys.exit(main())
