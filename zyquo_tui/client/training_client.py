"""TrainingClient: a model under training, stepped by the caller's own loop.

Every operation is submitted to the one thread that owns MLX (client/worker.py), runs in
submission order, and returns a Future (client/futures.py). The steps go through the engine
the run trainer uses (trainer/engine.py), so a client's SFT step is a run's step, and
checkpoints are shared; its loss is sliced (trainer/chunked_loss.py) where a run's would be.

A forward_backward with no gradients pending waits on the worker for the next operation: an
optim_step makes the two one compiled step, as a run's step is (full fine-tuning peaked 85%
higher compiled apart); anything else, or a wait on its future (or on a continuation of it),
runs it alone first.

At interpreter exit, a hook closes every client still open (their submitted operations run to
the end) and then ends and joins the MLX thread (client/worker.py says why it must).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import math
import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from zyquo_tui.client import worker
from zyquo_tui.client.batch import PREFERENCE, BatchError, Text, TrainingBatch
from zyquo_tui.client.futures import Future
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import Hyperparameters, Method


@dataclass
class ForwardBackwardResult:
    loss: float
    metrics: dict[str, float]
    batch_size: int
    num_tokens: int  # the target tokens the loss was taken over
    has_grads: bool = True  # gradients are pending until optim_step


@dataclass
class OptimStepResult:
    step: int  # optimizer steps applied so far
    learning_rate: float  # the rate this step applied
    grad_norm: float  # L2 norm of the averaged gradient this step applied


@dataclass
class SaveStateResult:
    path: Path
    step: int
    files: list[str]
    bytes: int


@dataclass
class LoadStateResult:
    path: Path
    step: int
    metadata: dict[str, Any]


@dataclass
class WeightsResult:
    weights: dict[str, Any]  # trainable parameter name -> mx.array
    step: int


@dataclass
class SampleResult:
    texts: list[str]
    tokens: list[list[int]] = field(repr=False)
    logprobs: list[list[float]] = field(repr=False)  # each generated token's, at temperature 1
    finish_reasons: list[str] = field(default_factory=list)  # "stop" or "length"


def checked_run(model: str | os.PathLike, method: str | None, settings: dict[str, Any]) -> Run:
    """The run-to-be of a client, made through a RunDraft as `runs new` makes one (its model
    resolved, its settings checked); ValueError with the first problem's sentence."""
    from zyquo_tui.core.errors import UserError
    from zyquo_tui.core.setup.draft import RunDraft

    try:
        draft = RunDraft.from_choices(model=str(model), method=method, settings=settings)
        return draft.to_run(need_data=False)
    except UserError as error:
        raise ValueError(error.message) from None


