"""One Tinker training client's model on the server: the MLX side, run on the MLX thread only.

It is made as the step-level client makes its model (the same RunDraft checks, mlx-lm's load,
the run's LoRA adapters and seed) and trains through the same step engine
(trainer/engine.py) with Tinker's rules for a step: token-level batches and Tinker's losses
(trainer/token_losses.py), gradients summed over forward_backward calls, AdamW with bias
correction whose constants come with each optim_step (Tinker's `AdamParams`). Each model
keeps its own MLX random state between operations, so two programs served at once do not move
each other's draws.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from zyquo_tui.server.wire import Sequence, WireDatum
from zyquo_tui.trainer import token_losses
from zyquo_tui.trainer.batches import PAD_TO
from zyquo_tui.trainer.checkpoints import mlx_rng_seed

# Tinker's AdamParams defaults, and torch's AdamW (with bias correction), which Tinker's Adam is.
ADAM_DEFAULTS = {"betas": [0.9, 0.95], "eps": 1e-12, "weight_decay": 0.0,
                 "bias_correction": True}
DESCRIPTION_FILE = "tinker.json"  # beside a saved state: what model and adapters it fits
# The most answers of one sample request decoded together (mlx-lm's batch generation's
# default completion batch size); more are decoded in turns of this many.
SAMPLE_ROWS = 32


class RequestError(ValueError):
    """What a program asked for that cannot be done: the sentence it gets back, as a failed
    request of category `user`."""


@dataclass
class ModelSpec:
    """What a training model is made of: its base and its LoRA adapters."""

    base_model: str  # as the program named it
    folder: str  # the model folder it resolved to
    rank: int
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelSpec:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def lora_keys_for(model, spec: ModelSpec) -> list[str] | None:
    """mlx-lm's lora_keys for Tinker's train_attn and train_mlp (None: every Linear of a
    layer). The unembedding is outside mlx-lm's adapted layers: train_unembed adds nothing."""
    if spec.train_attn and spec.train_mlp:
        return None
    import mlx.nn as nn

    keys = []
    for name, module in model.layers[0].named_modules():
        if not isinstance(module, (nn.Linear, nn.QuantizedLinear)):
            continue
        attention = any(part in name for part in ("attn", "attention"))
        if (attention and spec.train_attn) or (not attention and spec.train_mlp):
            keys.append(name)
    if not keys:
        raise RequestError("train_attn and train_mlp leave no layer of this model to train; "
                           "set at least one of them.")
    return keys


# What a training client's memory verdict judges when it is made, before any batch is known:
# its weights, adapters, gradients and Adam's moments, and a step of one row of this many
# tokens. Each forward_backward is then judged by its own rows when it comes (server/ledger.py).
SERVED_ROW_TOKENS = 512


def checked_run(spec: ModelSpec, lora_keys: list[str] | None):
    """The run settings of this model, checked as `runs new` checks them: a batch of one row
    of SERVED_ROW_TOKENS, the loss computed whole (as forward_backward computes it)."""
    from zyquo_tui.client.training_client import checked_run as client_checked_run

    settings: dict[str, Any] = {"rank": spec.rank, "num_layers": -1, "optimizer": "adamw",
                                "learning_rate": 1e-4, "batch_size": 1,
                                "max_seq_length": SERVED_ROW_TOKENS, "loss_chunk_tokens": "off",
                                "optimizer_config": {"adamw": dict(ADAM_DEFAULTS)}}
    if spec.seed is not None:
        settings["seed"] = spec.seed
    if lora_keys is not None:
        settings["lora_keys"] = lora_keys
    try:
        return client_checked_run(spec.folder, "lora", settings)
    except ValueError as error:
        raise RequestError(str(error)) from None


