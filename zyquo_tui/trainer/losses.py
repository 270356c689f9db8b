"""Every training loss, each a pure function of arrays (docs/client.md has the formulas).

Conventions shared by all of them:
- A batch of sequences is `tokens` (B, T) int32 with `lengths` (B, 2) = (offset, length) per row,
  as mlx-lm's batches are: row i's targets are its tokens at positions offset .. length - 1
  (the prompt, before offset, is masked; offset 0 trains on every token but the first).
- `target_mask` turns that into a (B, T - 1) mask over next-token predictions: those of tokens
  offset .. length - 1. SFT keeps mlx-lm's own mask (`mlx_lm_target_mask`), which also trains
  the prediction that follows the last token (of the padding token 0), so that `sft` equals
  mlx-lm's loss to the last bit; the other losses, like mlx-lm-lora's, do not.
- Objectives (`*_objective`) take the model and arrays and return `(loss, num_tokens,
  metrics)`: the loss is what is differentiated, the rest are auxiliary outputs of
  `nn.value_and_grad`. The pure losses they end in take log-probabilities, so each is tested
  on its own against its reference (mlx-lm for SFT, mlx-lm-lora for DPO and ORPO).
- The objectives that read per-token cross-entropy (SFT, DPO, ORPO, policy gradient) take
  `sliced`, a trainer/chunked_loss.py SlicedCrossEntropy: given, the logits are computed a
  slice of tokens at a time and never for the whole batch (same values; far less memory for
  large vocabularies); the distillation objectives take it too, for their per-token KL
  (`SlicedCrossEntropy.per_token`).
"""

from __future__ import annotations

import math
from functools import partial

import mlx.core as mx
import mlx.nn as nn

DPO_VARIANTS = ("sigmoid", "ipo", "hinge")


# -- masks and log-probabilities ------------------------------------------------------------------

def target_mask(lengths: mx.array, width: int) -> mx.array:
    """(B, width) bool: the predictions of each row's tokens offset .. length - 1."""
    steps = mx.arange(1, width + 1)
    return mx.logical_and(steps >= lengths[:, 0:1], steps < lengths[:, 1:])


def mlx_lm_target_mask(lengths: mx.array, width: int) -> mx.array:
    """mlx-lm 0.32's mask (`default_loss`): `target_mask` plus the prediction after the last
    token, whose target is padding. Used by SFT only, to equal mlx-lm."""
    steps = mx.arange(1, width + 1)
    return mx.logical_and(steps >= lengths[:, 0:1], steps <= lengths[:, 1:])


def token_cross_entropy(model, inputs: mx.array, targets: mx.array, mask: mx.array,
                        sliced=None) -> mx.array:
    """(B, T) cross-entropy of each target, in the logits' dtype: from the whole batch's
    logits, or slice by slice with `sliced` (then 0 outside `mask`)."""
    if sliced is None:
        return nn.losses.cross_entropy(model(inputs), targets)
    return sliced(inputs, targets, mask)


