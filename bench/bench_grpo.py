"""One GRPO step of ours against mlx-lm-lora's GRPO trainer, side by side in one process.

The same generated llama model (the sample tokenizer, random weights), LoRA on every layer,
the same prompts (sample_data/rl, rendered as every generation renders them), the same reward
(our exact_answer and length, which have mlx-lm-lora's signature), group size, answer length,
temperature, KL weight and clip. Ours: the grpo objective's step as the training loop takes it
(sampling every prompt's group at once, rewards, the reference with adapters off, one compiled
forward-backward and update), its loss sliced or whole as a run's loss_chunk_tokens auto
decides (the table's header says which). Theirs: `mlx_lm_lora.trainer.grpo_trainer.train_grpo` itself,
its reference a second copy of the base model (what it loads), its per-step time from its own
report callback at steps_per_report 1. No token ends an answer: each is exactly --tokens long
in both, the same work. Rounds alternate (ours, theirs, ours, ...); the first
step of each round is left out (compilation, first allocations); medians over the rest.
Target: ours takes at most 0.8 of its time.

A second table splits each trainer's step into its phases (medians a step): sampling the
answers, the rewards, the reference's log-probabilities, and the rest (the training forward and
backward pass and the update). Each phase is timed around the function that does it (theirs:
`generate_grpo`, `_rollout_rewards` and `_get_token_logps` of the reference, which is made to
finish there, one wait more a microbatch; ours: `complete_batch`, the rewards and the
reference's `answer_logprobs`, or `token_logprobs` for whole sequences).

    python bench/bench_grpo.py [--hidden 128] [--layers 4] [--batch 4] [--group 4]
                               [--tokens 64] [--steps 6] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RL = REPO / "sample_data" / "rl"
TEMPERATURE, BETA, EPSILON, LEARNING_RATE = 0.8, 0.1, 0.2, 1e-4
PHASES = ("sampling", "rewards", "reference", "training")


class Phases:
    """Seconds each step spends in each phase: the timed functions add to the step in
    progress; `end_step` closes it, the step's time not in a timed phase being training's."""

    def __init__(self) -> None:
        self.open: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []

    def timed(self, name: str, function, finish=None):
        def wrapper(*args, **kwargs):
            tic = time.perf_counter()
            result = function(*args, **kwargs)
            if finish is not None:
                finish(result)
            self.open[name] += time.perf_counter() - tic
            return result

        return wrapper

    def end_step(self, seconds: float) -> None:
        step = {name: self.open.get(name, 0.0) for name in PHASES[:-1]}
        step["training"] = seconds - sum(step.values())
        self.steps.append(step)
        self.open.clear()

    def medians(self, skip_first_of: int) -> dict[str, float]:
        kept = [step for i, step in enumerate(self.steps) if i % skip_first_of]
        return {name: statistics.median(step[name] for step in kept) for name in PHASES}


def build(folder: Path, hidden: int, layers: int) -> Path:
    from zyquo_tui.trainer.sample_model import build_model

    build_model(folder, hidden_size=hidden, num_layers=layers, num_heads=4, num_kv_heads=2,
                intermediate_size=hidden * 2)
    return folder


def lora_model(path: Path, layers: int):
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model, tokenizer = load(str(path))
    # No end-of-sequence token: every answer is --tokens long in both trainers, so a step's
    # work does not depend on where a random model happens to stop.
    tokenizer.eos_token_ids = set()
    model.freeze()
    mx.random.seed(0)
    linear_to_lora_layers(model, layers, {"rank": 8, "dropout": 0.0, "scale": 20.0})
    return model, tokenizer


def rows(tokenizer) -> list[dict]:
    import json

    from zyquo_tui.trainer.encoding import prompt_tokens

    out = []
    for line in (RL / "train.jsonl").read_text().splitlines():
        row = json.loads(line)
        out.append({**row, "tokens": prompt_tokens(tokenizer, row["prompt"])})
    return out


class Ours:
    def __init__(self, path: Path, args) -> None:
        import mlx.optimizers as optim

        from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters
        from zyquo_tui.trainer.distributed import World
        from zyquo_tui.trainer.engine import StepEngine
        from zyquo_tui.trainer.objectives import GrpoObjective, loss_chunk_tokens_for
        from zyquo_tui.trainer.prompt_data import PromptDataset

        self.model, tokenizer = lora_model(path, args.layers)
        hp = Hyperparameters.from_dict({"batch_size": args.batch, "max_seq_length": 2048})
        for key, value in {"objective": "grpo", "group_size": args.group,
                           "max_completion_tokens": args.tokens,
                           "sampling_temperature": TEMPERATURE, "kl_beta": BETA,
                           "clip_epsilon": EPSILON,
                           "reward_functions": ["exact_answer", "length"]}.items():
            SETTINGS[key].set(hp, value)
        prompts = rows(tokenizer)
        # The loss sliced or whole as a run's trainer decides it (loss_chunk_tokens auto).
        self.chunk_tokens = loss_chunk_tokens_for(
            hp, "lora", str(path), max(len(row["tokens"]) for row in prompts))
        self.objective = GrpoObjective(hp, self.model, str(path), self.chunk_tokens, tokenizer)
        self.engine = StepEngine(self.model, optim.Adam(learning_rate=LEARNING_RATE))
        data = PromptDataset([{"prompt": r["prompt"], "answer": r["answer"]}
                              for r in prompts], tokenizer)
        self.batches = self.objective.batches(data, World())
        self.model.train()
        self.phases = Phases()
        from zyquo_tui.trainer import grpo, objectives

        grpo.complete_batch = self.phases.timed("sampling", grpo.complete_batch)
        sampler = self.objective.sampler
        sampler._score = self.phases.timed("rewards", sampler._score)
        if sampler.reference is not None:
            assert isinstance(sampler.reference, objectives.Reference)
            for scoring in ("token_logprobs", "answer_logprobs"):
                setattr(sampler.reference, scoring, self.phases.timed(
                    "reference", getattr(sampler.reference, scoring)))

    def steps(self, count: int) -> list[float]:
        import mlx.core as mx

        times = []
        for _ in range(count):
            tic = time.perf_counter()
            batch = next(self.batches)
            self.engine.update_with_next = True
            loss, _, metrics = self.objective.forward_backward(self.engine, batch)
            self.engine.optim_step()
            mx.eval(self.engine.state, loss, metrics)
            times.append(time.perf_counter() - tic)
            self.phases.end_step(times[-1])
        return times


class Theirs:
    def __init__(self, path: Path, args, folder: Path) -> None:
        from mlx_lm import load

        from zyquo_tui.trainer.rewards import exact_answer, length

        self.model, self.tokenizer = lora_model(path, args.layers)
        self.reference, _ = load(str(path))
        self.args = args
        self.folder = folder
        self.dataset = [(r["tokens"], self.tokenizer.encode(r["answer"]), r["prompt"],
                         r["answer"]) for r in rows(self.tokenizer)]
        self.rewards = [exact_answer, length]
        self.phases = phases = Phases()
        import mlx.core as mx
        from mlx_lm_lora.trainer import grpo_trainer as trainer

        trainer.generate_grpo = phases.timed("sampling", trainer.generate_grpo)
        trainer._rollout_rewards = phases.timed("rewards", trainer._rollout_rewards)
        token_logps, timed_logps = trainer._get_token_logps, phases.timed(
            "reference", trainer._get_token_logps, finish=mx.eval)
        reference = self.reference

        def get_token_logps(model, *args, **kwargs):
            return (timed_logps if model is reference else token_logps)(model, *args, **kwargs)

        trainer._get_token_logps = get_token_logps

    def steps(self, count: int) -> list[float]:
        import mlx.optimizers as optim
        from mlx_lm.tuner.callbacks import TrainingCallback
        from mlx_lm_lora.trainer.grpo_trainer import GRPOTrainingArgs, train_grpo

        times: list[float] = []
        phases = self.phases

        class Timer(TrainingCallback):
            def on_train_loss_report(self, info):
                times.append(1 / info["iterations_per_second"])
                phases.end_step(times[-1])

        a = self.args
        train_args = GRPOTrainingArgs(
            batch_size=a.batch, iters=count, steps_per_report=1, steps_per_eval=10**9,
            steps_per_save=10**9, adapter_file=str(self.folder / "theirs.safetensors"),
            max_seq_length=2048, group_size=a.group, beta=BETA, epsilon=EPSILON,
            max_completion_length=a.tokens, temperature=TEMPERATURE, top_p=1.0, top_k=0,
            min_p=0.0)
        train_grpo(self.model, self.reference, self.tokenizer,
                   optim.Adam(learning_rate=LEARNING_RATE), self.dataset,
                   reward_funcs=self.rewards, args=train_args, training_callback=Timer(),
                   end_answer_token="")
        return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import mlx.core as mx

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = build(folder / "model", args.hidden, args.layers)
        ours, theirs = Ours(path, args), Theirs(path, args, folder)
        times: dict[str, list[float]] = {"ours": [], "mlx-lm-lora": []}
        for _ in range(args.rounds):
            for name, side in (("ours", ours), ("mlx-lm-lora", theirs)):
                mx.random.seed(1)
                times[name] += side.steps(args.steps)[1:]
    print(f"GRPO step: llama hidden {args.hidden}, {args.layers} layers, LoRA rank 8; batch "
          f"{args.batch} prompts x group {args.group}, answers up to {args.tokens} tokens; "
          f"{args.rounds} rounds of {args.steps} steps, first of each left out; "
          f"device {mx.default_device()}; our loss slices: {ours.chunk_tokens}")
    print(f"{'trainer':<12} {'median s/step':>14} {'min':>8} {'max':>8} {'steps':>6}")
    for name, values in times.items():
        print(f"{name:<12} {statistics.median(values):>14.3f} {min(values):>8.3f} "
              f"{max(values):>8.3f} {len(values):>6}")
    ratio = statistics.median(times["ours"]) / statistics.median(times["mlx-lm-lora"])
    print(f"ratio ours / mlx-lm-lora: {ratio:.2f} (target 0.80 or less)")
    print("phases, median s/step")
    print(f"{'trainer':<12} {' '.join(f'{name:>9}' for name in PHASES)}")
    for name, side in (("ours", ours), ("mlx-lm-lora", theirs)):
        medians = side.phases.medians(args.steps)
        print(f"{name:<12} {' '.join(f'{medians[phase]:>9.3f}' for phase in PHASES)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
