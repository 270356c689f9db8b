"""The training loop: mlx-lm's `train()` step for step, plus events, cancel, NaN stop and resume.

mlx-lm 0.32's `train()` cannot start at step k, cannot stop cleanly and cannot say where its
data iterator is, so this module repeats its loop (same loss, same update, same validation, same
order of random draws) and adds those. Each step goes through the step engine
(trainer/engine.py), the one the step-level client trains with. tests/test_trainer.py checks that the
losses equal the ones mlx-lm's own `train()` reports for the same config.

Iteration numbers: a `train` event at iteration k covers steps up to and including k; a `val`
event at iteration k was measured during step k, before that step's update (mlx-lm's callback
reports the same validation as k - 1). See docs/EVENTS.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.tuner.trainer import default_loss, evaluate, grad_checkpoint
from mlx_lm.utils import maybe_set_recommended_wired_limit

from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters
from zyquo_tui.trainer.batches import BatchStream
from zyquo_tui.trainer.chunked_loss import loss_slicing, with_slices
from zyquo_tui.trainer.engine import StepEngine
from zyquo_tui.trainer.loading import fail
from zyquo_tui.trainer.losses import sft_objective, sft_validation_loss


@dataclass
class LoopHooks:
    """Where the loop reports to. `should_stop` is polled after every step; so is
    `should_save(step)`, which asks for a checkpoint of that step besides the save_every ones
    (early stopping keeps each new best validation step)."""

    on_train: Callable[[dict[str, Any]], None]
    on_val: Callable[[dict[str, Any]], None]
    on_checkpoint: Callable[[dict[str, Any]], None]
    should_stop: Callable[[], bool] = lambda: False
    should_save: Callable[[int], bool] = lambda step: False


@dataclass
class LoopResult:
    step: int
    stopped: bool  # True when should_stop ended it before iters
    checkpoint: dict[str, Any] | None = None
    val_losses: dict[int, float] = field(default_factory=dict)


class TrainingLoop:
    """Runs steps `start + 1 .. iters` of one training run, from the run's settings (the ones
    its config.yaml holds: batch size, iters, report, validation and save intervals, max_seq_length,
    grad checkpointing and accumulation), saving checkpoints in `adapters`."""

    def __init__(self, model: nn.Module, optimizer, train_set, val_set,
                 settings: Hyperparameters, adapters: Path, hooks: LoopHooks) -> None:
        self.model = model
        self.optimizer = optimizer
        self.train_set = train_set
        self.val_set = val_set
        self.settings = settings
        self.adapters = adapters
        self.hooks = hooks
        self.batches = BatchStream(train_set, settings.batch_size, settings.max_seq_length)
        self.start_step = 0
        self.step = 0  # the step in progress or last finished
        # Running sums between reports, as in mlx-lm; saved with each checkpoint so a resumed
        # run reports exactly the figures an uninterrupted one would.
        self.loss_sum: Any = 0
        self.tokens_since_report = 0
        self.steps_since_report = 0
        self.time_since_report = 0.0
        self.trained_tokens = 0
        self.engine = StepEngine(model, optimizer)
        # The sliced loss (trainer/chunked_loss.py) unless the run turned it off or the model
        # cannot have it; `loss_slicing_note` says why it could not.
        self.sliced, self.loss_slicing_note = loss_slicing(
            model, SETTINGS["loss_chunk_tokens"].get(settings))
        self.sliced_objective = with_slices(sft_objective, self.sliced) if self.sliced else None

    @property
    def loss_chunk_tokens(self) -> int | str:
        """What the run trains with: tokens per slice of the loss, or "off"."""
        return self.sliced.chunk_tokens if self.sliced else "off"

    def _objective(self, tokens: mx.array):
        if self.sliced is not None and self.sliced.worth_it(tokens):
            return self.sliced_objective
        return sft_objective

    # -- resume ------------------------------------------------------------------------------

    def restore(self, step: int) -> None:
        """Continue from the checkpoint of `step`: weights, optimizer, RNG, data position, sums."""
        try:
            meta, loss_sum = self.engine.load_state(self.adapters, step)
        except FileNotFoundError:
            raise fail("config", f"Step {step} has no saved trainer state in {self.adapters}.",
                       "resume from a step listed by `zyquo-tui runs show ID`") from None
        # Iteration `step` was the (step % accumulation)-th of the pending update.
        self.engine.pending = step % self.settings.grad_accumulation_steps
        if self.engine.pending == 0:
            self.engine.grad_sum = None
        try:
            self.batches.restore(meta["data"])
        except (KeyError, ValueError) as error:
            reason = error if isinstance(error, ValueError) else "it holds no data position"
            raise fail("data", f"Cannot resume exactly: {reason}.",
                       "fork a new run from this checkpoint instead (a warm start)") from None
        sums = meta["sums"]
        self.loss_sum = loss_sum
        self.tokens_since_report = sums["tokens_since_report"]
        self.steps_since_report = sums["steps_since_report"]
        self.time_since_report = sums["time_since_report"]
        self.trained_tokens = sums["trained_tokens"]
        self.start_step = self.step = step

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> LoopResult:
        s = self.settings
        maybe_set_recommended_wired_limit()
        if s.grad_checkpoint:
            grad_checkpoint(self.model.layers[0])
        engine, model = self.engine, self.model
        accum_steps = s.grad_accumulation_steps

        model.train()
        result = LoopResult(step=self.start_step, stopped=False)
        for it in range(self.start_step + 1, s.iters + 1):
            self.step = it
            batch = next(self.batches)  # fetched before validation, as mlx-lm's zip() does
            tic = time.perf_counter()
            if self.val_set and (it == 1 or it % s.steps_per_eval == 0 or it == s.iters):
                val_loss, val_time = self._validate()
                result.val_losses[it] = val_loss
                self.hooks.on_val({"iteration": it, "val_loss": val_loss, "val_time": val_time})
                tic = time.perf_counter()

            lvalue, toks, _ = engine.forward_backward(self._objective(batch[0]), *batch)
            if it % accum_steps == 0:
                engine.optim_step()
            self.loss_sum += lvalue
            self.tokens_since_report += toks
            self.steps_since_report += 1
            mx.eval(engine.state, self.loss_sum, self.tokens_since_report, engine.grad_sum)
            self.time_since_report += time.perf_counter() - tic
            result.step = it

            loss_now = lvalue.item()
            if not math.isfinite(loss_now):
                raise fail("nan", f"The training loss became {loss_now} at step {it}; the run was "
                           "stopped there and the weights of that step were not saved.")

            if it % s.steps_per_report == 0 or it == s.iters:
                self._report(it)

            stopping = it < s.iters and self.hooks.should_stop()
            if (it % s.save_every == 0 or it == s.iters or stopping
                    or self.hooks.should_save(it)):
                result.checkpoint = self.save(it, result.val_losses.get(it))
            if stopping:
                result.stopped = True
                break
        return result

    def _validate(self) -> tuple[float, float]:
        s = self.settings
        tic = time.perf_counter()
        loss = default_loss if self.sliced is None else partial(sft_validation_loss,
                                                                sliced=self.sliced)
        val_loss = evaluate(
            model=self.model, dataset=self.val_set, loss=loss,
            batch_size=s.batch_size, num_batches=s.val_batches,
            max_seq_length=s.max_seq_length,
        )
        self.model.train()
        return val_loss, time.perf_counter() - tic

    def _report(self, it: int) -> None:
        train_loss = float(mx.array(self.loss_sum).item()) / self.steps_since_report
        n_tokens = int(mx.array(self.tokens_since_report).item())
        elapsed = max(self.time_since_report, 1e-9)
        self.trained_tokens += n_tokens
        self.hooks.on_train({
            "iteration": it,
            "train_loss": train_loss,
            "learning_rate": float(self.optimizer.learning_rate.item()),
            "iterations_per_second": self.steps_since_report / elapsed,
            "tokens_per_second": n_tokens / elapsed,
            "trained_tokens": self.trained_tokens,
            "peak_memory_bytes": int(mx.get_peak_memory()),
        })
        self.loss_sum = 0
        self.tokens_since_report = 0
        self.steps_since_report = 0
        self.time_since_report = 0.0

    def save(self, it: int, val_loss: float | None) -> dict[str, Any]:
        weights = self.engine.trainable_weights()
        finite = mx.all(mx.stack([mx.all(mx.isfinite(w)) for w in weights.values()]))
        if not finite.item():
            raise fail("nan", f"The weights became infinite or NaN at step {it}; the run was "
                       "stopped there and the weights of that step were not saved.")
        meta = {
            "data": self.batches.position(),
            "sums": {
                "tokens_since_report": int(mx.array(self.tokens_since_report).item()),
                "steps_since_report": self.steps_since_report,
                "time_since_report": self.time_since_report,
                "trained_tokens": self.trained_tokens,
            },
        }
        written = self.engine.save_state(self.adapters, it, meta, loss_sum=self.loss_sum)
        info = {"iteration": it, **written}
        if val_loss is not None:
            info["val_loss"] = val_loss
        self.hooks.on_checkpoint(info)
        return info
