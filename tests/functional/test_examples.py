"""The runnable examples of the step-level client (examples/), each run as a user runs it."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO


def run_example(name: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "examples" / name), *args],
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_sft_loop_saves_and_goes_on_after_loading(tiny_model, tmp_path):
    out = run_example("sft_loop.py", "--model", str(tiny_model), "--steps", "8",
                      "--out", str(tmp_path / "state"))
    steps = [int(s) for s in re.findall(r"^step (\d+):", out, flags=re.M)]
    assert steps == list(range(1, 9))
    assert "saved step 4" in out and "loaded step 4 (16 rows seen)" in out
    assert (tmp_path / "state" / "0000004_state.json").is_file()


def test_the_reinforce_loop_samples_scores_and_steps(tiny_model):
    out = run_example("reinforce_loop.py", "--model", str(tiny_model), "--iterations", "3",
                      "--warmup-steps", "5")
    rewards = [float(r) for r in re.findall(r"mean reward ([\d.]+)", out)]
    assert len(rewards) == 3 and all(0 <= r <= 1 for r in rewards)
    # Each iteration steps on its rewards, or says it took no step (all advantages 0).
    iterations = [line for line in out.splitlines() if line.startswith("iteration")]
    assert all((", loss " in line) != (", no step " in line) for line in iterations)


def test_distillation_from_a_second_sample_model_lowers_the_kl(tiny_model, tmp_path):
    out = run_example("distill.py", "--model", str(tiny_model), "--teacher-out",
                      str(tmp_path / "teacher"), "--steps", "6")
    kls = [float(k) for k in re.findall(r"KL\(teacher \|\| student\) ([\d.]+)", out)]
    assert len(kls) == 6 and kls[0] > 0.01 and kls[-1] < kls[0]
