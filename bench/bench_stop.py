"""How soon does a trainer stop when asked? Seconds from the signal to the exit, as a table.

    python bench/bench_stop.py [--repeat 3]

- SIGTERM to a training run of the sample model: it finishes the step, saves a checkpoint and
  exits (target: under 10 s here).
- A second signal while the first one waits on a long step: it exits at once (target: under
  2 s). tests/functional/test_trainer.py checks both behaviours without timing them.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from helpers import make_run

from zyquo_tui.core.events.protocol import EventReader
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.trainer.sample_model import build_sample_models

COMPLETIONS = REPO / "sample_data" / "completions"

SECOND_SIGNAL_PROBE = """
import time
from zyquo_tui.trainer.__main__ import StopRequest
stop = StopRequest()
stop.install()
print("ready", flush=True)
while not stop.requested:
    time.sleep(0.01)
print("asked to stop", flush=True)
time.sleep(60)
"""


def wait_for_step(run_dir: Path, step: int, timeout: float = 300) -> None:
    reader = EventReader(run_dir / "events.jsonl")
    deadline = time.monotonic() + timeout
    while not any(e["type"] == "train" and e["iteration"] >= step for e in reader.read_new()):
        if time.monotonic() > deadline:
            raise SystemExit(f"the trainer in {run_dir} did not reach step {step}")
        time.sleep(0.02)


def sigterm_seconds(model: Path, home: Path) -> float:
    store = RunStore(home)
    _, run = make_run(model, COMPLETIONS, store=store, iters=100000, steps_per_report=1,
                      save_every=100000, steps_per_eval=100000)
    run_dir = store.run_dir(run.id)
    with open(run_dir / "trainer.log", "ab") as log:
        trainer = subprocess.Popen([sys.executable, "-m", "zyquo_tui.trainer", str(run_dir)],
                                   stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, cwd=REPO)
    try:
        wait_for_step(run_dir, 3)
        asked = time.monotonic()
        trainer.send_signal(signal.SIGTERM)
        trainer.wait(timeout=120)
        return time.monotonic() - asked
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()


def second_signal_seconds() -> float:
    probe = subprocess.Popen([sys.executable, "-c", SECOND_SIGNAL_PROBE], stdout=subprocess.PIPE,
                             text=True, stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        probe.stdout.readline()
        probe.send_signal(signal.SIGTERM)
        probe.stdout.readline()
        asked = time.monotonic()
        probe.send_signal(signal.SIGINT)
        probe.wait(timeout=30)
        return time.monotonic() - asked
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zyquo-bench-stop-") as folder:
        models = build_sample_models(Path(folder) / "models")
        home = Path(folder) / "home"
        term = [sigterm_seconds(models["zyquo-tiny"], home) for _ in range(args.repeat)]
    second = [second_signal_seconds() for _ in range(args.repeat)]
    print(f"{'stop':<34} {'median s':>9} {'max s':>7} {'target s':>9}")
    for name, values, target in (("SIGTERM: finish the step and save", term, 10),
                                 ("second signal during a long step", second, 2)):
        print(f"{name:<34} {statistics.median(values):>9.2f} {max(values):>7.2f} {target:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