@dataclass
class TrainedModel:
    spec: ModelSpec
    run: Any = None
    model: Any = None
    tokenizer: Any = None
    engine: Any = None
    _rng_key: int | None = None
    # Where unseeded sampling's draws go on from: a state of their own, so each sample call
    # draws afresh while training's random state stays as it was (None: not sampled yet).
    _sampling_rng_key: int | None = None
    _lora_keys: list[str] | None = field(default=None)
    last_tokens: int = 0  # the positions of the last forward_backward

    # -- making --------------------------------------------------------------------------------

    @classmethod
    def load(cls, spec: ModelSpec) -> TrainedModel:
        from mlx_lm.utils import load as mlx_load

        from zyquo_tui.trainer import loading
        from zyquo_tui.trainer.engine import StepEngine

        self = cls(spec)
        probe_run = checked_run(spec, None)
        loading.check_model_folder(probe_run)
        self.model, self.tokenizer = mlx_load(spec.folder)
        self._lora_keys = lora_keys_for(self.model, spec)
        self.run = checked_run(spec, self._lora_keys)
        seed = self.run.hyperparameters.seed
        mx.random.seed(seed)
        np.random.seed(seed)
        optimizer = loading.prepare_model(self.model, self.run)
        self.model.train()
        self.engine = StepEngine(self.model, optimizer, keep_on_non_finite=True)
        self._keep_rng()
        return self

    def run_as_own(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) with this model's own MLX random state (on the MLX thread)."""
        if self._rng_key is not None:
            mx.random.seed(self._rng_key)
        try:
            return fn(*args, **kwargs)
        finally:
            self._keep_rng()

    def _keep_rng(self) -> None:
        self._rng_key = mlx_rng_seed()

    # -- training ------------------------------------------------------------------------------

    def batch(self, loss_fn: str, data: list[WireDatum]) -> tuple[list[int], tuple]:
        """The datums as one padded token-level batch: (lengths, arrays)."""
        columns = token_losses.COLUMNS.get(loss_fn)
        if columns is None:
            raise RequestError(f"loss_fn {loss_fn!r} is not one this server computes; use one "
                               f"of {', '.join(token_losses.COLUMNS)}, or "
                               "forward_backward_custom.")
        if not data:
            raise RequestError("forward_backward needs at least one Datum.")
        vocabulary = self.vocabulary_size()
        lengths = [len(d.tokens) for d in data]
        width = PAD_TO * max(1, math.ceil(max(lengths) / PAD_TO))
        per_position = self._targets_per_position(loss_fn, data)  # () or (K,)
        inputs = np.zeros((len(data), width), np.int32)
        targets = np.zeros((len(data), width, *per_position), np.int32)
        mask = np.zeros((len(data), width), np.float32)
        extra = [np.zeros((len(data), width, *per_position), np.float32) for _ in columns]
        for row, (datum, n) in enumerate(zip(data, lengths, strict=True)):
            if n == 0:
                raise RequestError(f"Datum {row} has an empty model_input.")
            given = datum.inputs.get("target_tokens")
            if given is None:
                raise RequestError(f"Datum {row} has no target_tokens in its loss_fn_inputs.")
            if given.shape != (n, *per_position):
                raise RequestError(f"Datum {row}'s target_tokens has shape {list(given.shape)} "
                                   f"and its model_input {n} tokens; give one target per "
                                   "input token (or K of them, [N, K], for cross_entropy).")
            for name, tokens in (("model_input", datum.tokens), ("target_tokens", given)):
                if tokens.min() < 0 or tokens.max() >= vocabulary:
                    raise RequestError(f"Datum {row}'s {name} holds token {int(tokens.max())} "
                                       f"(or a negative one); this model's vocabulary has "
                                       f"{vocabulary} tokens.")
            inputs[row, :n] = datum.tokens
            targets[row, :n] = given
            mask[row, :n] = 1.0
            for index, name in enumerate(columns):
                value = datum.inputs.get(name)
                if value is None:
                    raise RequestError(f"Datum {row} has no {name} in its loss_fn_inputs, which "
                                       f"{loss_fn} needs ({', '.join(columns)}).")
                if value.shape != (n, *per_position):
                    raise RequestError(f"Datum {row}'s {name} has shape {list(value.shape)}; "
                                       f"it needs the shape of its target_tokens, "
                                       f"{[n, *per_position]}.")
                extra[index][row, :n] = value
        return lengths, (mx.array(inputs), mx.array(targets), mx.array(mask),
                         *(mx.array(e) for e in extra))

    @staticmethod
    def _targets_per_position(loss_fn: str, data: list[WireDatum]) -> tuple[int, ...]:
        """() when each position has one target token; (K,) when cross_entropy's datums give
        K a position ([N, K] target_tokens and weights, Tinker's top-k distillation)."""
        shapes = {datum.inputs["target_tokens"].shape[1:] for datum in data
                  if "target_tokens" in datum.inputs}
        if shapes <= {()}:
            return ()
        if loss_fn != "cross_entropy":
            raise RequestError(f"{loss_fn} takes one target token a position ([N] "
                               "target_tokens); [N, K] targets are for cross_entropy only.")
        if len(shapes) > 1 or len(next(iter(shapes))) != 1 or next(iter(shapes))[0] < 1:
            raise RequestError("The datums' target_tokens must all be [N] or all [N, K] with "
                               "the same K >= 1 in one forward_backward, not "
                               f"{sorted(str([None, *s]) for s in shapes)}.")
        return next(iter(shapes))

    def vocabulary_size(self) -> int:
        args = getattr(self.model, "args", None)
        size = getattr(args, "vocab_size", None)
        return int(size) if size else len(self.tokenizer.get_vocab())

    def forward_backward(self, loss_fn: str, config: dict[str, Any], data: list[WireDatum],
                         forward_only: bool) -> tuple[list[dict[str, np.ndarray]], dict]:
        """Per-datum outputs (log-probabilities and per-token losses) and metrics; its
        gradients are added to the pending ones, unless `forward_only`."""
        try:
            objective, key = token_losses.objective_for(loss_fn, {
                k: v for k, v in config.items()})
        except KeyError as error:
            if loss_fn not in token_losses.CONFIG_DEFAULTS:
                raise RequestError(f"loss_fn {loss_fn!r} is not one this server computes; use "
                                   f"one of {', '.join(token_losses.COLUMNS)}.") from None
            known = ", ".join(token_losses.CONFIG_DEFAULTS[loss_fn]) or "none"
            raise RequestError(f"loss_fn_config key {error.args[0]!r} is not one {loss_fn} "
                               f"takes (it takes: {known}).") from None
        except (TypeError, ValueError):
            raise RequestError(f"loss_fn_config of {loss_fn} takes numbers only.") from None
        lengths, arrays = self.batch(loss_fn, data)
        if arrays[1].ndim == 3:  # K targets a position: top-k distillation's cross_entropy
            objective, key = token_losses.topk_cross_entropy_objective, ("tinker", "topk_ce")
        engine = self.engine
        if forward_only:
            loss, _, metrics = objective(self.model, *arrays)
            mx.eval(loss, metrics)
        else:
            before = engine.bookkeeping()
            loss, _, metrics = engine.forward_backward(objective, *arrays, key=key)
            mx.eval(loss, metrics, engine.grad_sum, engine.state)
        value = loss.item()
        if not math.isfinite(value):
            if not forward_only:
                engine.discard_last(before)
            raise RequestError(f"The {loss_fn} loss of this batch is {value}; its gradients "
                               "were discarded and the pending ones kept.")
        logprobs = np.array(metrics["logprobs"], copy=False)
        elementwise = np.array(metrics["elementwise_loss"], copy=False)
        outputs = [{"logprobs": logprobs[row, :n], "elementwise_loss": elementwise[row, :n]}
                   for row, n in enumerate(lengths)]
        self.last_tokens = sum(lengths)
        return outputs, {"loss:sum": value}

    def optim_step(self, learning_rate: float, beta1: float, beta2: float, eps: float,
                   weight_decay: float, grad_clip_norm: float) -> dict[str, float]:
        """Apply the pending gradients (their sum) with these AdamParams."""
        engine = self.engine
        if engine.pending == 0:
            raise RequestError("optim_step has no gradients to apply: call forward_backward "
                               "first.")
        engine.set_optimizer_constants(learning_rate=learning_rate, betas=[beta1, beta2],
                                       eps=eps, weight_decay=weight_decay,
                                       clip_norm=grad_clip_norm)
        rate, norm = engine.optim_step(average=False)
        mx.eval(engine.state, rate, norm)
        return {"learning_rate:mean": float(rate.item()), "grad_norm:mean": float(norm.item())}

    # -- weights and state ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, mx.array]:
        """The trained weights as they are now (MLX arrays never change in place: later
        steps make new ones, so this stays as it is)."""
        weights = self.engine.trainable_weights()
        mx.eval(weights)
        return weights

    def describe(self, folder: Path) -> None:
        from mlx_lm.lora import CONFIG_DEFAULTS
        from mlx_lm.utils import save_config

        from zyquo_tui.core.runs.mlx_config import run_to_mlx_config

        folder.mkdir(parents=True, exist_ok=True)
        (folder / DESCRIPTION_FILE).write_text(json.dumps(self.spec.to_json(), indent=2))
        # adapter_config.json as a run writes it: `mlx_lm generate --adapter-path` loads it.
        args = {**CONFIG_DEFAULTS, **run_to_mlx_config(self.run, adapter_path=str(folder))}
        args.pop("data", None)
        save_config(args, folder / "adapter_config.json")

    def save_state(self, folder: Path) -> dict[str, Any]:
        self.describe(folder)
        return self.engine.save_state(folder, self.engine.step, {"tinker": True})

    def save_weights(self, folder: Path) -> None:
        """The weights alone (a sampler's): adapters.safetensors and the description."""
        self.describe(folder)
        mx.save_safetensors(str(folder / "adapters.safetensors"), self.snapshot())

    def load_state(self, folder: Path, with_optimizer: bool) -> None:
        from zyquo_tui.core.store.checkpoints import latest_resumable
        from zyquo_tui.trainer.checkpoints import adapter_file

        latest = latest_resumable(folder)
        if latest is None:
            raise RequestError(f"{folder} holds no saved state; save one with save_state.")
        if with_optimizer:
            try:
                self.engine.load_state(folder, latest.step)
            except ValueError as error:
                raise RequestError(str(error)) from None
            except (RuntimeError, OSError) as error:  # MLX's reader of a damaged file
                raise RequestError(f"The state saved in {folder} cannot be read ({error}); "
                                   "save it again.") from None
            return
        self.set_weights(read_weights(adapter_file(folder, latest.step)))

    def set_weights(self, weights: dict[str, mx.array]) -> None:
        try:
            self.engine.set_trainable_weights(weights)
        except (KeyError, ValueError) as error:
            raise RequestError(f"The saved weights do not fit this model: {error}") from None
        mx.eval(self.engine.state)

    # -- sampling ------------------------------------------------------------------------------

    def sample(self, weights: dict[str, mx.array] | None, prompt: list[int], num_samples: int,
               params: dict[str, Any], prompt_logprobs: bool, topk_prompt_logprobs: int = 0
               ) -> tuple[list[Sequence], np.ndarray | None, TopK | None]:
        """Completions of `prompt` with `weights` in place of the trained ones (None: as they
        are), which are put back after; training's random state is left as it was. With
        `prompt_logprobs`, each prompt token's log-probability (NaN for the first); with
        `topk_prompt_logprobs` k > 0, the k likeliest tokens at each prompt position."""
        from zyquo_tui.trainer.sampling import complete_batch

        vocabulary = self.vocabulary_size()
        if not prompt or min(prompt) < 0 or max(prompt) >= vocabulary:
            raise RequestError(f"The prompt needs at least one token, each below {vocabulary} "
                               "(this model's vocabulary).")
        current = self.engine.trainable_weights() if weights is not None else None
        key = mx.random.state[0]
        self.model.eval()
        try:
            if weights is not None:
                self.engine.set_trainable_weights(weights)
            seeded = params.get("seed") is not None
            if seeded:
                mx.random.seed(int(params["seed"]) % (2 ** 63))
            elif self._sampling_rng_key is not None:
                mx.random.seed(self._sampling_rng_key)
            max_tokens = int(params.get("max_tokens") or 0)
            sequences = []
            # The answers decode together, the prompt read once (complete_batch), at most
            # SAMPLE_ROWS at a time: each row holds a KV cache of its own as it grows.
            for first in range(0, num_samples, SAMPLE_ROWS):
                done = complete_batch(
                    self.model, self.tokenizer, [prompt], max_tokens,
                    float(params.get("temperature", 1.0)), min(SAMPLE_ROWS, num_samples - first),
                    float(params.get("top_p", 1.0)), int(params.get("top_k", -1)),
                    params.get("stop"), keep_stop=True)
                sequences += [Sequence(c.tokens, c.logprobs, c.finish_reason) for c in done]
            if not seeded:  # the next unseeded call draws on from here, not these again
                self._sampling_rng_key = mlx_rng_seed()
            if max_tokens < 1:  # complete_batch makes no answer then: empty ones
                sequences = [Sequence([], [], "length") for _ in range(num_samples)]
            scored = top = None
            if prompt_logprobs:
                tokens = mx.array([prompt])
                lp = token_losses.target_logprobs(self.model, tokens[:, :-1], tokens[:, 1:])
                scored = np.concatenate([[np.nan], np.array(lp[0], dtype=np.float32)])
            if topk_prompt_logprobs > 0:
                top = prompt_top_k(self.model, prompt, topk_prompt_logprobs)
        finally:
            if current is not None:
                self.engine.set_trainable_weights(current)
            self.model.train()
            mx.random.seed(mlx_rng_seed(key))
        return sequences, scored, top