class TrainingClient:
    """A model with adapters (or unfrozen layers for full) and an optimizer, made with
    `from_model`; `close()` (or a `with` block) ends its worker."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._closed = False
        self._last: concurrent.futures.Future | None = None
        self._rng_key: int | None = None  # this client's MLX random key between operations
        self.engine = None
        self.tokenizer = None
        self._teachers: dict[str, Any] = {}  # trainer/teacher.py's Teacher by folder
        self._references: dict[str, Any] = {}  # DPO references by "base" or folder
        self._chunk_tokens: dict[tuple[int, int], int | str] = {}  # by batch shape
        self._sliced: dict[int, Any] = {}  # the chunked loss by tokens per slice
        # A forward_backward waiting for the next operation (on the worker only): its batch
        # and the future its caller holds.
        self._parked: tuple[TrainingBatch, concurrent.futures.Future] | None = None
        _open_clients.add(self)

    @classmethod
    def from_model(cls, model: str | os.PathLike, method: str | None = None,
                   **settings: Any) -> TrainingClient:
        """Load `model` (a folder, or a name `zyquo-tui models` lists) for `method` (lora,
        dora, qlora or full; qlora on a quantized model, else lora, by default) with the run
        settings by their mlx-lm names and with their defaults; checked as `runs new` checks."""
        client = cls(checked_run(model, method, settings))
        try:
            client._submit(client._load).result()
        except BaseException:
            client.close()
            raise
        return client

    # -- properties ------------------------------------------------------------------------------

    @property
    def method(self) -> Method:
        return self.run.method

    @property
    def settings(self) -> Hyperparameters:
        return self.run.hyperparameters

    @property
    def model_path(self) -> Path:
        return Path(self.run.model)

    @property
    def step(self) -> int:
        return self.engine.step if self.engine is not None else 0

    # -- operations ------------------------------------------------------------------------------

    def forward_backward(self, batch: TrainingBatch) -> Future[ForwardBackwardResult]:
        """The batch's loss and metrics; its gradients are added to the pending ones.

        With no gradients pending, it runs with the next operation: submit optim_step before
        waiting on this future and the two are one compiled step (less memory for full
        fine-tuning, the same values); a wait, or any other operation, runs it alone."""
        if not isinstance(batch, TrainingBatch):
            raise BatchError(f"forward_backward takes a TrainingBatch, not a "
                             f"{type(batch).__name__}.")
        outcome: concurrent.futures.Future = concurrent.futures.Future()
        self._submit(self._park_or_run, batch, outcome)
        return Future(outcome, start=self._run_parked_now)

    def optim_step(self) -> Future[OptimStepResult]:
        """Apply the pending gradients, averaged over the forward_backward calls since the last
        step."""
        return self._submit(self._optim_step)

    def save_state(self, path: str | os.PathLike, metadata: dict[str, Any] | None = None
                   ) -> Future[SaveStateResult]:
        """Write everything an exact resume needs into the folder `path`, in the run trainer's
        checkpoint layout, numbered by the current step; `metadata` (JSON) is kept with it."""
        if metadata is not None:
            json.dumps(metadata)  # refuse what cannot be stored before anything is written
        return self._submit(self._save_state, Path(path), metadata or {})

    def load_state(self, path: str | os.PathLike, step: int | None = None
                   ) -> Future[LoadStateResult]:
        """Restore a checkpoint (the latest in `path`, or `step`) saved by a client or by a run:
        weights, optimizer state, step, RNG state and pending gradients."""
        return self._submit(self._load_state, Path(path), step)

    def get_weights(self) -> Future[WeightsResult]:
        return self._submit(self._get_weights)

    def set_weights(self, weights: dict[str, Any] | WeightsResult) -> Future[None]:
        if isinstance(weights, WeightsResult):
            weights = weights.weights
        return self._submit(self._set_weights, dict(weights))

    def sample(self, prompts: Sequence[Text], max_tokens: int = 64, temperature: float = 0.0,
               seed: int | None = None, top_p: float = 1.0) -> Future[SampleResult]:
        """Complete each prompt with the current weights (temperature 0: greedy). A seed makes
        the draws repeatable; training's own random state is left as it was."""
        if isinstance(prompts, str):
            raise BatchError("prompts must be a list of prompts, not a single string.")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise BatchError(f"max_tokens must be a whole number of at least 1, not "
                             f"{max_tokens!r}.")
        if temperature < 0:
            raise BatchError(f"temperature must be 0 or more, not {temperature}.")
        return self._submit(self._sample, list(prompts), max_tokens, float(temperature), seed,
                            float(top_p))

    def close(self) -> None:
        """Wait for the operations already submitted; later ones are refused. The models'
        memory is freed once nothing refers to the client."""
        if not self._closed and self._last is not None:
            self._run_parked_now()  # a forward_backward still waiting for an optim_step
        self._closed = True
        if self._last is not None and not worker.on_worker():
            concurrent.futures.wait([self._last])
        self._teachers.clear()
        self._references.clear()
        _open_clients.discard(self)

    def __enter__(self) -> TrainingClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _submit(self, fn: Callable, *args: Any) -> Future:
        if self._closed:
            raise RuntimeError("this TrainingClient is closed; make a new one with from_model.")
        self._last = worker.submit(self._as_this_client, fn, args)
        return Future(self._last)

    def _run_parked_now(self) -> None:
        """Have the worker run a waiting forward_backward alone (a caller waits on it)."""
        self._last = worker.submit(self._as_this_client, _nothing, ())

    def _as_this_client(self, fn: Callable, args: tuple) -> Any:
        """Run fn with this client's own MLX random state: clients share the process's, and
        one client's draws (dropout, sampling) must not move another's. A waiting
        forward_backward runs first, alone, unless fn is the optim_step it waited for."""
        import mlx.core as mx

        from zyquo_tui.trainer.checkpoints import mlx_rng_seed

        if self._rng_key is not None:
            mx.random.seed(self._rng_key)
        try:
            if self._parked is not None and fn != self._optim_step:
                self._run_parked(with_update=False)
            return fn(*args)
        finally:
            self._rng_key = mlx_rng_seed()

    # -- on the worker -------------------------------------------------------------------------

    def _load(self) -> None:
        import mlx.core as mx
        import numpy as np
        from mlx_lm.tuner.trainer import grad_checkpoint

        from zyquo_tui.trainer import loading
        from zyquo_tui.trainer.engine import StepEngine

        hp = self.settings
        model, self.tokenizer = loading.load_model(self.run)
        # Seeded as mlx-lm's train_model seeds, after the load (building the model draws from
        # MLX's RNG) and before the adapters are made from it: a client starts from the
        # weights a run of the same settings starts from.
        mx.random.seed(hp.seed)
        np.random.seed(hp.seed)
        optimizer = loading.prepare_model(model, self.run)
        if hp.grad_checkpoint:
            grad_checkpoint(model.layers[0])
        model.train()
        self.engine = StepEngine(model, optimizer, keep_on_non_finite=True)

    def _park_or_run(self, batch: TrainingBatch, outcome: concurrent.futures.Future) -> None:
        if self.engine.pending == 0:  # its update may come next: wait for the next operation
            self._parked = (batch, outcome)
            return
        _settle(outcome, self._forward_backward, batch)

    def _run_parked(self, with_update: bool) -> None:
        batch, outcome = self._parked
        self._parked = None
        _settle(outcome, self._forward_backward, batch, with_update)

    def _forward_backward(self, batch: TrainingBatch, with_update: bool = False
                          ) -> ForwardBackwardResult:
        """with_update: compiled with the update of its own gradients (nothing pending), which
        the next optim_step reports."""
        import mlx.core as mx

        from zyquo_tui.trainer import losses
        from zyquo_tui.trainer.encoding import encode

        kind, options, n = batch.loss_type, batch.options, len(batch)
        max_len = batch.max_seq_len or self.settings.max_seq_length
        responses = batch.responses or [None] * n
        if kind in PREFERENCE:  # chosen rows, then rejected rows: one forward pass for both
            tokens, lengths = encode(self.tokenizer, batch.prompts * 2,
                                     [*responses, *batch.rejected_responses],
                                     batch.train_on_prompt, max_len)
        else:
            tokens, lengths = encode(self.tokenizer, batch.prompts, responses,
                                     batch.train_on_prompt, max_len)
        if kind == "sft":
            objective, key, arrays = losses.sft_objective, "sft", (tokens, lengths)
        elif kind == "dpo":
            beta, variant = float(options["beta"]), options["variant"]
            reference = self._reference_scores(tokens, lengths, options["reference"], variant)
            objective = partial(losses.dpo_objective, beta=beta, variant=variant)
            key, arrays = ("dpo", beta, variant), (tokens, lengths, reference)
        elif kind == "orpo":
            beta = float(options["beta"])
            objective, key = partial(losses.orpo_objective, beta=beta), ("orpo", beta)
            arrays = (tokens, lengths)
        elif kind in ("reinforce", "grpo"):
            advantages = list(batch.advantages)
            if kind == "grpo":
                groups = _group_ids(batch.prompts)
                advantages = losses.group_normalized(advantages, groups)
            objective, key = losses.policy_gradient_objective, "policy_gradient"
            arrays = (tokens, lengths, mx.array(advantages, dtype=mx.float32))
        else:  # distill
            temperature = float(options["temperature"])
            if options["teacher"] is not None:
                teacher, head = self._teacher(options["teacher"]).side(
                    tokens, temperature, self._sliced_loss(tokens) is not None)
                objective = partial(losses.distill_objective, temperature=temperature,
                                    teacher_head=head)
                key = ("distill", temperature, None if head is None else options["teacher"])
                arrays = (tokens, lengths, teacher)
            else:
                ids, logps = _given_teacher_logprobs(options["teacher_logprobs"], lengths,
                                                     tokens.shape[1] - 1)
                objective = partial(losses.distill_topk_objective, temperature=temperature)
                key, arrays = ("distill_topk", temperature), (tokens, lengths, ids, logps)

        sliced = self._sliced_loss(tokens)
        if sliced is not None:
            objective, key = partial(objective, sliced=sliced), (key, "sliced", sliced.chunk_tokens)
        engine = self.engine
        before = engine.bookkeeping()
        engine.update_with_next = with_update
        try:
            loss, ntoks, metrics = engine.forward_backward(objective, *arrays, key=key)
        finally:
            engine.update_with_next = False
        mx.eval(loss, ntoks, metrics, engine.grad_sum, engine.state, engine.applied)
        value = loss.item()
        if not math.isfinite(value):  # compiled with its update, the engine kept it out
            engine.discard_last(before)
            raise FloatingPointError(f"The {kind} loss of this batch is {value}; its gradients "
                                     "were discarded and the pending ones kept.")
        return ForwardBackwardResult(value, {k: float(v.item()) for k, v in metrics.items()},
                                     n, int(ntoks.item()))

    def _optim_step(self) -> OptimStepResult:
        import mlx.core as mx

        if self._parked is not None:
            self._run_parked(with_update=True)
        engine = self.engine
        if engine.pending == 0:
            raise RuntimeError("optim_step has no gradients to apply: call forward_backward "
                               "first.")
        learning_rate, norm = engine.optim_step()
        mx.eval(engine.state, learning_rate, norm)
        return OptimStepResult(engine.step, float(learning_rate.item()), float(norm.item()))

    def _save_state(self, folder: Path, metadata: dict[str, Any]) -> SaveStateResult:
        from mlx_lm.lora import CONFIG_DEFAULTS
        from mlx_lm.utils import save_config

        from zyquo_tui.core.runs.mlx_config import run_to_mlx_config

        folder.mkdir(parents=True, exist_ok=True)
        written = self.engine.save_state(folder, self.engine.step, {"metadata": metadata})
        # adapter_config.json as a run writes it, so `mlx_lm generate --adapter-path` loads it.
        args = {**CONFIG_DEFAULTS, **run_to_mlx_config(self.run, adapter_path=str(folder))}
        if self.method is Method.FULL:
            args["lora_parameters"] = None
        args.pop("data", None)
        save_config(args, folder / "adapter_config.json")
        files = [written["adapter_file"], written["latest"], *written["state_files"]]
        return SaveStateResult(folder, self.engine.step, files, written["bytes"])

    def _load_state(self, folder: Path, step: int | None) -> LoadStateResult:
        from zyquo_tui.core.store.checkpoints import latest_resumable, list_checkpoints

        if step is None:
            latest = latest_resumable(folder)
            if latest is None:
                raise FileNotFoundError(f"{folder} holds no checkpoint with its resume state "
                                        "(NNNNNNN_state.json and .safetensors).")
            step = latest.step
        try:
            meta, _ = self.engine.load_state(folder, step)
        except FileNotFoundError:
            steps = [c.step for c in list_checkpoints(folder) if c.resumable]
            raise FileNotFoundError(f"{folder} has no resume state for step {step}; it has "
                                    f"{', '.join(map(str, steps)) or 'none'}.") from None
        return LoadStateResult(folder, self.engine.step, dict(meta.get("metadata", {})))

    def _get_weights(self) -> WeightsResult:
        import mlx.core as mx

        weights = self.engine.trainable_weights()
        mx.eval(weights)
        return WeightsResult(weights, self.engine.step)

    def _set_weights(self, weights: dict[str, Any]) -> None:
        import mlx.core as mx

        self.engine.set_trainable_weights(weights)
        mx.eval(self.engine.state)

    def _sample(self, prompts: list[Text], max_tokens: int, temperature: float,
                seed: int | None, top_p: float) -> SampleResult:
        import mlx.core as mx

        from zyquo_tui.trainer.checkpoints import mlx_rng_seed
        from zyquo_tui.trainer.encoding import prompt_tokens
        from zyquo_tui.trainer.sampling import complete

        model = self.engine.model
        key = mx.random.state[0]
        model.eval()
        try:
            if seed is not None:
                mx.random.seed(seed)
            done = [complete(model, self.tokenizer, prompt_tokens(self.tokenizer, p), max_tokens,
                             temperature, top_p) for p in prompts]
        finally:
            model.train()
            mx.random.seed(mlx_rng_seed(key))  # training's draws go on as before
        # Each text decodes its tokens whole (mlx-lm's streamed text, which `runs try` shows,
        # drops an answer's leading space): a reward reads what the tokens say.
        return SampleResult([self.tokenizer.decode(c.tokens) for c in done],
                            [c.tokens for c in done], [c.logprobs for c in done],
                            [c.finish_reason for c in done])

    # -- references and teachers -----------------------------------------------------------------

    @staticmethod
    def _resolved(path: str) -> str:
        from zyquo_tui.core.errors import UserError
        from zyquo_tui.core.library.models import resolve_model

        try:
            return str(resolve_model(str(path)).path.resolve())
        except UserError as error:
            raise ValueError(error.message) from None

    def _teacher(self, path: str):
        """A frozen teacher loaded beside the trained model, once (a run's Teacher)."""
        from zyquo_tui.trainer.teacher import Teacher, TeacherError, output_width

        folder = self._resolved(path)
        if folder not in self._teachers:
            try:
                self._teachers[folder] = Teacher(folder, self.tokenizer,
                                                 output_width(self.engine.model))
            except TeacherError as error:
                raise ValueError(f"{error} (Or give teacher_logprobs instead.)") from None
        return self._teachers[folder]

    def _batch_chunk_tokens(self, tokens) -> int | str:
        """loss_chunk_tokens for a batch of this shape (rows as given: a preference batch's
        chosen and rejected rows both), auto decided as a run decides it."""
        from dataclasses import replace

        from zyquo_tui.trainer.objectives import loss_chunk_tokens_for

        rows, width = tokens.shape
        if (rows, width) not in self._chunk_tokens:
            settings = replace(self.settings, batch_size=rows, max_seq_length=width)
            self._chunk_tokens[rows, width] = loss_chunk_tokens_for(
                settings, self.run.method, self.run.model, None)
        return self._chunk_tokens[rows, width]

    def _sliced_loss(self, tokens):
        """The chunked loss this batch trains with (trainer/chunked_loss.py), or None."""
        from zyquo_tui.trainer.chunked_loss import loss_slicing

        chunk = self._batch_chunk_tokens(tokens)
        if not isinstance(chunk, int):
            return None
        if chunk not in self._sliced:
            self._sliced[chunk] = loss_slicing(self.engine.model, chunk)[0]
        sliced = self._sliced[chunk]
        return sliced if sliced is not None and sliced.worth_it(tokens) else None

    def _reference_scores(self, tokens, lengths, reference: str | None, variant: str):
        """Sequence log-probabilities under the DPO reference (trainer/objectives.py's
        Reference, as a run scores them): a named model, else the base."""
        from zyquo_tui.trainer.objectives import Reference

        key = "base" if reference is None else self._resolved(reference)
        if key not in self._references:
            self._references[key] = Reference(self.engine.model, self.run.model, key)
        return self._references[key].scores(tokens, lengths, variant,
                                            self._batch_chunk_tokens(tokens))


