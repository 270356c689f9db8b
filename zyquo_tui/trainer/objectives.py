"""What a run learns, as the training loop sees it: its batches, its step and its validation.

`SftObjective` is mlx-lm's SFT (its batch order, its loss, its `evaluate`). `PreferenceObjective`
trains DPO or ORPO (trainer/losses.py) on preference pairs (trainer/preference_data.py), with
the reference of DPO scored by `Reference`, which the step-level client uses too.
`DistillObjective` learns a teacher's distribution (trainer/teacher.py) on SFT's batches, or on
the student's own answers to their prompts (trainer/on_policy.py).
`GrpoObjective` trains GRPO on prompts with answers (trainer/prompt_data.py), sampling each
batch's answers as it goes (trainer/grpo.py), with the same `Reference` for its KL term.
"""

from __future__ import annotations

import contextlib
import math
from functools import partial
from typing import Any

import mlx.core as mx
from mlx_lm.tuner.trainer import default_loss, evaluate

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.events.protocol import PREFERENCE_METRICS
from zyquo_tui.core.memory.budget import CPU, GPU
from zyquo_tui.core.memory.estimate import (
    COEFFICIENTS,
    TrainingConfig,
    loss_slice_tokens,
    resolved_slicing,
)
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.runs.settings import DEFAULT_LOSS_CHUNK_TOKENS, SETTINGS, Hyperparameters
from zyquo_tui.core.runs.value_checks import AUTO_TEXT, OFF_TEXT
from zyquo_tui.trainer import losses
from zyquo_tui.trainer.batches import BatchStream, PackedBatchStream
from zyquo_tui.trainer.chunked_loss import loss_slicing
from zyquo_tui.trainer.engine import StepEngine, adapters_disabled, has_adapters
from zyquo_tui.trainer.shared_prompts import SharedPrompts
from zyquo_tui.trainer.trainer_failure import fail