# Tinker's filler for a top-k cell that holds nothing (tinker.types.topk_logprobs).
TOPK_EMPTY_TOKEN, TOPK_EMPTY_LOGPROB = 0, -99999.0


@dataclass
class TopK:
    """The k likeliest tokens at each of `length` positions, likeliest first: token ids
    (length, k) int32 and their log-probabilities (length, k) float32; a row or cell with
    nothing to hold has Tinker's filler (token 0, log-probability -99999)."""

    token_ids: np.ndarray
    logprobs: np.ndarray


def prompt_top_k(model, prompt: list[int], k: int) -> TopK:
    """The k likeliest next tokens at each prompt position after the first (what the tokens
    before it predict), as Tinker's `topk_prompt_logprobs`: the first position has none. A k
    above the vocabulary fills the cells past it."""
    token_ids = np.full((len(prompt), k), TOPK_EMPTY_TOKEN, np.int32)
    logprobs = np.full((len(prompt), k), TOPK_EMPTY_LOGPROB, np.float32)
    if len(prompt) > 1:
        logits = model(mx.array([prompt[:-1]]))[0].astype(mx.float32)
        lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        kept = min(k, lp.shape[-1])
        order = mx.argsort(-lp, axis=-1)[:, :kept]
        values = mx.take_along_axis(lp, order, axis=-1)
        mx.eval(order, values)
        token_ids[1:, :kept] = np.array(order, dtype=np.int32)
        logprobs[1:, :kept] = np.array(values, dtype=np.float32)
    return TopK(token_ids, logprobs)


