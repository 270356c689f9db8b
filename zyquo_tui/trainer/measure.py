"""`python -m zyquo_tui.trainer.measure SPEC.json`: the measured peak memory of a training config.

Runs a few real training steps of the exact config (mlx-lm's model, adapters and loss, our
`TrainingLoop` with its compiled step, grad checkpointing and accumulation) and prints, as one
JSON object on stdout, the process's peak MLX memory (`mx.get_peak_memory()`), the figure a
real run records as summary.peak_memory_bytes, and the process's peak resident footprint
(`peak_rss_bytes`, getrusage's ru_maxrss) with its footprint before the model loaded
(`start_rss_bytes`: the interpreter and the libraries, which the estimate does not count).
`peak_by_step` is each step's own peak (the first's since the process started: the loading
and preparing of the model too); the peak is their largest.

The batch it trains on is the worst one the run will meet: the `batch_size` longest rows of the
dataset (a real run's peak is set by its longest batch, which a few random steps might miss),
or, for calibration, `synthetic_tokens` random tokens per row. Nothing it writes outlives it:
the replica model and the checkpoints go to temporary folders, inside the caller's `scratch`
folder when it gives one (core/memory/measure.py does, and removes it however this process
ends: a process killed with SIGKILL removes nothing itself).

SPEC is a JSON object (or `-` for stdin):
  model, method (lora|dora|qlora|full), hyperparameters (mlx-lm names, as in run.json),
  data (a dataset folder) or synthetic_tokens (tokens per row), steps (default 3),
  extra_config (the run's pass-through mlx-lm keys, for *_feature),
  scratch (a folder the caller owns, for the temporary folders; default the system's).
A preference run (hyperparameters' zyquo_tui.objective dpo or orpo) trains pairs: its longest
pairs, or synthetic ones (each side `synthetic_tokens` long, a quarter of it prompt). A grpo run
samples answers to its longest prompts (or to synthetic prompts `synthetic_tokens` long) and
trains on them, as its steps do; each answer runs to max_completion_tokens (no end-of-sequence
token stops it), the widest step the run can meet.
(Every row's token count comes from `python -m zyquo_tui.trainer.token_stats --lengths`.)
Exit status: 0 with the JSON result, 1 with {"error": sentence} when training could not run.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from zyquo_tui.core.runs.problems import errors_in
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.system.entry_points import MEASURE, usage
from zyquo_tui.core.system.machine import peak_resident_bytes, resident_bytes
from zyquo_tui.trainer.loading import prepare_model
from zyquo_tui.trainer.step_hold import hold_measurement
from zyquo_tui.trainer.trainer_failure import TrainerFailure, fail


class _Rows:
    """The few rows the measurement trains on, in the shape mlx-lm's CacheDataset has."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def itemlen(self, index: int) -> int:
        row = self.rows[index]
        if hasattr(row, "tokens"):  # a grpo run's prompt (prompt_data.PromptRow)
            return len(row.tokens)
        if isinstance(row, tuple) and isinstance(row[0], tuple):  # a preference pair
            return max(len(row[0][0]), len(row[1][0]))
        return len(row[0] if isinstance(row, tuple) else row)

    def __getitem__(self, index: int) -> Any:
        return self.rows[index]

    def __len__(self) -> int:
        return len(self.rows)


def _run_of(spec: dict[str, Any]) -> Run:
    """The run a measurement's spec describes, as it stands (its settings were checked where
    the spec was made), through the one road to a Run."""
    from zyquo_tui.core.setup.draft import RunDraft

    hp = Hyperparameters.from_dict(spec.get("hyperparameters") or {})
    draft = RunDraft(model_path=spec["model"], data_path=spec.get("data") or "",
                     chosen_method=Method(spec["method"]), hyperparameters=hp,
                     extra_config=dict(spec.get("extra_config") or {}))
    return draft.to_run(check=False)