def loss_chunk_tokens_for(settings: Hyperparameters, method: str, model_path: str,
                          longest_row_tokens: int | None, world_size: int = 1) -> int | str:
    """What a run's `loss_chunk_tokens` means for this run: its count or off as given, and
    auto decided as the memory estimate decides it (core/memory/estimate.py's
    `resolved_slicing`, on this device's terms, for one rank's widest batch), so the plan's
    verdict and the training agree. A model whose folder cannot be read is sliced: the same
    losses, and the smaller footprint."""
    setting = SETTINGS["loss_chunk_tokens"].get(settings)
    if setting != AUTO_TEXT:
        return setting
    try:
        facts = ModelFacts.from_folder(model_path)
    except (UserError, OSError, ValueError):
        return DEFAULT_LOSS_CHUNK_TOKENS
    config = TrainingConfig.from_hyperparameters(method, settings, longest_row_tokens)
    config = config.replace(batch_size=max(config.batch_size // world_size, 1))
    device = GPU if mx.default_device() == mx.gpu else CPU
    return loss_slice_tokens(resolved_slicing(facts, config, COEFFICIENTS[device])) or OFF_TEXT


class LossSlicing:
    """The sliced loss (trainer/chunked_loss.py) an objective trains with, unless the run
    turned it off or the model cannot have it (`slicing_note` then says why)."""

    sliced = None
    slicing_note: str | None = None

    def _slice_losses(self, chunk_tokens: int | str, model) -> None:
        if model is not None:
            self.sliced, self.slicing_note = loss_slicing(model, chunk_tokens)

    @property
    def loss_chunk_tokens(self) -> int | str:
        """What the run trains with: tokens per slice of the loss, or "off"."""
        return self.sliced.chunk_tokens if self.sliced is not None else OFF_TEXT

    def _sliced_for(self, tokens: mx.array) -> bool:
        return self.sliced is not None and self.sliced.worth_it(tokens)


class SftObjective(LossSlicing):
    metric_names: tuple[str, ...] = ()

    def __init__(self, settings: Hyperparameters, model=None,
                 chunk_tokens: int | str = OFF_TEXT, pack: bool = False) -> None:
        self.settings = settings
        self.pack = pack  # rows packed into sequences (core/runs/packing.py)
        # Where a packed sequence's attention costs as much as its other layers: about three
        # times the hidden size (measured on the sample model; attention's share shrinks as the
        # layers widen, so wider models pack into longer sequences).
        hidden = getattr(getattr(model, "args", None), "hidden_size", None)
        self.attention_span = 3 * hidden if isinstance(hidden, int) else 1024
        self._slice_losses(chunk_tokens, model)
        self.sliced_loss = (partial(losses.sft_objective, sliced=self.sliced)
                            if self.sliced is not None else None)
        self.sliced_packed_loss = (partial(losses.sft_packed_objective, sliced=self.sliced)
                                   if self.sliced is not None else None)
        # Micro-batches (the micro_batches setting; a rung of the out-of-memory ladder).
        self.micro_batches = int(SETTINGS["micro_batches"].get(settings))
        self._weighted: dict[Any, Any] = {}

    def batches(self, train_set, world, pack: bool | None = None) -> BatchStream:
        """The batch stream: packed as the run says, or as `pack` says (a resume follows
        its checkpoint: a run that started unpacked continues unpacked)."""
        if self.pack if pack is None else pack:
            return PackedBatchStream(train_set, self.settings.batch_size,
                                     self.settings.max_seq_length, world.rank, world.size,
                                     attention_span=self.attention_span)
        return BatchStream(train_set, self.settings.batch_size, self.settings.max_seq_length,
                           world.rank, world.size)

    def _loss_for(self, batch):
        if len(batch) == 4:  # a packed batch: inputs, targets, mask, segments
            return (self.sliced_packed_loss if self._sliced_for(batch[0])
                    else losses.sft_packed_objective)
        return self.sliced_loss if self._sliced_for(batch[0]) else losses.sft_objective

    def forward_backward(self, engine: StepEngine, batch):
        if self.micro_batches == 1:
            return engine.forward_backward(self._loss_for(batch), *batch)
        return self._micro_batched(engine, batch)

    def _micro_batched(self, engine: StepEngine, batch):
        """The batch's rows in `micro_batches` slices, each slice's mean loss weighted by its
        share of the batch's trained tokens: the weighted gradients add up to the whole
        batch's, and the slices count as one forward_backward in the update's average. The
        loop never compiles these with the update (`update_with_next`)."""
        parts = losses.row_slices(batch, self.micro_batches)
        counts = [losses.trained_tokens(part) for part in parts]
        total = sum(counts)
        loss = ntoks = 0
        for part, count in zip(parts, counts):
            objective = self._loss_for(part)
            weighted = self._weighted.get(objective)
            if weighted is None:
                weighted = self._weighted[objective] = partial(losses.weighted_loss, objective)
            part_loss, part_tokens, _ = engine.forward_backward(
                weighted, (count / total).astype(mx.float32), *part, key=("micro", objective))
            loss, ntoks = loss + part_loss, ntoks + part_tokens
        engine.count_as_one(len(parts))
        return loss, ntoks, {}

    def validate(self, model, val_set) -> tuple[float, dict[str, float]]:
        s = self.settings
        loss = (default_loss if self.sliced is None
                else partial(losses.sft_validation_loss, sliced=self.sliced))
        loss = evaluate(model=model, dataset=val_set, loss=loss,
                        batch_size=s.batch_size, num_batches=s.val_batches,
                        max_seq_length=s.max_seq_length)
        model.train()
        return loss, {}


class Reference:
    """DPO's reference log-probabilities: the base (the trained model with its adapters
    switched off; for full fine-tuning a frozen copy loaded once), or another model folder."""

    def __init__(self, model, base_path: str, reference: str = "base",
                 chunk_tokens: int | str = "off", temperature: float = 1.0) -> None:
        self.model = model
        self.base_path = base_path
        self.reference = reference
        self.chunk_tokens = chunk_tokens  # the chunked loss's slice, as the run has it
        # GRPO's KL term reads the reference at the temperature the policy is scored at
        # (its sampling temperature); DPO's scores are at 1.
        self.temperature = temperature
        self._loaded = None
        self._sliced: dict[tuple[int, int | str], Any] = {}
        self._compiled: dict[int, Any] = {}  # token_logprobs compiled, by model
        self._shared: dict[int, Any] = {}  # answer_logprobs compiled, by model

    @property
    def needs_copy(self) -> bool:
        return self.reference != "base" or not has_adapters(self.model)

    def _other(self):
        if self._loaded is None:
            from mlx_lm import load

            model, _ = load(self.base_path if self.reference == "base" else self.reference)
            model.freeze()
            model.eval()
            self._loaded = model
        return self._loaded

    def _forward_in_slices(self, model, tokens: mx.array, chunk_tokens: int | str):
        """The chunked loss's forward for `model` when this batch is sliced, else None."""
        key = id(model), chunk_tokens
        if key not in self._sliced:
            sliced = loss_slicing(model, chunk_tokens)[0]
            self._sliced[key] = (sliced.at_temperature(self.temperature)
                                 if sliced is not None else None)
        sliced = self._sliced[key]
        return sliced.forward if sliced is not None and sliced.worth_it(tokens) else None

    def scores(self, tokens: mx.array, lengths: mx.array, variant: str,
               chunk_tokens: int | str | None = None) -> mx.array:
        """Per row: the summed log-probability of its trained tokens (length-normalized for
        ipo), evaluated, with no gradient; sliced as `chunk_tokens` says (default: as the
        run's loss is)."""
        chunk = self.chunk_tokens if chunk_tokens is None else chunk_tokens
        if self.needs_copy:
            other = self._other()
            scores, counts = losses.sequence_logprobs(
                other, tokens, lengths, self._forward_in_slices(other, tokens, chunk))
        else:
            with adapters_disabled(self.model):
                scores, counts = losses.sequence_logprobs(
                    self.model, tokens, lengths, self._forward_in_slices(self.model, tokens, chunk))
        if variant == "ipo":
            scores = scores / mx.maximum(counts, 1)
        scores = mx.stop_gradient(scores)
        mx.eval(scores)
        return scores


    def _compiled_logprobs(self, model):
        """losses.token_logprobs of `model` compiled (fused: less time than run op by op).
        Traced, for each batch shape, inside token_logprobs's block, so with the adapters off;
        the weights it reads never change (the base's, or the frozen copy's)."""
        compiled = self._compiled.get(id(model))
        if compiled is None:
            compiled = self._compiled[id(model)] = mx.compile(
                lambda tokens, lengths: losses.token_logprobs(
                    model, tokens, lengths, temperature=self.temperature)[0])
        return compiled

    def token_logprobs(self, tokens: mx.array, lengths: mx.array) -> mx.array:
        """(B, T - 1) log-probability of each trained token (0 elsewhere), evaluated, with no
        gradient: GRPO's KL term reads them."""
        model = self._other() if self.needs_copy else self.model
        with contextlib.nullcontext() if self.needs_copy else adapters_disabled(self.model):
            sliced = self._forward_in_slices(model, tokens, self.chunk_tokens)
            if sliced is None:
                logps = self._compiled_logprobs(model)(tokens, lengths)
            else:
                logps, _ = losses.token_logprobs(model, tokens, lengths, sliced)
        logps = mx.stop_gradient(logps)
        mx.eval(logps)
        return logps

    def _compiled_answer_logprobs(self, model):
        """SharedPrompts.answer_logprobs of `model` compiled (and its sliced form, when the
        run slices its loss), as `_compiled_logprobs` is."""
        if id(model) not in self._shared:
            shared = SharedPrompts.for_model(model)
            if shared is None:
                raise RuntimeError("the reference cannot score answers that share prompts")
            shared = shared.at_temperature(self.temperature)
            sliced = loss_slicing(model, self.chunk_tokens)[0]
            sliced = sliced.at_temperature(self.temperature) if sliced is not None else None
            self._shared[id(model)] = (
                mx.compile(lambda *arrays: shared.answer_logprobs(*arrays)[0]),
                sliced, partial(shared.answer_logprobs,
                                sliced=sliced.forward_of_hidden if sliced else None))
        return self._shared[id(model)]

    def answer_logprobs(self, prompts: mx.array, padding: mx.array, answers: mx.array,
                        lengths: mx.array) -> mx.array:
        """`token_logprobs` of answers that share their prompts (trainer/shared_prompts.py's
        layout): (B x G, A) log-probability of each answer token, 0 past its end."""
        model = self._other() if self.needs_copy else self.model
        with contextlib.nullcontext() if self.needs_copy else adapters_disabled(self.model):
            whole, sliced, in_slices = self._compiled_answer_logprobs(model)
            if sliced is not None and sliced.worth_it(answers):
                logps, _ = in_slices(prompts, padding, answers, lengths)
            else:
                logps = whole(prompts, padding, answers, lengths)
        logps = mx.stop_gradient(logps)
        mx.eval(logps)
        return logps


class PreferenceObjective(LossSlicing):
    metric_names = PREFERENCE_METRICS

    def __init__(self, settings: Hyperparameters, model, base_path: str,
                 chunk_tokens: int | str = OFF_TEXT) -> None:
        self.settings = settings
        self._slice_losses(chunk_tokens, model)
        self.kind = SETTINGS["objective"].get(settings)
        self.beta = float(SETTINGS["beta"].get(settings))
        self.variant = SETTINGS["dpo_loss"].get(settings)
        self.reference = (Reference(model, base_path, SETTINGS["reference"].get(settings),
                                    chunk_tokens)
                          if self.kind == "dpo" else None)
        if self.kind == "dpo":
            self.loss = partial(losses.dpo_objective, beta=self.beta, variant=self.variant)
        else:
            self.loss = partial(losses.orpo_objective, beta=self.beta)
        self.key = (self.kind, self.beta, self.variant)
        self.sliced_loss = (partial(self.loss, sliced=self.sliced)
                            if self.sliced is not None else None)

    def batches(self, train_set, world):
        from zyquo_tui.trainer.preference_data import PreferenceBatchStream

        return PreferenceBatchStream(train_set, self.settings.batch_size,
                                     self.settings.max_seq_length, world.rank, world.size)

    def _arrays(self, tokens: mx.array, lengths: mx.array) -> tuple[mx.array, ...]:
        if self.reference is None:
            return tokens, lengths
        return tokens, lengths, self.reference.scores(tokens, lengths, self.variant)

    def forward_backward(self, engine: StepEngine, batch):
        if self._sliced_for(batch[0]):
            return engine.forward_backward(self.sliced_loss, *self._arrays(*batch),
                                           key=(*self.key, "sliced"))
        return engine.forward_backward(self.loss, *self._arrays(*batch), key=self.key)

    def validate(self, model, val_set) -> tuple[float, dict[str, float]]:
        """The mean loss and metrics over the validation batches, dropout off."""
        from zyquo_tui.trainer.preference_data import validation_batches

        s = self.settings
        model.eval()
        totals: dict[str, Any] = {}
        count = 0
        for tokens, lengths in validation_batches(val_set, s.batch_size, s.val_batches,
                                                  s.max_seq_length):
            objective = (partial(self.loss, sliced=self.sliced.forward)
                         if self._sliced_for(tokens) else self.loss)
            loss, _, metrics = objective(model, *self._arrays(tokens, lengths))
            for name, value in {"loss": loss, **metrics}.items():
                totals[name] = totals.get(name, 0) + value
            mx.eval(totals)
            count += 1
        model.train()
        means = {name: float(value.item()) / count for name, value in totals.items()}
        loss = means.pop("loss")
        return loss, {name: means[name] for name in self.metric_names}


class DistillObjective(SftObjective):
    """Distillation (losses.distill_objective, the client's loss): on SFT's batches in SFT's
    order, the KL from the teacher's distribution to the student's at the run's temperature
    over each row's trained tokens (the response, as SFT masks it); with on_policy, over the
    student's own answers to the rows' prompts instead. Validation is the same KL on the
    validation rows' own responses (no sampling: it draws nothing from the random state)."""

    def __init__(self, settings: Hyperparameters, model, tokenizer,
                 chunk_tokens: int | str = OFF_TEXT) -> None:
        from zyquo_tui.trainer.teacher import Teacher, TeacherError, output_width

        super().__init__(settings, model, chunk_tokens)
        self.micro_batches = 1  # (micro-batches are SFT's: a distill step is one call)
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = float(SETTINGS["distill_temperature"].get(settings))
        self.on_policy = bool(SETTINGS["on_policy"].get(settings))
        self.max_completion_tokens = int(SETTINGS["max_completion_tokens"].get(settings))
        try:
            self.teacher = Teacher(str(SETTINGS["teacher"].get(settings)), tokenizer,
                                   output_width(model))
        except TeacherError as error:
            raise fail("config", str(error), error.suggestion) from None

    def _loss_and_arrays(self, tokens: mx.array, lengths: mx.array):
        """The objective with its constants bound, its compile key, and its arrays."""
        sliced = self._sliced_for(tokens)
        teacher, head = self.teacher.side(tokens, self.temperature, sliced)
        loss = partial(losses.distill_objective, temperature=self.temperature,
                       teacher_head=head)
        key: tuple = ("distill", self.temperature, head is not None)
        if sliced:
            loss, key = partial(loss, sliced=self.sliced), (*key, "sliced")
        return loss, key, (tokens, lengths, teacher)

    def forward_backward(self, engine: StepEngine, batch):
        tokens, lengths = batch
        if self.on_policy:
            from zyquo_tui.trainer.on_policy import on_policy_batch

            tokens, lengths = on_policy_batch(self.model, self.tokenizer, tokens, lengths,
                                              self.max_completion_tokens,
                                              self.settings.max_seq_length)
        loss, key, arrays = self._loss_and_arrays(tokens, lengths)
        return engine.forward_backward(loss, *arrays, key=key)

    def validate(self, model, val_set) -> tuple[float, dict[str, float]]:
        s = self.settings

        def loss(model, tokens, lengths):
            objective, _key, arrays = self._loss_and_arrays(tokens, lengths)
            value, ntoks, _metrics = objective(model, *arrays)
            return value, ntoks

        value = evaluate(model=model, dataset=val_set, loss=loss, batch_size=s.batch_size,
                         num_batches=s.val_batches, max_seq_length=s.max_seq_length)
        model.train()
        return value, {}
class GrpoObjective(LossSlicing):
    """GRPO (trainer/grpo.py samples, rewards and scores each batch's answers; losses.py has
    the objective); its reference is the base, as DPO's is."""

    def __init__(self, settings: Hyperparameters, model, base_path: str,
                 chunk_tokens: int | str = OFF_TEXT, tokenizer=None) -> None:
        from zyquo_tui.core.events.protocol import GRPO_METRICS
        from zyquo_tui.trainer import grpo

        self.settings = settings
        self.model = model
        self._slice_losses(chunk_tokens, model)
        beta = float(SETTINGS["kl_beta"].get(settings))
        epsilon = float(SETTINGS["clip_epsilon"].get(settings))
        # Answers are scored at the temperature they were sampled at (as TRL does), so the
        # ratio's old policy is the distribution that drew them; greedy sampling (0) has no
        # such distribution and is scored at 1.
        self.temperature = grpo.scoring_temperature(settings)
        if self.sliced is not None:
            self.sliced = self.sliced.at_temperature(self.temperature)
        reference = (Reference(model, base_path, "base", chunk_tokens, self.temperature)
                     if beta else None)
        # Each prompt computed once for its answers (trainer/shared_prompts.py), unless the
        # model cannot, or its layers are checkpointed: a checkpointed layer differentiates
        # its array arguments only, and the prompt's keys and values reach it in the cache.
        shared = (None if model is None or settings.grad_checkpoint
                  else SharedPrompts.for_model(model))
        self.shared = shared.at_temperature(self.temperature) if shared is not None else None
        self.sampler = grpo.Sampler(settings, model, tokenizer, reference,
                                    shared=self.shared is not None)
        # Each batch of answers trains `iterations` iterations against the log-probabilities
        # of the policy that sampled them (old_logps); with grad accumulation, the
        # accumulation's batches are sampled first and then all reused, one update a pass, as
        # TRL reuses its generation batch.
        self.iterations = int(SETTINGS["grpo_iterations"].get(settings))
        self.accumulation = int(settings.grad_accumulation_steps)
        self.kept: dict[int, tuple[tuple[mx.array, ...], dict[str, float]]] = {}
        reuse = ("reused",) if self.iterations > 1 else ()
        if self.shared is not None:
            self.loss = partial(losses.grpo_shared_objective, beta=beta, epsilon=epsilon,
                                shared=self.shared)
            self.key = ("grpo", beta, epsilon, self.temperature, "shared", *reuse)
        else:
            self.loss = partial(losses.grpo_objective, beta=beta, epsilon=epsilon,
                                temperature=self.temperature)
            self.key = ("grpo", beta, epsilon, self.temperature, *reuse)
        # Without a reference (kl_beta 0) there is no KL to report: its train events have none.
        reported = tuple(name for name in GRPO_METRICS if beta or name != "kl")
        self.metric_names = (*reported, *(grpo.REWARD_MEAN_PREFIX + name
                                          for name in self.sampler.reward_names))
        self.shape_report = grpo.shape_report
        self.samples: list[dict[str, Any]] = []  # the last validation's sample answers
        self.widest = 0  # the widest step's tokens a sequence (prompt + answer), so far

    @property
    def step(self) -> int:
        return self.sampler.step

    @step.setter
    def step(self, value: int) -> None:  # the loop's step in progress: a failing reward names it
        self.sampler.step = value

    def batches(self, train_set, world):
        from zyquo_tui.trainer.prompt_data import PromptBatchStream

        stream = PromptBatchStream(train_set, self.settings.batch_size,
                                   self.settings.max_seq_length, world.rank, world.size)
        return stream if self.iterations == 1 else _ReusedBatches(stream, self)

    def slot_of(self, step: int) -> tuple[int, bool]:
        """Which of the accumulation's batches step `step` (from 1) trains, and whether it
        samples that batch's answers (the first pass of its cycle) or reuses them."""
        within = (step - 1) % (self.accumulation * self.iterations)
        return within % self.accumulation, within < self.accumulation

    def _policy_logprobs(self, arrays) -> mx.array:
        """The log-probabilities of a rollout's answer tokens under the policy that has just
        sampled them (dropout off, as it sampled), at the scoring temperature: the ratio's
        denominator for every iteration that reuses them. Not compiled: the weights move."""
        model = self.model
        training = model.training
        model.eval()
        try:
            predicted = self._predicted(arrays)
            sliced = self._sliced_for(predicted)
            if self.shared is not None:
                logps, _ = self.shared.answer_logprobs(
                    *arrays[:4], sliced=self.sliced.forward_of_hidden if sliced else None)
            else:
                logps, _ = losses.token_logprobs(model, arrays[0], arrays[1],
                                                 self.sliced.forward if sliced else None,
                                                 self.temperature)
        finally:
            model.train(training)
        logps = mx.stop_gradient(logps)
        mx.eval(logps)
        return logps

    def checkpoint_state(self) -> tuple[dict[str, Any], dict[str, mx.array]]:
        """The kept rollouts a resumed run reuses (their arrays and their figures), so that a
        run cancelled mid-cycle resumes exactly; nothing when each batch trains once."""
        meta = {str(slot): metrics for slot, (_, metrics) in self.kept.items()}
        tensors = {f"rollout.{slot}.{i}": array for slot, (arrays, _) in self.kept.items()
                   for i, array in enumerate(arrays)}
        return ({"kept_rollouts": meta} if meta else {}), tensors

    def restore_state(self, meta: dict[str, Any], tensors: dict[str, mx.array]) -> None:
        self.kept = {}
        for slot, metrics in meta.get("kept_rollouts", {}).items():
            count = sum(1 for name in tensors if name.startswith(f"rollout.{slot}."))
            arrays = tuple(tensors[f"rollout.{slot}.{i}"] for i in range(count))
            self.kept[int(slot)] = (arrays, dict(metrics))

    def _predicted(self, arrays) -> mx.array:
        """The array whose shape says how many tokens a step predicts: the answers (shared
        prompts) or the whole sequences."""
        return arrays[2] if self.shared is not None else arrays[0]

    def _sliced_loss(self, forward_only: bool = False):
        """The loss computed a slice of tokens at a time (trainer/chunked_loss.py)."""
        if self.shared is None:
            return partial(self.loss, sliced=self.sliced.forward if forward_only else self.sliced)
        return partial(self.loss, sliced=(self.sliced.forward_of_hidden if forward_only
                                          else self.sliced.of_hidden))

    def forward_backward(self, engine: StepEngine, batch):
        if self.iterations == 1:
            rollout = self.sampler.rollout(batch)
            arrays, figures = rollout.arrays, rollout.metrics()
        else:
            rows, slot = batch
            if rows is not None:  # the cycle's first pass: sampled now, kept for the others
                rollout = self.sampler.rollout(rows)
                arrays = (*rollout.arrays, self._policy_logprobs(rollout.arrays))
                self.kept[slot] = (arrays, rollout.metrics())
            arrays, figures = self.kept[slot]
            if (self.step - 1) % (self.accumulation * self.iterations) >= \
                    self.accumulation * (self.iterations - 1):
                del self.kept[slot]  # its last pass: a checkpoint after it need not keep it
        width = (arrays[0].shape[1] + arrays[2].shape[1] if self.shared is not None
                 else arrays[0].shape[1])
        self.widest = max(self.widest, int(width))
        if self._sliced_for(self._predicted(arrays)):
            loss, ntoks, metrics = engine.forward_backward(
                self._sliced_loss(), *arrays, key=(*self.key, "sliced"))
        else:
            loss, ntoks, metrics = engine.forward_backward(self.loss, *arrays, key=self.key)
        return loss, ntoks, {**metrics, **figures}

    def validate(self, model, val_set) -> tuple[float, dict[str, float]]:
        """The loss and mean reward of answers sampled for the validation prompts (val_batches
        batches of them), dropout off; the first prompts' first answers become `samples`."""
        from zyquo_tui.trainer.prompt_data import validation_rows

        s = self.settings
        model.eval()
        total_loss = total_reward = 0.0
        count = 0
        self.samples = []
        for rows in validation_rows(val_set, s.batch_size, s.val_batches, s.max_seq_length):
            rollout = self.sampler.rollout(rows)
            loss_of = (self._sliced_loss(forward_only=True)
                       if self._sliced_for(self._predicted(rollout.arrays)) else self.loss)
            loss, _, _ = loss_of(model, *rollout.arrays)
            total_loss += loss.item()
            total_reward += rollout.reward_mean
            count += 1
            if len(self.samples) < GRPO_SAMPLES_PER_VALIDATION:
                self.samples += rollout.samples(GRPO_SAMPLES_PER_VALIDATION - len(self.samples))
        model.train()
        if count == 0:
            return math.nan, {}
        return total_loss / count, {"reward_mean": total_reward / count}


# Validation prompts whose first sampled answer becomes a `sample` event, at each validation.
GRPO_SAMPLES_PER_VALIDATION = 3


def packs(settings: Hyperparameters, base_path: str) -> bool:
    """Whether an SFT run packs its rows: `pack` on and a model that allows it
    (core/runs/packing.py). A run that asked for packing on a model that does not allow it
    was refused when it was made; one that reaches here anyway fails with the reason."""
    import json
    from pathlib import Path

    from zyquo_tui.core.runs.packing import packing_refusal

    if SETTINGS["pack"].get(settings) is not True:
        return False
    try:
        config = json.loads((Path(base_path) / "config.json").read_text())
    except (OSError, ValueError):
        config = None
    refusal = packing_refusal(config)
    if refusal is not None:
        raise fail("config", f"This run packs its rows, and {Path(base_path).name} cannot be "
                   f"packed: {refusal}.", "turn packing off (--no-pack)")
    return True


class _ReusedBatches:
    """A grpo run's batch order when each batch trains several iterations: a step that reuses
    its answers takes no new batch (rows None), so the data position moves one batch a
    cycle and is saved and restored as the stream's."""

    def __init__(self, stream, objective: GrpoObjective) -> None:
        self.stream = stream
        self.objective = objective

    def __iter__(self):
        return self

    def __next__(self) -> tuple[Any, int]:
        slot, fresh = self.objective.slot_of(self.objective.step)
        return (next(self.stream) if fresh else None), slot

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def objective_for(settings: Hyperparameters, model, base_path: str,
                  chunk_tokens: int | str = OFF_TEXT, tokenizer=None):
    """The run's objective; `chunk_tokens` is its loss_chunk_tokens as
    `loss_chunk_tokens_for` resolved it (`tokenizer`: the student's, which distillation
    needs and with which a grpo run samples its answers)."""
    if SETTINGS["objective"].get(settings) == "sft":
        return SftObjective(settings, model, chunk_tokens, packs(settings, base_path))
    if SETTINGS["objective"].get(settings) == "distill":
        return DistillObjective(settings, model, tokenizer, chunk_tokens)
    if SETTINGS["objective"].get(settings) == "grpo":
        return GrpoObjective(settings, model, base_path, chunk_tokens, tokenizer)
    return PreferenceObjective(settings, model, base_path, chunk_tokens)
