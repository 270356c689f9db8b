"""Distillation: a student learns a teacher's next-token distributions.

    python examples/distill.py --model zyquo-tiny --teacher-out /tmp/zyquo-teacher

Builds a second, wider sample model with the same tokenizer as the teacher (offline, seconds),
then trains LoRA adapters on the student (`--model`) to match the teacher on the sample
completions at temperature 2: the KL(teacher || student) printed falls.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from zyquo_tui.client import TrainingBatch, TrainingClient
from zyquo_tui.resources import sample_data_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="zyquo-tiny")
    parser.add_argument("--teacher-out", type=Path, default=Path("zyquo-teacher"))
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    with TrainingClient.from_model(args.model, method="lora", learning_rate=2e-3,
                                   num_layers=-1) as student:
        teacher = build_teacher(student.model_path, args.teacher_out)
        train = sample_data_dir() / "completions" / "train.jsonl"
        rows = [json.loads(line) for line in train.read_text().splitlines()[:8]]
        batch = TrainingBatch([r["prompt"] for r in rows], [r["completion"] for r in rows],
                              loss_type="distill",
                              extra={"teacher": str(teacher), "temperature": 2.0})
        for _ in range(args.steps):
            result = student.forward_backward(batch)
            step = student.optim_step().result()  # submitted before waiting: one step
            kl = result.result().loss
            print(f"step {step.step}: KL(teacher || student) {kl:.4f}")


def build_teacher(student: Path, out: Path) -> Path:
    """A wider random llama with the student's tokenizer (the sample model builder)."""
    import subprocess
    import sys

    code = ("import sys; from zyquo_tui.trainer.sample_model import build_model; "
            "build_model(sys.argv[1], hidden_size=128, intermediate_size=256, num_layers=2, "
            "seed=1, tokenizer_dir=sys.argv[2])")
    # In its own process: this one's MLX belongs to the client's thread.
    subprocess.run([sys.executable, "-c", code, str(out), str(student)], check=True)
    return out


if __name__ == "__main__":
    main()
