"""The step engine: one model and its optimizer, stepped one forward-backward at a time.

Both the run trainer (trainer/loop.py) and the step-level client (zyquo_tui.client) train
through it, so a run and a hand-written loop take the same steps:
- `forward_backward(objective, *arrays)` computes a loss (trainer/losses.py) and adds its
  gradients to the ones pending since the last update;
- `optim_step()` averages the pending gradients over the forward-backward calls that made them
  (mlx-lm's rule for grad_accumulation_steps: two half batches then one step equal one whole
  batch of the same token count), across ranks when distributed, and applies the optimizer;
- a caller that will apply the update right after a forward-backward with nothing pending (the
  run trainer, at every step without accumulation) sets `update_with_next`: that
  forward-backward and its update are then one compiled function, as mlx-lm's own step is, and
  `optim_step()` only reports what it applied. Same values; less memory: compiled apart, full
  fine-tuning of the 128-wide calibration model peaked at 89.6 MiB, together at 48.4 MiB (MLX
  orders one graph's operations better than two's; docs/memory.md). The step-level client
  compiles them together too when an optim_step follows, and makes the engine with
  `keep_on_non_finite`: such a step whose loss is not finite then leaves the weights and the
  optimizer's state as they were (the client discards that batch and goes on, as it does
  compiled apart; the run trainer stops the run instead);
- the Tinker-compatible server (zyquo_tui/server) steps through it too, with its own rules
  for a step: gradients summed over the forward-backward calls (`optim_step(average=False)`,
  Tinker's losses are sums), a global norm to clip them to, and the optimizer's constants set
  per call (`set_optimizer_constants`: Tinker's AdamParams come with every optim_step);
- `save_state` / `load_state` write and read the trainer's checkpoint layout
  (trainer/checkpoints.py): weights, optimizer state, pending gradients, RNGs and the caller's
  metadata, so a run's checkpoint loads into a client and the other way round.

Both steps are compiled as mlx-lm compiles its step (model, optimizer and RNG state as inputs
and outputs), and nothing is evaluated here: the caller decides when to wait for the figures.
"""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn
from mlx.nn.utils import average_gradients
from mlx.utils import tree_flatten, tree_map, tree_map_with_path, tree_unflatten

from zyquo_tui.trainer import checkpoints