def sequence_logprobs(model, tokens: mx.array, lengths: mx.array, sliced=None
                      ) -> tuple[mx.array, mx.array]:
    """Per row: the summed log-probability of its target tokens, and how many there are."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    mask = target_mask(lengths, targets.shape[1])
    ce = token_cross_entropy(model, inputs, targets, mask, sliced)
    logps = -ce.astype(mx.float32) * mask
    return logps.sum(-1), mask.sum(-1).astype(mx.float32)


# -- SFT ----------------------------------------------------------------------------------------

def sft_objective(model, tokens: mx.array, lengths: mx.array, sliced=None):
    """mlx-lm's masked cross-entropy: the mean over every target token of the batch.

    The same operations in the same order as mlx_lm.tuner.trainer.default_loss (0.32), so the
    trainer's losses equal `mlx_lm lora`'s exactly (tests/functional/test_trainer_fidelity.py); with
    `sliced`, the same values within float rounding (tests/functional/test_chunked_loss.py).
    """
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    mask = mlx_lm_target_mask(lengths, targets.shape[1])
    ce = token_cross_entropy(model, inputs, targets, mask, sliced) * mask
    ntoks = mask.sum()
    return ce.astype(mx.float32).sum() / ntoks, ntoks, {}


def packed_token_losses(model, inputs: mx.array, targets: mx.array, mask: mx.array,
                        segments: mx.array, sliced=None) -> mx.array:
    """(B, T) cross-entropy of each trained prediction of a packed batch (trainer/batches.py's
    PackedBatchStream), 0 elsewhere; attention kept inside each row (trainer/packing.py)."""
    from zyquo_tui.trainer.packing import packed_attention

    with packed_attention(model, segments):
        return token_cross_entropy(model, inputs, targets, mask, sliced) * mask


def sft_packed_objective(model, inputs: mx.array, targets: mx.array, mask: mx.array,
                         segments: mx.array, sliced=None):
    """`sft_objective` on a packed batch: the mean over every trained token, the same tokens
    mlx-lm trains in the same rows unpacked (the prediction after each row's last token too)."""
    ce = packed_token_losses(model, inputs, targets, mask, segments, sliced)
    ntoks = mask.sum()
    return ce.astype(mx.float32).sum() / ntoks, ntoks, {}


def trained_tokens(batch) -> mx.array:
    """The tokens an SFT batch trains (unpacked: tokens and lengths; packed: inputs, targets,
    mask and segments), counted as sft_objective and sft_packed_objective count them."""
    if len(batch) == 4:
        return batch[2].sum()
    tokens, lengths = batch
    return mlx_lm_target_mask(lengths, tokens.shape[1] - 1).sum()


def row_slices(batch, parts: int) -> list[tuple[mx.array, ...]]:
    """An SFT batch's rows (a packed batch's sequences) in at most `parts` slices of as even a
    size as can be, in order; each array of the batch sliced alike."""
    rows = batch[0].shape[0]
    parts = max(min(parts, rows), 1)
    bounds = [rows * i // parts for i in range(parts + 1)]
    return [tuple(array[start:end] for array in batch)
            for start, end in zip(bounds, bounds[1:])]


def weighted_loss(objective, model, weight: mx.array, *arrays):
    """`objective`'s loss times `weight` (a micro-batch's share of its batch's tokens, so the
    slices' gradients add up to the batch's; trainer/objectives.py)."""
    loss, ntoks, metrics = objective(model, *arrays)
    return loss * weight, ntoks, metrics


def sft_validation_loss(model, tokens: mx.array, lengths: mx.array, sliced):
    """`sft_objective`'s loss and token count, in slices and without the gradient's work, as
    mlx-lm's `evaluate` calls a loss."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    mask = mlx_lm_target_mask(lengths, targets.shape[1])
    ce = sliced.forward(inputs, targets, mask) * mask
    ntoks = mask.sum()
    return ce.astype(mx.float32).sum() / ntoks, ntoks


# -- preference: DPO and ORPO -------------------------------------------------------------------

def dpo_loss(policy_chosen: mx.array, policy_rejected: mx.array, reference_chosen: mx.array,
             reference_rejected: mx.array, beta: float, variant: str = "sigmoid"
             ) -> tuple[mx.array, dict[str, mx.array]]:
    """Direct Preference Optimization (Rafailov et al. 2023) on per-row sequence scores.

    h = (pc - pr) - (rc - rr);  sigmoid: -log σ(β h);  hinge: max(0, 1 - β h);
    ipo (Azar et al. 2023): (h - 1 / 2β)², on length-normalized scores (the caller's job, as
    in mlx-lm-lora). Rewards are β (policy - reference) per row; the metrics are per-row
    figures averaged over the batch (mlx-lm-lora compares batch means instead).
    """
    h = (policy_chosen - policy_rejected) - (reference_chosen - reference_rejected)
    if variant == "sigmoid":
        losses = -nn.log_sigmoid(beta * h)
    elif variant == "hinge":
        losses = nn.relu(1 - beta * h)
    elif variant == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    else:
        raise ValueError(f"unknown DPO variant {variant!r}; use one of {', '.join(DPO_VARIANTS)}")
    chosen_reward = beta * (policy_chosen - reference_chosen)
    rejected_reward = beta * (policy_rejected - reference_rejected)
    return losses.mean(), _preference_metrics(chosen_reward, rejected_reward)


def _preference_metrics(chosen_reward: mx.array, rejected_reward: mx.array) -> dict:
    return {
        "chosen_reward": chosen_reward.mean(),
        "rejected_reward": rejected_reward.mean(),
        "reward_margin": (chosen_reward - rejected_reward).mean(),
        "reward_accuracy": (chosen_reward > rejected_reward).astype(mx.float32).mean(),
    }


def log1mexp(logp: mx.array) -> mx.array:
    """log(1 - exp(x)) for x < 0, stably on both sides of -ln 2 (Mächler 2012)."""
    logp = mx.minimum(logp, -1e-7)
    return mx.where(logp > -math.log(2), mx.log(-mx.expm1(logp)), mx.log1p(-mx.exp(logp)))


def orpo_loss(chosen_logp: mx.array, rejected_logp: mx.array, beta: float
              ) -> tuple[mx.array, dict[str, mx.array]]:
    """Odds Ratio Preference Optimization (Hong et al. 2024), reference-free.

    On per-row mean token log-probabilities c and r: L = -c - β log σ(log odds(c) - log
    odds(r)), with log odds(p) = p - log(1 - e^p); averaged over rows. β weighs the odds-ratio
    term against the NLL of the chosen response (the paper's λ).
    """
    log_odds = (chosen_logp - rejected_logp) - (log1mexp(chosen_logp) - log1mexp(rejected_logp))
    ratio = nn.log_sigmoid(log_odds)
    losses = -chosen_logp - beta * ratio
    metrics = _preference_metrics(beta * chosen_logp, beta * rejected_logp)
    metrics.update(nll=(-chosen_logp).mean(), log_odds_ratio=log_odds.mean())
    return losses.mean(), metrics


def split_pairs(scores: mx.array) -> tuple[mx.array, mx.array]:
    """Chosen rows come first in a preference batch, rejected rows after them."""
    half = scores.shape[0] // 2
    return scores[:half], scores[half:]


def dpo_objective(model, tokens, lengths, reference_scores, beta, variant, sliced=None):
    """DPO on a batch of chosen rows then rejected rows; `reference_scores` were computed
    beforehand with the reference (no gradient flows into them)."""
    logps, counts = sequence_logprobs(model, tokens, lengths, sliced)
    if variant == "ipo":
        logps = logps / mx.maximum(counts, 1)
    pc, pr = split_pairs(logps)
    rc, rr = split_pairs(reference_scores)
    loss, metrics = dpo_loss(pc, pr, rc, rr, beta, variant)
    return loss, counts.sum(), metrics


def orpo_objective(model, tokens, lengths, beta, sliced=None):
    logps, counts = sequence_logprobs(model, tokens, lengths, sliced)
    mean_logps = logps / mx.maximum(counts, 1)
    chosen, rejected = split_pairs(mean_logps)
    loss, metrics = orpo_loss(chosen, rejected, beta)
    return loss, counts.sum(), metrics


# -- reinforcement learning: advantages ---------------------------------------------------------

def policy_gradient_loss(mean_logp: mx.array, advantages: mx.array) -> mx.array:
    """REINFORCE (Williams 1992) with per-row advantages: -(1/B) Σ A_i · mean_t log π(y_it).

    The advantage weighs the log-likelihood before differentiation, so a row with advantage 0
    contributes no gradient at all.
    """
    return -(advantages * mean_logp).mean()


def group_normalized(advantages: list[float], groups: list[int], eps: float = 1e-6) -> list[float]:
    """GRPO's advantages (Shao et al. 2024): each row's reward minus its group's mean, over the
    group's standard deviation. A group of one, or one whose rewards are all equal, gets 0."""
    by_group: dict[int, list[float]] = {}
    for value, group in zip(advantages, groups, strict=True):
        by_group.setdefault(group, []).append(value)
    stats = {}
    for group, values in by_group.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        stats[group] = (mean, std)
    return [(v - stats[g][0]) / (stats[g][1] + eps) if stats[g][1] > 0 else 0.0
            for v, g in zip(advantages, groups, strict=True)]


def policy_gradient_objective(model, tokens, lengths, advantages, sliced=None):
    logps, counts = sequence_logprobs(model, tokens, lengths, sliced)
    mean_logp = logps / mx.maximum(counts, 1)
    loss = policy_gradient_loss(mean_logp, advantages)
    return loss, counts.sum(), {"mean_logprob": mean_logp.mean(),
                                "mean_advantage": advantages.mean()}


# -- distillation -------------------------------------------------------------------------------

def distill_kl(student_logits: mx.array, teacher_logprobs: mx.array, temperature: float
               ) -> mx.array:
    """Per token: KL(teacher || student) at temperature T, times T² (Hinton et al. 2015, so the
    gradient's scale does not depend on T). `teacher_logprobs` are log-softmax(teacher logits /
    T) over the whole vocabulary; a student whose output is wider (padding rows past a shared
    tokenizer's tokens) is compared over the teacher's width (trainer/teacher.py narrows a
    wider teacher to the student's)."""
    width = teacher_logprobs.shape[-1]
    if student_logits.shape[-1] > width:
        student_logits = student_logits[..., :width]
    student = nn.log_softmax(student_logits.astype(mx.float32) / temperature, axis=-1)
    kl = (mx.exp(teacher_logprobs) * (teacher_logprobs - student)).sum(-1)
    return kl * temperature ** 2


def distill_kl_from_hidden(student_logits: mx.array, teacher_hidden: mx.array,
                           teacher_head, temperature: float) -> mx.array:
    """`distill_kl` with the teacher's log-probabilities made here from its last hidden
    states by its output head: given a slice of tokens (`SlicedCrossEntropy.per_token`), the
    teacher's full-vocabulary log-probabilities then exist a slice at a time, as the
    student's logits do, never for the whole batch."""
    logits = teacher_head(teacher_hidden).astype(mx.float32) / temperature
    teacher = mx.stop_gradient(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    return distill_kl(student_logits, teacher, temperature)


def distill_topk_kl(student_logits: mx.array, teacher_ids: mx.array,
                    teacher_logprobs: mx.array, temperature: float) -> mx.array:
    """The same KL on the teacher's top-k tokens only: the teacher's k log-probabilities (at
    temperature 1) are divided by T and renormalized over those k; the student's come from its
    full softmax at T. With k equal to the vocabulary this is `distill_kl` exactly. Unused
    slots hold PAD_LOGPROB (weight 0; finite, so no NaN reaches a gradient)."""
    student = nn.log_softmax(student_logits.astype(mx.float32) / temperature, axis=-1)
    student_k = mx.take_along_axis(student, teacher_ids, axis=-1)
    teacher = teacher_logprobs / temperature
    teacher = teacher - mx.logsumexp(teacher, axis=-1, keepdims=True)
    kl = (mx.exp(teacher) * (teacher - student_k)).sum(-1)
    return kl * temperature ** 2


PAD_LOGPROB = -1e9


def _masked_mean(values: mx.array, mask: mx.array):
    # The token count is computed once and reused: mlx 0.32's compile fails
    # ("_Map_base::at") on a graph that sums the same mask twice.
    ntoks = mask.sum()
    return (values * mask).sum() / ntoks, ntoks


def _per_token(model, inputs: mx.array, loss, targets: tuple[mx.array, ...], sliced):
    """(B, T) `loss(student_logits, *targets)`: from the whole batch's logits, or slice by
    slice with `sliced`."""
    if sliced is None:
        return loss(model(inputs), *targets)
    return sliced.per_token(inputs, loss, *targets)


def distill_objective(model, tokens, lengths, teacher, temperature, sliced=None,
                      teacher_head=None):
    """`teacher`: the teacher's log-softmax(logits / T), (B, T - 1, V) float32; or, with
    `teacher_head`, its last hidden states (B, T - 1, H), which that head turns into logits
    slice by slice (`distill_kl_from_hidden`): the same loss without the teacher's whole-batch
    log-probabilities."""
    mask = target_mask(lengths, tokens.shape[1] - 1)
    if teacher_head is None:
        kl_of = partial(distill_kl, temperature=temperature)
    else:
        kl_of = partial(distill_kl_from_hidden, teacher_head=teacher_head,
                        temperature=temperature)
    kl = _per_token(model, tokens[:, :-1], kl_of, (teacher,), sliced)
    loss, ntoks = _masked_mean(kl, mask)
    return loss, ntoks, {}


def distill_topk_objective(model, tokens, lengths, teacher_ids, teacher_logprobs, temperature,
                           sliced=None):
    mask = target_mask(lengths, tokens.shape[1] - 1)
    kl = _per_token(model, tokens[:, :-1], partial(distill_topk_kl, temperature=temperature),
                    (teacher_ids, teacher_logprobs), sliced)
    loss, ntoks = _masked_mean(kl, mask)
    return loss, ntoks, {}


# -- reinforcement learning: GRPO ---------------------------------------------------------------

# The bound on a token's log-ratio to the reference inside the KL term, so exp() cannot
# overflow when the policy has moved far from it (mlx-lm-lora's _MAX_KL_LOG_RATIO).
MAX_KL_LOG_RATIO = 20.0
# Added to a group's standard deviation before dividing by it (mlx-lm-lora's).
GRPO_ADVANTAGE_EPS = 1e-4


def grpo_advantages(rewards: list[float], group_size: int) -> list[float]:
    """GRPO's advantages for rows sampled `group_size` at a time from each prompt (row i is
    prompt i // group_size's): `group_normalized` with mlx-lm-lora's epsilon, so a group whose
    rewards are all equal teaches nothing."""
    return group_normalized(rewards, [i // group_size for i in range(len(rewards))],
                            eps=GRPO_ADVANTAGE_EPS)


def grpo_loss(logps: mx.array, ref_logps: mx.array, mask: mx.array, advantages: mx.array,
              beta: float, epsilon: float, old_logps: mx.array | None = None
              ) -> tuple[mx.array, dict[str, mx.array]]:
    """Group Relative Policy Optimization (Shao et al. 2024) on per-token log-probabilities
    (B, T) of sampled answers, `mask` marking their tokens:

        r_t = π(y_t) / π_old(y_t);  L_i = mean_t [ -min(r_t A_i, clip(r_t, 1-ε, 1+ε) A_i)
                                                     + β KL_t ];  L = mean_i L_i
        KL_t = e^d - d - 1 with d = log π_ref(y_t) - log π(y_t) (Schulman's k3, d at most 20)

    `old_logps` are the sampling policy's (given when a batch of answers trains
    grpo_iterations > 1 times, TRL's mu: from the second iteration on the policy has moved and
    the clip acts); None means this step sampled them (each sample is trained on once, as
    mlx-lm-lora does), so r_t is 1 in value and carries the gradient of log π. The same
    operations as mlx-lm-lora 5.10's `_grpo_objective` (loss type "grpo", token-level
    ratios): the same loss and gradients (tests/functional/test_grpo_loss.py). Metrics:
    `kl`, the mean over rows of the per-token KL; `clip_fraction`, the share of answer tokens
    whose ratio was clipped where it mattered."""
    logps = mx.where(mask, logps.astype(mx.float32), 0)
    ref_logps = mx.where(mask, mx.stop_gradient(ref_logps.astype(mx.float32)), 0)
    old = mx.stop_gradient(logps if old_logps is None
                           else mx.where(mask, old_logps.astype(mx.float32), 0))
    ratio = mx.exp(logps - old)
    clipped = mx.clip(ratio, 1 - epsilon, 1 + epsilon)
    advantage = mx.stop_gradient(advantages.astype(mx.float32))[:, None]
    per_token = -mx.minimum(ratio * advantage, clipped * advantage)
    delta = mx.minimum(ref_logps - logps, MAX_KL_LOG_RATIO)
    kl = mx.maximum(mx.expm1(delta) - delta, 0)  # expm1: exact near 0, where KL is quadratic
    if beta != 0:
        per_token = per_token + beta * kl
    counts = mx.maximum(mask.sum(axis=1), 1)
    loss = (mx.where(mask, per_token, 0).sum(axis=1) / counts).mean()
    clipped_where_it_matters = (((ratio < 1 - epsilon) & (advantage < 0))
                                | ((ratio > 1 + epsilon) & (advantage > 0))) & mask
    metrics = {
        "kl": (mx.where(mask, kl, 0).sum(axis=1) / counts).mean(),
        "clip_fraction": clipped_where_it_matters.sum() / mx.maximum(mask.sum(), 1),
    }
    return loss, metrics


def token_logprobs(model, tokens: mx.array, lengths: mx.array, sliced=None,
                   temperature: float = 1.0) -> tuple[mx.array, mx.array]:
    """(B, T - 1) log-probabilities of each row's target tokens (0 elsewhere) and their mask,
    under softmax(logits / temperature) (`sliced`, when given, must be made at that
    temperature: SlicedCrossEntropy.at_temperature)."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    mask = target_mask(lengths, targets.shape[1])
    if sliced is None and temperature != 1.0:
        ce = nn.losses.cross_entropy(model(inputs).astype(mx.float32) / temperature, targets)
    else:
        ce = token_cross_entropy(model, inputs, targets, mask, sliced)
    return mx.where(mask, -ce.astype(mx.float32), 0), mask


def grpo_objective(model, tokens, lengths, advantages, ref_logps, old_logps=None, *, beta,
                   epsilon, sliced=None, temperature: float = 1.0):
    """GRPO on a batch of prompts with their sampled answers: `lengths` (offset, length) mark
    each answer (its end-of-sequence token included: stopping is one of its choices), and
    `ref_logps` (B, T - 1) are the reference's log-probabilities of the same tokens, computed
    beforehand (no gradient flows into them; unused when beta is 0); `old_logps` the sampling
    policy's, when the answers are trained more than once (grpo_iterations). Log-probabilities
    are taken at `temperature`, the one the answers were sampled at."""
    logps, mask = token_logprobs(model, tokens, lengths, sliced, temperature)
    loss, metrics = grpo_loss(logps, ref_logps, mask, advantages, beta, epsilon, old_logps)
    return loss, mask.sum(), metrics


def grpo_shared_objective(model, prompts, padding, answers, lengths, advantages, ref_logps,
                          old_logps=None, *, beta, epsilon, shared, sliced=None):
    """`grpo_objective` on a batch whose answers share their prompts, each prompt computed once
    for its group (trainer/shared_prompts.py has the layout; `shared` is the model's
    SharedPrompts, made at the sampling temperature): the same loss and gradients.
    `ref_logps` (B x G, A) are the reference's log-probabilities of the answer tokens;
    `old_logps` the sampling policy's, or None; `sliced`, a SlicedCrossEntropy's `of_hidden`
    (or `forward_of_hidden` without the gradient), at the same temperature."""
    logps, mask = shared.answer_logprobs(prompts, padding, answers, lengths, sliced)
    loss, metrics = grpo_loss(logps, ref_logps, mask, advantages, beta, epsilon, old_logps)
    return loss, mask.sum(), metrics
