"""The training loop: mlx-lm's `train()` step for step, plus events, cancel, NaN stop and resume.

mlx-lm 0.32's `train()` cannot start at step k, cannot stop cleanly and cannot say where its
data iterator is, so this module repeats its loop (same loss, same update, same validation, same
order of random draws) and adds those. Each step goes through the step engine
(trainer/engine.py), the one the step-level client trains with. tests/functional/test_trainer.py checks
that the losses equal the ones mlx-lm's own `train()` reports for the same config.

Iteration numbers: a `train` event at iteration k covers steps up to and including k; a `val`
event at iteration k was measured during step k, before that step's update (mlx-lm's callback
reports the same validation as k - 1). See docs/EVENTS.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map
from mlx_lm.tuner.trainer import grad_checkpoint
from mlx_lm.utils import maybe_set_recommended_wired_limit

from zyquo_tui.core.events.protocol import RANK_PEAKS
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters
from zyquo_tui.trainer.distributed import World
from zyquo_tui.trainer.engine import StepEngine
from zyquo_tui.trainer.memory_limit import MemoryLimit
from zyquo_tui.trainer.objectives import SftObjective
from zyquo_tui.trainer.trainer_failure import fail


@dataclass
class LoopHooks:
    """Where the loop reports to. `after_step(step)` hears each step done (its update made,
    before its checkpoint); `should_stop` is polled after every step; so is
    `should_save(step)`, which asks for a checkpoint of that step besides the save_every ones
    (early stopping keeps each new best validation step, best_by eval each evaluated one)."""

    on_train: Callable[[dict[str, Any]], None]
    on_val: Callable[[dict[str, Any]], None]
    on_checkpoint: Callable[[dict[str, Any]], None]
    should_stop: Callable[[], bool] = lambda: False
    should_save: Callable[[int], bool] = lambda step: False
    after_step: Callable[[int], None] = lambda step: None


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
                 settings: Hyperparameters, adapters: Path, hooks: LoopHooks,
                 objective=None, world: World | None = None,
                 memory_limit: MemoryLimit | None = None) -> None:
        # Several ranks (mlx.launch): each trains its share of every batch, the engine
        # averages their gradients, reports sum their figures and only rank 0 saves.
        self.world = world = world or World()
        self.model = model
        self.optimizer = optimizer
        self.train_set = train_set
        self.val_set = val_set
        self.settings = settings
        self.adapters = adapters
        self.hooks = hooks
        # What the run learns: mlx-lm's SFT unless told (trainer/objectives.py).
        self.objective = objective or SftObjective(settings, model)
        self.batches = self.objective.batches(train_set, world)
        self.start_step = 0
        self.step = 0  # the step in progress or last finished
        # Running sums between reports, as in mlx-lm; saved with each checkpoint so a resumed
        # run reports exactly the figures an uninterrupted one would.
        self.loss_sum: Any = 0
        self.tokens_since_report = 0
        self.steps_since_report = 0
        self.time_since_report = 0.0
        self.trained_tokens = 0
        self.metric_sums: dict[str, Any] = {}  # the objective's metrics since the last report
        self.engine = StepEngine(model, optimizer)
        self.memory_limit = memory_limit or MemoryLimit(None)
        # Checkpoints by the clock too (save_every_minutes), so a death loses little.
        minutes = SETTINGS["save_every_minutes"].get(settings)
        self.save_interval = float(minutes) * 60 if minutes else None
        self.saved_at = time.monotonic()

    # -- resume ------------------------------------------------------------------------------

    def restore(self, step: int) -> None:
        """Continue from the checkpoint of `step`: weights, optimizer, RNG, data position, sums."""
        objective_tensors: dict[str, Any] = {}
        try:
            meta, loss_sum = self.engine.load_state(self.adapters, step, objective_tensors)
        except FileNotFoundError:
            raise fail("config", f"Step {step} has no saved trainer state in {self.adapters}.",
                       "resume from a step listed by `zyquo-tui runs show ID`") from None
        # Iteration `step` was the (step % accumulation)-th of the pending update.
        self.engine.pending = step % self.settings.grad_accumulation_steps
        if self.engine.pending == 0 or not self.world.primary:
            self.engine.grad_sum = None  # (a distributed checkpoint's are rank 0's: see save)
        saved_world = int(meta.get("world_size", 1))
        if saved_world != self.world.size:
            raise fail("config", f"Step {step} was saved by {saved_world} process"
                       f"{'es' if saved_world > 1 else ''} and this run has {self.world.size} "
                       "now, so it cannot resume exactly.",
                       "resume with the hosts (or --ranks) it had, or fork a new run from "
                       "this checkpoint (a warm start)")
        try:
            packed = bool(meta.get("data", {}).get("packed"))
            if packed != bool(getattr(self.objective, "pack", False)) \
                    and hasattr(self.objective, "pack"):
                # A resume continues the way its checkpoint trained (a run made before
                # packing existed, or with it turned off, goes on unpacked, and so on).
                self.batches = self.objective.batches(self.train_set, self.world, pack=packed)
            self.batches.restore(meta["data"])
        except (KeyError, ValueError) as error:
            reason = error if isinstance(error, ValueError) else "it holds no data position"
            raise fail("data", f"Cannot resume exactly: {reason}.",
                       "fork a new run from this checkpoint instead (a warm start)") from None
        sums = meta["sums"]
        # A distributed checkpoint holds the sums of all ranks (see save): rank 0 carries them.
        self.loss_sum = loss_sum if self.world.primary else 0
        self.tokens_since_report = sums["tokens_since_report"] if self.world.primary else 0
        self.steps_since_report = sums["steps_since_report"]
        self.time_since_report = sums["time_since_report"]
        self.trained_tokens = sums["trained_tokens"]
        self.metric_sums = dict(sums.get("metric_sums", {})) if self.world.primary else {}
        restore_state = getattr(self.objective, "restore_state", None)
        if restore_state is not None:
            restore_state(meta.get("objective", {}), objective_tensors)
        self.start_step = self.step = step

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> LoopResult:
        s = self.settings
        maybe_set_recommended_wired_limit()
        self.memory_limit.apply()
        if s.grad_checkpoint:
            grad_checkpoint(self.model.layers[0])
        engine, model = self.engine, self.model
        accum_steps = s.grad_accumulation_steps

        model.train()
        result = LoopResult(step=self.start_step, stopped=False)
        for it in range(self.start_step + 1, s.iters + 1):
            self.step = self.objective.step = it  # (a grpo run's failing reward names it)
            batch = next(self.batches)  # fetched before validation, as mlx-lm's zip() does
            tic = time.perf_counter()
            if self.val_set and (it == 1 or it % s.steps_per_eval == 0 or it == s.iters):
                val_loss, val_time, val_metrics = self._validate()
                result.val_losses[it] = val_loss
                self.hooks.on_val({"iteration": it, "val_loss": val_loss, "val_time": val_time,
                                   **val_metrics})
                tic = time.perf_counter()

            # The update follows at once: the engine compiles the two together (less memory).
            # (Micro-batches are several forward_backward calls: never compiled with it.)
            engine.update_with_next = it % accum_steps == 0 and \
                getattr(self.objective, "micro_batches", 1) == 1
            lvalue, toks, metrics = self.objective.forward_backward(engine, batch)
            if it % accum_steps == 0:
                engine.optim_step()
            self.loss_sum += lvalue
            self.tokens_since_report += toks
            self.steps_since_report += 1
            for name in self.objective.metric_names:
                self.metric_sums[name] = self.metric_sums.get(name, 0) + metrics[name]
            mx.eval(engine.state, self.loss_sum, self.tokens_since_report, engine.grad_sum,
                    self.metric_sums)
            self.time_since_report += time.perf_counter() - tic
            self.memory_limit.check(it, self.world)
            result.step = it

            loss_now = lvalue.item()
            if not math.isfinite(loss_now):
                raise fail("nan", f"The training loss became {loss_now} at step {it}; the run was "
                           "stopped there and the weights of that step were not saved.")

            if it % s.steps_per_report == 0 or it == s.iters:
                self._report(it)
            self.hooks.after_step(it)

            # The ranks stop together: a cancel reaches each at its own moment.
            stopping = it < s.iters and self.world.any(self.hooks.should_stop())
            if (it % s.save_every == 0 or it == s.iters or stopping
                    or self.hooks.should_save(it) or self._save_due()):
                result.checkpoint = self.save(it, result.val_losses.get(it))
            if stopping:
                result.stopped = True
                break
        return result

    def _save_due(self) -> bool:
        """save_every_minutes have passed since the last checkpoint (rank 0's clock decides
        for every rank: they save together)."""
        if self.save_interval is None:
            return False
        return self.world.any(time.monotonic() - self.saved_at >= self.save_interval)

    def _validate(self) -> tuple[float, float, dict[str, float]]:
        tic = time.perf_counter()
        val_loss, metrics = self.objective.validate(self.model, self.val_set)
        return val_loss, time.perf_counter() - tic, metrics

    def _report(self, it: int) -> None:
        loss_sum, tokens = self.loss_sum, self.tokens_since_report
        metric_sums = self.metric_sums
        if self.world.distributed:  # as mlx-lm reports: the mean over every rank's steps
            loss_sum = self.world.sum(mx.array(loss_sum))
            tokens = self.world.sum(mx.array(tokens))
            metric_sums = self._summed_over_ranks(metric_sums)
        rank_steps = self.steps_since_report * self.world.size
        train_loss = float(mx.array(loss_sum).item()) / rank_steps
        n_tokens = int(mx.array(tokens).item())
        elapsed = max(self.time_since_report, 1e-9)
        self.trained_tokens += n_tokens
        peak = int(mx.get_peak_memory())
        # Every rank's peak (a collective: each rank reports at the same steps), so the hosts
        # of a distributed run each show their own.
        rank_peaks = {RANK_PEAKS: self.world.each(peak)} if self.world.distributed else {}
        shape = getattr(self.objective, "shape_report", lambda info: info)
        self.hooks.on_train(shape({
            "iteration": it,
            "train_loss": train_loss,
            "learning_rate": float(self.optimizer.learning_rate.item()),
            "iterations_per_second": self.steps_since_report / elapsed,
            "tokens_per_second": n_tokens / elapsed,
            "trained_tokens": self.trained_tokens,
            "peak_memory_bytes": peak,
            **{name: float(mx.array(total).item()) / rank_steps
               for name, total in metric_sums.items()},
            **rank_peaks,
        }))
        self.metric_sums = {}
        self.loss_sum = 0
        self.tokens_since_report = 0
        self.steps_since_report = 0
        self.time_since_report = 0.0

    def _summed_over_ranks(self, sums: dict[str, Any]) -> dict[str, mx.array]:
        """Each metric's sum over every rank (each holds its own rows' sums): the same
        collectives in the same order on every rank, evaluated at once so none is left lazy."""
        totals = {name: self.world.sum(mx.array(sums.get(name, 0), dtype=mx.float32))
                  for name in self.objective.metric_names}
        mx.eval(totals)
        return totals

    def save(self, it: int, val_loss: float | None) -> dict[str, Any]:
        self.saved_at = time.monotonic()
        weights = self.engine.trainable_weights()
        finite = mx.all(mx.stack([mx.all(mx.isfinite(w)) for w in weights.values()]))
        if not finite.item():
            raise fail("nan", f"The weights became infinite or NaN at step {it}; the run was "
                       "stopped there and the weights of that step were not saved.")
        loss_sum, tokens = self.loss_sum, self.tokens_since_report
        metric_sums = self.metric_sums
        if self.world.distributed:
            # Every rank's running sums, so a resume reports what an uninterrupted run would.
            loss_sum = self.world.sum(mx.array(loss_sum, dtype=mx.float32))
            tokens = self.world.sum(mx.array(tokens))
            mx.eval(loss_sum, tokens)  # on every rank: a collective left lazy blocks the others
            metric_sums = self._summed_over_ranks(metric_sums)
        meta = {
            "data": self.batches.position(),
            "sums": {
                "tokens_since_report": int(mx.array(tokens).item()),
                "steps_since_report": self.steps_since_report,
                "time_since_report": self.time_since_report,
                "trained_tokens": self.trained_tokens,
                "metric_sums": {name: float(mx.array(total).item())
                                for name, total in metric_sums.items()},
            },
        }
        # What the objective holds across steps (a grpo run's answers reused by the steps to
        # come): saved with the step so a resume continues them.
        objective_state = getattr(self.objective, "checkpoint_state", None)
        objective_tensors: dict[str, Any] = {}
        if objective_state is not None:
            meta["objective"], objective_tensors = objective_state()
        pending = self.engine.grad_sum
        if self.world.distributed:
            meta["world_size"] = self.world.size
            if pending is not None:
                # Each rank's gradients since the last update, summed: rank 0 carries them
                # all on resume (the update all_sums them anyway), the others none.
                pending = tree_map(self.world.sum, pending)
                mx.eval(pending)
        if not self.world.primary:
            return {"iteration": it}  # rank 0 saves: every rank holds the same state
        own, self.engine.grad_sum = self.engine.grad_sum, pending
        try:
            written = self.engine.save_state(self.adapters, it, meta, loss_sum=loss_sum,
                                             objective_tensors=objective_tensors)
        finally:
            self.engine.grad_sum = own
        info = {"iteration": it, **written}
        if val_loss is not None:
            info["val_loss"] = val_loss
        self.hooks.on_checkpoint(info)
        return info