class StepEngine:
    def __init__(self, model: nn.Module, optimizer, keep_on_non_finite: bool = False) -> None:
        self.model = model
        self.optimizer = optimizer
        self.keep_on_non_finite = keep_on_non_finite
        if keep_on_non_finite:
            # The moments exist before the first step, so the step can keep them as they
            # were (mlx's optimizers make them at the first update otherwise; same zeros).
            optimizer.init(model.trainable_parameters())
        self.state = [model.state, optimizer.state, mx.random.state]
        self.step = 0  # optimizer updates applied
        self.grad_sum: Any = None  # gradients summed since the last update
        self.pending = 0  # forward-backward calls since the last update
        self._forward_backward: dict[Any, Callable] = {}
        # The global gradient norm an update clips to (0: no clipping), compiled into the
        # update; set with set_optimizer_constants.
        self.clip_norm = 0.0
        self._update = self._compile_update()
        self._steps: dict[Any, Callable] = {}  # forward-backward and update, compiled together
        # Set by a caller that calls optim_step right after the next forward_backward.
        self.update_with_next = False
        self._applied: tuple[mx.array, mx.array] | None = None  # (learning rate, norm)

    # -- stepping --------------------------------------------------------------------------------

    def forward_backward(self, objective: Callable, *arrays: mx.array, key: Any = None):
        """(loss, num_tokens, metrics) of `objective(model, *arrays)`, its gradients added to the
        pending ones. `key` names the objective with its constants bound (one compiled function
        each); the objective itself when None."""
        key = objective if key is None else key
        if self._applied is not None:
            raise RuntimeError("this forward_backward's update is applied: call optim_step "
                               "before the next forward_backward")
        if self.update_with_next and self.pending == 0:
            return self._forward_backward_and_update(objective, key, arrays)
        compiled = self._forward_backward.get(key)
        if compiled is None:
            compiled = self._forward_backward[key] = self._compile_forward_backward(objective)
        loss, ntoks, metrics, self.grad_sum = compiled(self.grad_sum, *arrays)
        self.pending += 1
        return loss, ntoks, metrics

    @property
    def applied(self) -> tuple[mx.array, mx.array] | None:
        """(learning rate, gradient norm) of the update compiled with the last forward_backward,
        until optim_step reports it; None otherwise. Evaluate it with the loss: one wait."""
        return self._applied

    def bookkeeping(self) -> tuple[Any, int]:
        """What forward_backward changes besides the weights: (pending gradients, count)."""
        return self.grad_sum, self.pending

    def discard_last(self, saved: tuple[Any, int]) -> None:
        """Forget the forward_backward made since `saved` (bookkeeping()): its gradients and,
        compiled with its update, the report of an update that keep_on_non_finite kept out."""
        self.grad_sum, self.pending = saved
        self._applied = None

    def count_as_one(self, calls: int) -> None:
        """The last `calls` forward_backward calls were the slices of one batch, their losses
        weighted by their share of its tokens (micro-batches): one call in the average the
        next optim_step takes, as the whole batch would be."""
        self.pending -= calls - 1

    def set_optimizer_constants(self, learning_rate: float | None = None,
                                **constants: Any) -> None:
        """Set the optimizer's hyperparameters for the next updates: the learning rate lives
        in the optimizer's state (an input of the compiled update: no recompiling); the
        others (an Adam's `betas`, `eps`, `weight_decay`; `clip_norm`, ours) are constants of
        the compiled update, which is compiled again when one of them changes."""
        if learning_rate is not None:
            self.optimizer.learning_rate = learning_rate
        changed = False
        for name, value in constants.items():
            owner = self if name == "clip_norm" else self.optimizer
            if not hasattr(owner, name):
                raise AttributeError(f"{type(owner).__name__} has no setting {name!r}")
            if getattr(owner, name) != value:
                setattr(owner, name, value)
                changed = True
        if changed:
            self._update = self._compile_update()
            self._steps.clear()

    def optim_step(self, average: bool = True) -> tuple[mx.array, mx.array]:
        """Apply the pending gradients; (learning rate applied, gradient norm), unevaluated.
        `average`: divide their sum by the forward_backward calls that made them (mlx-lm's
        accumulation rule); else apply the sum (Tinker's)."""
        if self.pending == 0:
            raise RuntimeError("optim_step needs gradients: call forward_backward first")
        if self._applied is not None:  # the forward-backward applied it already
            applied, self._applied = self._applied, None
            self.pending = 0
            self.step += 1
            return applied
        count = self.pending if average else 1
        norm = self._update(self.grad_sum, mx.array(count, dtype=mx.float32))
        learning_rate = self._applied_rate()
        self.grad_sum = None
        self.pending = 0
        self.step += 1
        return learning_rate, norm

    def _forward_backward_and_update(self, objective: Callable, key: Any, arrays):
        compiled = self._steps.get(key)
        if compiled is None:
            compiled = self._steps[key] = self._compile_step(objective)
        loss, ntoks, metrics, norm = compiled(*arrays)
        learning_rate = self._applied_rate()
        self._applied = (learning_rate, norm)
        self.pending = 1
        return loss, ntoks, metrics

    def _applied_rate(self) -> mx.array:
        """The learning rate of the update just made. Read after it: with a schedule, MLX
        writes the step's rate into the optimizer's state inside apply_gradients (read before,
        it is the previous step's), as mlx-lm's loop reads it."""
        return mx.array(self.optimizer.learning_rate)

    def _compile_step(self, objective: Callable) -> Callable:
        """forward_backward then optim_step of one call's gradients, as one compiled function
        (the same operations as the two compiled apart, with a count of 1)."""
        value_and_grad = nn.value_and_grad(self.model, objective)
        model, optimizer = self.model, self.optimizer

        @partial(mx.compile, inputs=self.state, outputs=self.state)
        def step(*arrays):
            (loss, ntoks, metrics), grad = value_and_grad(model, *arrays)
            if not self.keep_on_non_finite:
                return loss, ntoks, metrics, self._apply(average_gradients(grad))
            # Copies of the trees (not of the arrays): the optimizer updates its dicts in place.
            weights = model.trainable_parameters()
            moments = tree_map(lambda x: x, optimizer.state)
            norm = self._apply(average_gradients(grad))
            # The loss, known before the backward pass, so each array's choice can follow its
            # own update (a test holds full fine-tuning's peak to the estimate with it).
            finite = mx.isfinite(loss)

            def keep(new, old):
                return mx.where(finite, new, old)

            model.update(tree_map(keep, model.trainable_parameters(), weights))
            optimizer.state.update(tree_map(keep, dict(optimizer.state), moments))
            return loss, ntoks, metrics, norm

        return step

    def _compile_forward_backward(self, objective: Callable) -> Callable:
        value_and_grad = nn.value_and_grad(self.model, objective)
        model = self.model

        def forward_backward(prev_grad, *arrays):
            (loss, ntoks, metrics), grad = value_and_grad(model, *arrays)
            if prev_grad is not None:
                grad = tree_map(lambda x, y: x + y, grad, prev_grad)
            return loss, ntoks, metrics, grad

        return partial(mx.compile, inputs=self.state, outputs=self.state)(forward_backward)

    def _compile_update(self) -> Callable:
        @partial(mx.compile, inputs=self.state, outputs=self.state)
        def update(grad, count):
            # divided in the gradient's own dtype: a float32 count would make a bfloat16
            # model's gradients float32, and through the optimizer its weights and moments
            return self._apply(tree_map(lambda x: x / count.astype(x.dtype),
                                        average_gradients(grad)))

        return update

    def _apply(self, grad) -> mx.array:
        """Apply the optimizer to the model with this gradient, clipped to `clip_norm` when
        set; the gradient's norm before clipping."""
        squares = [mx.sum(mx.square(g.astype(mx.float32))) for _, g in tree_flatten(grad)]
        norm = mx.sqrt(sum(squares))
        if self.clip_norm > 0:
            scale = mx.minimum(self.clip_norm / (norm + 1e-6), 1.0)
            grad = tree_map(lambda g: g * scale.astype(g.dtype), grad)
        self.optimizer.update(self.model, grad)
        return norm

    # -- weights -------------------------------------------------------------------------------

    def trainable_weights(self) -> dict[str, mx.array]:
        return dict(tree_flatten(self.model.trainable_parameters()))

    def set_trainable_weights(self, weights: dict[str, mx.array]) -> None:
        known = self.trainable_weights()
        unknown = sorted(set(weights) - set(known))
        if unknown:
            raise KeyError(f"{unknown[0]} is not a trainable weight of this model "
                           f"({len(unknown)} unknown names)")
        for name, value in weights.items():
            if tuple(value.shape) != tuple(known[name].shape):
                raise ValueError(f"{name} has shape {tuple(value.shape)}, the model's is "
                                 f"{tuple(known[name].shape)}")
        self.model.update(tree_unflatten(list(weights.items())))

    # -- state ---------------------------------------------------------------------------------

    def save_state(self, folder: Path, label: int, meta: dict[str, Any],
                   loss_sum: Any = 0, objective_tensors: dict[str, mx.array] | None = None
                   ) -> dict[str, Any]:
        """Write checkpoint `label` (the trainer's iteration, the client's step) in `folder`;
        `objective_tensors`: what the run's objective keeps across steps."""
        return checkpoints.save_checkpoint(
            folder, label, self.trainable_weights(), self.optimizer.state, self.grad_sum,
            loss_sum, {"optimizer_steps": self.step, "pending": self.pending, **meta},
            objective_tensors)

    def load_state(self, folder: Path, label: int,
                   objective_tensors: dict[str, mx.array] | None = None
                   ) -> tuple[dict[str, Any], mx.array]:
        """Read checkpoint `label`: weights, optimizer state, pending gradients and RNGs;
        returns its metadata and the loss sum saved with it (`objective_tensors`, given, gets
        what the objective saved). FileNotFoundError when `label` has no state."""
        meta, tensors = checkpoints.load_state(folder, label)
        if objective_tensors is not None:
            objective_tensors.update(checkpoints.objective_tensors(tensors))
        weights_file = checkpoints.adapter_file(folder, label)
        # strict=False because the file holds the trained weights only, not the base's; that
        # also skips every name and shape check, so the check is made here first.
        mismatch = weights_mismatch(checkpoints.saved_shapes(weights_file),
                                    {name: tuple(value.shape)
                                     for name, value in self.trainable_weights().items()})
        if mismatch is not None:
            raise ValueError(f"{weights_file}: {mismatch}")
        self.model.load_weights(str(weights_file), strict=False)
        optimizer_state, grad_accum, loss_sum = checkpoints.split_state(tensors)
        self.optimizer.state = optimizer_state
        self.optimizer.init(self.model.trainable_parameters())  # keeps the loaded moments
        self.state[1] = self.optimizer.state
        self.grad_sum = self._as_gradient_tree(grad_accum) if meta.get("has_grad_accum") else None
        self.pending = int(meta.get("pending", 1 if self.grad_sum is not None else 0))
        self.step = int(meta.get("optimizer_steps", label))
        checkpoints.restore_rngs(meta)
        return meta, loss_sum


    def _as_gradient_tree(self, saved: Any) -> Any:
        """Saved gradients in the shape value_and_grad gives them: the trainable parameters'
        tree, with the empty branches that saving (tree_flatten) dropped."""
        flat = dict(tree_flatten(saved))
        return tree_map_with_path(lambda path, _: flat[path], self.model.trainable_parameters())