def _vocab_size(tokenizer, spec: dict[str, Any]) -> int:
    """How many token ids synthetic rows may draw from: the replica's vocabulary, else the
    tokenizer's."""
    return int(spec.get("synthetic_vocab") or 0) or max(
        int(getattr(tokenizer, "vocab_size", 0) or 0), 16)


def _worst_batch(run: Run, tokenizer, spec: dict[str, Any]) -> tuple[list[Any], list[int] | None]:
    """The rows of the batch with the longest sequences, and every row's token count."""
    from zyquo_tui.core.runs.settings import PREFERENCE_OBJECTIVES, SETTINGS
    from zyquo_tui.trainer import loading

    batch_size = run.hyperparameters.batch_size
    objective = SETTINGS["objective"].get(run.hyperparameters)
    preference = objective in PREFERENCE_OBJECTIVES
    if objective == "grpo":  # prompts: the longest, or synthetic ones of that many tokens
        from zyquo_tui.trainer.prompt_data import PromptRow

        if spec.get("synthetic_tokens"):
            length = int(spec["synthetic_tokens"])
            vocab = _vocab_size(tokenizer, spec)  # token ids the model has, however long
            prompt = [5 + i % (vocab - 5) for i in range(length)]
            return [PromptRow(list(prompt), "", "0") for _ in range(batch_size)], None
        dataset, _, _, lengths, _ = loading.load_prompt_data(run, tokenizer)
        longest = sorted(range(len(lengths)), key=lambda i: lengths[i],
                         reverse=True)[:batch_size]
        return [dataset[i] for i in longest], lengths
    if spec.get("synthetic_tokens"):
        import numpy as np

        length = int(spec["synthetic_tokens"])
        vocab = _vocab_size(tokenizer, spec)
        rng = np.random.default_rng(0)

        def row():
            return rng.integers(5, vocab, size=length).tolist()

        if preference:  # chosen and rejected, the prompt (a quarter) masked on both
            return [((row(), length // 4), (row(), length // 4))
                    for _ in range(batch_size)], None
        return [row() for _ in range(batch_size)], None
    if preference:
        dataset, _, _, lengths, _ = loading.load_preference_data(run, tokenizer)
        longest = sorted(range(len(lengths)), key=lambda i: lengths[i],
                         reverse=True)[:batch_size]
        return [dataset[i] for i in longest], lengths
    from mlx_lm.tuner.datasets import CacheDataset

    train_rows, _, _ = loading.load_datasets(run, tokenizer)
    dataset = CacheDataset(train_rows)
    lengths = loading.tokenize_all(dataset, Path(run.data) / "train.jsonl")
    longest = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)[:batch_size]
    return [dataset[i] for i in longest], lengths


def _temporary_folder(spec: dict[str, Any], prefix: str) -> tempfile.TemporaryDirectory:
    """A folder removed when the measurement ends; inside the caller's `scratch`, which the
    caller removes too, so that a killed measurement leaves nothing behind."""
    return tempfile.TemporaryDirectory(prefix=prefix, dir=spec.get("scratch"))


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Train `steps` steps of the spec's config on its worst batch; return the figures. With
    `replica` (core/memory/replica.py), train a replica of the model built in a temporary
    folder instead."""
    replica = spec.get("replica")
    if not replica:
        return _measure(spec)
    from zyquo_tui.trainer.replica import build_replica

    with _temporary_folder(spec, "zyquo-replica-") as folder:
        weights = build_replica(replica["config"], replica["dtype"], Path(spec["model"]),
                                Path(folder))
        vocab = int(replica["config"]["vocab_size"])
        import mlx.core as mx

        mx.reset_peak_memory()  # the building is not the replica's training
        result = _measure({**spec, "model": folder, "synthetic_vocab": vocab})
    return {**result, "model_weights_bytes": weights}


def _measure(spec: dict[str, Any]) -> dict[str, Any]:
    from zyquo_tui.trainer import loading

    run = _run_of(spec)
    errors = errors_in(run.problems())
    if errors:
        raise fail("config", errors[0].sentence)
    started = time.perf_counter()
    loading.import_training_libraries()  # the footprint before the model is not training's

    start_rss = resident_bytes()
    model, tokenizer = loading.load_model(run)

    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten

    hp = run.hyperparameters
    rows, lengths = _worst_batch(run, tokenizer, spec)
    mx.random.seed(hp.seed)
    np.random.seed(hp.seed)
    weights_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    optimizer = prepare_model(model, run)
    loaded_bytes = int(mx.get_active_memory())
    ready_rss = loading.ready_resident_bytes(start_rss)

    from zyquo_tui.trainer.loop import LoopHooks, TrainingLoop

    steps = max(int(spec.get("steps", 3)), 2 * hp.grad_accumulation_steps)
    # The run's own settings, but only `steps` steps, a report each, no validation or save.
    settings = dataclasses.replace(hp, iters=steps, val_batches=0, steps_per_report=1,
                                   steps_per_eval=steps + 1, save_every=steps + 1)
    peaks: list[int] = []
    speeds: list[float] = []  # tokens per second of each step (the first compiles)

    def on_train(info: dict[str, Any]) -> None:
        peaks.append(info["peak_memory_bytes"])
        speeds.append(info["tokens_per_second"])
        mx.reset_peak_memory()  # each step's own peak (the first's includes the loading)

    with _temporary_folder(spec, "zyquo-measure-") as adapters:
        hooks = LoopHooks(
            on_train=on_train,
            on_val=lambda info: None, on_checkpoint=lambda info: None,
        )
        from zyquo_tui.trainer.objectives import loss_chunk_tokens_for, objective_for

        chunk_tokens = loss_chunk_tokens_for(settings, run.method, run.model,
                                             max(lengths) if lengths else None)
        loop = TrainingLoop(model, optimizer, _Rows(rows), [], settings, Path(adapters), hooks,
                            objective_for(settings, model, run.model, chunk_tokens, tokenizer))
        sampler = getattr(loop.objective, "sampler", None)
        if sampler is not None:  # a grpo run's widest step: every answer as long as it may be
            sampler.stop = []
        first = loop.batches._make_batch(list(range(hp.batch_size)))
        # (a grpo batch is prompts: its width is known once their answers are sampled)
        width = int(first[0].shape[1]) if hasattr(first[0], "shape") else None
        loop.run()
        width = width or getattr(loop.objective, "widest", None)
    trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    return {
        "peak_memory_bytes": max(peaks) if peaks else int(mx.get_peak_memory()),
        "peak_by_step": peaks,
        "peak_rss_bytes": peak_resident_bytes(),
        "start_rss_bytes": start_rss,
        "ready_rss_bytes": ready_rss,
        "loaded_bytes": loaded_bytes,
        "model_weights_bytes": int(weights_bytes),
        "batch_width": width,
        "steps": steps,
        "trainable_parameters": int(trainable),
        "device": str(mx.default_device()),
        "longest_row_tokens": max(lengths) if lengths else None,
        "seconds": round(time.perf_counter() - started, 2),
        "tokens_per_second": sorted(speeds[1:] or speeds)[len(speeds[1:] or speeds) // 2]
        if speeds else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: {usage(MEASURE)} SPEC.json", file=sys.stderr)
        return 2
    try:
        text = sys.stdin.read() if args[0] == "-" else Path(args[0]).read_text(encoding="utf-8")
        spec = json.loads(text)
        hold_measurement()  # tests only (trainer/step_hold.py)
        result = measure(spec)
    except TrainerFailure as error:
        result = {"error": error.failure.message, "cause": error.failure.cause}
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
        return 1
    except (OSError, ValueError, KeyError) as error:
        json.dump({"error": f"The measurement could not run: {error}."}, sys.stdout)
        sys.stdout.write("\n")
        return 1
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