_open_clients: weakref.WeakSet[TrainingClient] = weakref.WeakSet()


@atexit.register
def _close_open_clients() -> None:
    """At interpreter exit: close what the script left open, then end the MLX thread.
    Without it a script that exits with operations still running on that thread aborts
    (client/worker.py)."""
    try:
        for client in list(_open_clients):
            client.close()
    finally:  # whatever a close raised, the thread must not outlive this hook
        worker.shutdown()


def _nothing() -> None:
    """A job that only lets the worker run a waiting forward_backward (_as_this_client)."""


def _settle(outcome: concurrent.futures.Future, fn: Callable, *args: Any) -> None:
    """fn(*args) into outcome: its result, or its error raised by outcome.result()."""
    try:
        outcome.set_result(fn(*args))
    except BaseException as error:  # noqa: BLE001 - raised again by the caller's result()
        outcome.set_exception(error)


def _group_ids(prompts: list[Text]) -> list[int]:
    """GRPO's groups: rows with the same prompt."""
    ids: dict[str, int] = {}
    return [ids.setdefault(json.dumps(p, sort_keys=True), len(ids)) for p in prompts]


def _given_teacher_logprobs(rows: list, lengths, width: int):
    """(ids, logprobs) arrays (B, width, k) from per-row, per-response-token {id: logprob}
    entries, placed at the positions whose predictions the loss trains; unused slots get
    PAD_LOGPROB (positions the loss does not train hold token 0 with log-probability 0)."""
    import mlx.core as mx
    import numpy as np

    from zyquo_tui.trainer.losses import PAD_LOGPROB

    spans = lengths.tolist()
    k = max((len(entry) for row in rows for entry in row), default=1)
    ids = np.zeros((len(rows), width, k), np.int32)
    logps = np.full((len(rows), width, k), PAD_LOGPROB, np.float32)
    logps[:, :, 0] = 0.0
    for index, (row, (offset, length)) in enumerate(zip(rows, spans, strict=True)):
        start = max(offset, 1) - 1  # the prediction of token `offset`
        expected = length - 1 - start
        if len(row) != expected:
            raise BatchError(f"teacher_logprobs[{index}] has {len(row)} entries and row "
                             f"{index} has {expected} trained tokens; give one per response "
                             "token.")
        for position, entry in enumerate(row):
            pairs = entry.items() if isinstance(entry, dict) else entry
            logps[index, start + position, 0] = PAD_LOGPROB
            for slot, (token, logp) in enumerate(pairs):
                ids[index, start + position, slot] = int(token)
                logps[index, start + position, slot] = float(logp)
    return mx.array(ids), mx.array(logps)