def read_weights(file: Path) -> dict[str, mx.array]:
    """The arrays of a saved safetensors file; RequestError with one sentence when the file
    is missing or damaged (MLX's reader raises RuntimeError for a file it cannot read)."""
    try:
        return dict(mx.load(str(file)))
    except (RuntimeError, ValueError, OSError) as error:
        raise RequestError(f"The weights in {file} cannot be read ({error}); save them "
                           "again.") from None


def read_description(folder: Path) -> ModelSpec:
    """What a saved state fits (its tinker.json); RequestError with one sentence when the
    file is missing or not one this server wrote (a folder edited or damaged by hand)."""
    path = folder / DESCRIPTION_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RequestError(f"{folder} was not saved by this server ({DESCRIPTION_FILE} is "
                           "missing).") from None
    except (OSError, ValueError, RecursionError) as error:  # ValueError: bad JSON or UTF-8
        raise RequestError(f"{path} cannot be read ({type(error).__name__}); save the state "
                           "again.") from None
    fields_ok = isinstance(data, dict) and all(
        isinstance(data.get(name), str) and data.get(name) for name in ("base_model", "folder"))
    rank = data.get("rank") if isinstance(data, dict) else None
    if not fields_ok or not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise RequestError(f"{path} does not describe a saved state (it needs base_model, "
                           "folder and a rank of at least 1); save the state again.")
    try:
        return ModelSpec.from_json(data)
    except TypeError as error:
        raise RequestError(f"{path} does not describe a saved state ({error}); save the state "
                           "again.") from None