# -- whether a checkpoint's weights fit a model ------------------------------------------------

_METHOD_OF_KIND = {"LoRA": "lora (or qlora)", "DoRA": "dora", "full fine-tuning": "full"}


def _kind(names) -> str:
    """What trained a set of weight names: LoRA and DoRA adapters have lora_a and lora_b
    (DoRA a magnitude `m` too); full fine-tuning has the model's own weights."""
    names = list(names)
    if any(name.endswith((".lora_a", ".lora_b")) for name in names):
        return "DoRA" if any(name.endswith(".m") for name in names) else "LoRA"
    return "full fine-tuning"


def _rank(shapes: dict[str, tuple[int, ...]]) -> int | None:
    ranks = {shape[-1] for name, shape in shapes.items() if name.endswith(".lora_a")}
    return ranks.pop() if len(ranks) == 1 else None


def weights_mismatch(saved: dict[str, tuple[int, ...]], ours: dict[str, tuple[int, ...]]
                     ) -> str | None:
    """Why checkpoint weights `saved` (name -> shape) cannot load into a model that trains
    `ours`, in one sentence with what to do; None when they fit exactly."""
    theirs_kind, our_kind = _kind(saved), _kind(ours)
    if theirs_kind != our_kind:
        return (f"it holds {theirs_kind} weights and this model is trained by {our_kind}; "
                f"make the client (or run) with method={_METHOD_OF_KIND[theirs_kind]} and the "
                "checkpoint's other settings (its adapter_config.json lists them).")
    extra, missing = sorted(set(saved) - set(ours)), sorted(set(ours) - set(saved))
    if extra or missing:
        parts = []
        if extra:
            parts.append(f"{len(extra)} weights this model does not train (such as {extra[0]})")
        if missing:
            parts.append(f"no value for {len(missing)} that it trains (such as {missing[0]})")
        return (f"it has {' and '.join(parts)}; make the client (or run) with the "
                "checkpoint's num_layers and lora_keys (its adapter_config.json lists them).")
    differ = sorted(name for name in saved if tuple(saved[name]) != tuple(ours[name]))
    if not differ:
        return None
    theirs_rank, our_rank = _rank(saved), _rank(ours)
    if theirs_rank is not None and our_rank is not None and theirs_rank != our_rank:
        return (f"its adapters have rank {theirs_rank} and this model's have rank "
                f"{our_rank}; make the client (or run) with rank={theirs_rank}.")
    name = differ[0]
    return (f"{name} has shape {tuple(saved[name])} there and {tuple(ours[name])} here "
            f"({len(differ)} weights differ): it was trained on another model.")


# -- the reference of preference losses ----------------------------------------------------------

def _adapted_layers(model: nn.Module) -> list[tuple[str, nn.Module, nn.Module]]:
    """(name, adapter layer, the base layer it wraps) for every LoRA or DoRA layer."""
    found = []
    for name, module in model.named_modules():
        base = getattr(module, "linear", None) or getattr(module, "embedding", None)
        if base is not None and hasattr(module, "lora_a"):
            found.append((name, module, base))
    return found


@contextlib.contextmanager
def adapters_disabled(model: nn.Module):
    """The base model inside the block: each adapter layer swapped for the layer it wraps."""
    layers = _adapted_layers(model)
    model.update_modules(tree_unflatten([(name, base) for name, _, base in layers]))
    try:
        yield model
    finally:
        model.update_modules(tree_unflatten([(name, adapter) for name, adapter, _ in layers]))


def has_adapters(model: nn.Module) -> bool:
    return bool(_adapted_layers(model))
