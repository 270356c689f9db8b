"""GRPO's objective (trainer/losses.py) equals mlx-lm-lora 5.10's `grpo_loss` on the same batch:
the same policy, prompts, sampled answers and advantages give the same loss and gradients; and
the KL term to the reference is 0 while the policy is the reference (a run's first step)."""

from __future__ import annotations

import contextlib
from functools import partial

import pytest

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")
grpo_trainer = pytest.importorskip("mlx_lm_lora.trainer.grpo_trainer")

BETA, EPSILON = 0.1, 0.2


def _lora_model(path, moved: bool):
    """The sample model with LoRA adapters; `moved`: adapters away from 0, so the policy is
    no longer its reference (the base)."""
    from mlx_lm import load
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model, tokenizer = load(str(path))
    model.freeze()
    mx.random.seed(1)
    linear_to_lora_layers(model, 2, {"rank": 4, "dropout": 0.0, "scale": 20.0})
    if moved:
        for _, module in model.named_modules():
            if hasattr(module, "lora_b"):
                module.lora_b = mx.random.normal(module.lora_b.shape) * 0.02
    return model, tokenizer


def _rollout(tokenizer, vocab: int):
    """Two prompts of different lengths, three answers each of different lengths (one of them
    empty but for its end-of-sequence token), and advantages of either sign."""
    from zyquo_tui.trainer.encoding import prompt_tokens

    prompts = [prompt_tokens(tokenizer, "What is 6 plus 9?"),
               prompt_tokens(tokenizer, "Which city is the capital of Sweden and why?")]
    mx.random.seed(3)
    answers = [mx.random.randint(5, vocab, (n,)).tolist() for n in (7, 3, 12, 5, 9, 4)]
    answers[4] = [tokenizer.eos_token_id]
    groups = [0, 0, 0, 1, 1, 1]
    advantages = mx.array([1.2, -0.4, -0.8, 0.5, -1.1, 0.6])
    return prompts, answers, groups, advantages


def _ours(model, prompts, answers, groups, advantages):
    """Our objective's loss and gradients; the reference is the model with adapters off."""
    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.encoding import pad_rows
    from zyquo_tui.trainer.engine import adapters_disabled

    rows = [(prompts[g] + a, len(prompts[g])) for a, g in zip(answers, groups)]
    tokens, lengths, _ = pad_rows(rows, 4096)
    with adapters_disabled(model):
        ref_logps, _ = losses.token_logprobs(model, tokens, lengths)
    objective = partial(losses.grpo_objective, beta=BETA, epsilon=EPSILON)
    (loss, ntoks, metrics), grads = nn.value_and_grad(model, objective)(
        model, tokens, lengths, advantages, mx.stop_gradient(ref_logps))
    return loss, ntoks, metrics, grads


def _ours_shared(model, prompts, answers, groups, advantages):
    """The same with each prompt computed once for its answers (trainer/shared_prompts.py),
    as a grpo run steps when its model allows it."""
    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.engine import adapters_disabled
    from zyquo_tui.trainer.shared_prompts import SharedPrompts, layout

    shared = SharedPrompts.for_model(model)
    assert shared is not None  # the sample model (llama) is one that can
    group = groups.count(0)
    arrays = layout(prompts, answers, group, pad_to=8)
    with adapters_disabled(model):
        ref_logps, _ = shared.answer_logprobs(*arrays)
    objective = partial(losses.grpo_shared_objective, beta=BETA, epsilon=EPSILON, shared=shared)
    (loss, ntoks, metrics), grads = nn.value_and_grad(model, objective)(
        model, *arrays, advantages, mx.stop_gradient(ref_logps))
    return loss, ntoks, metrics, grads


def _theirs(model, reference, prompts, answers, groups, advantages):
    batch = (prompts, [[0]] * len(prompts), ["p"] * len(prompts), ["a"] * len(prompts), None)
    loss_fn = partial(grpo_trainer.grpo_loss, ref_model=reference, batch=batch,
                      completions=[mx.array(a) for a in answers], completion_texts=None,
                      batch_indices=groups, advantages=advantages, beta=BETA, epsilon=EPSILON,
                      max_tokens=64)
    (loss, ntoks, metrics), grads = nn.value_and_grad(model, lambda m: loss_fn(m))(model)
    return loss, ntoks, metrics, grads


@pytest.mark.parametrize("ours", [_ours, _ours_shared], ids=["whole", "shared_prompts"])
def test_grpo_loss_and_gradients_equal_mlx_lm_lora(tiny_model, ours):
    from mlx.utils import tree_flatten
    from mlx_lm import load

    model, tokenizer = _lora_model(tiny_model, moved=True)
    reference, _ = load(str(tiny_model))  # the base: what adapters-off gives ours
    rollout = _rollout(tokenizer, model.args.vocab_size)
    loss, ntoks, metrics, grads = ours(model, *rollout)
    their_loss, their_ntoks, their_metrics, their_grads = _theirs(model, reference, *rollout)

    assert loss.item() == pytest.approx(their_loss.item(), rel=1e-5, abs=1e-6)
    assert ntoks.item() == their_ntoks.item() == sum(len(a) for a in rollout[1])
    assert metrics["kl"].item() > 1e-4  # the policy moved: the KL term is in both losses
    assert metrics["kl"].item() == pytest.approx(their_metrics["kl"].item(), rel=1e-4)
    assert metrics["clip_fraction"].item() == their_metrics["clip_ratio_total"].item() == 0
    ours, theirs = dict(tree_flatten(grads)), dict(tree_flatten(their_grads))
    assert ours.keys() == theirs.keys() and ours
    for name, grad in ours.items():
        scale = mx.abs(theirs[name]).max().item()
        assert scale > 0, name
        assert mx.abs(grad - theirs[name]).max().item() <= 1e-4 * scale, name


@pytest.mark.parametrize("ours", [_ours, _ours_shared], ids=["whole", "shared_prompts"])
def test_the_kl_term_is_zero_while_the_policy_is_its_reference(tiny_model, ours):
    """Fresh adapters (B = 0) leave the model its base: at the first step the KL to the
    reference is 0 and the loss is the clipped term's alone, as it is with beta 0."""
    from zyquo_tui.trainer import losses

    model, tokenizer = _lora_model(tiny_model, moved=False)
    prompts, answers, groups, advantages = _rollout(tokenizer, model.args.vocab_size)
    loss, _, metrics, _ = ours(model, prompts, answers, groups, advantages)
    assert metrics["kl"].item() == 0.0
    logps = mx.array([[-1.0, -2.0, -0.5], [-0.3, -0.7, -4.0]])
    mask = mx.array([[True, True, False], [True, True, True]])
    with_kl, _ = losses.grpo_loss(logps, logps, mask, mx.array([1.0, -1.0]), BETA, EPSILON)
    without, _ = losses.grpo_loss(logps, logps, mask, mx.array([1.0, -1.0]), 0.0, EPSILON)
    assert with_kl.item() == without.item()
    # The clipped term alone, on-policy: -mean_i A_i (every ratio is 1), 0 for these.
    assert loss.item() == pytest.approx(-advantages.mean().item(), abs=1e-6)


def test_a_ratio_past_the_clip_stops_its_gradient_and_counts_as_clipped():
    """Off-policy (old log-probabilities given): a token whose ratio left [1 - ε, 1 + ε] in
    the advantage's direction is clipped: no gradient, and counted in clip_fraction."""
    from zyquo_tui.trainer import losses

    old = mx.array([[-1.0, -1.0]])
    mask = mx.array([[True, True]])

    def loss_of(logps):
        return losses.grpo_loss(logps, logps, mask, mx.array([1.0]), 0.0, EPSILON, old)[0]

    logps = mx.array([[-1.0 + 0.5, -1.0 + 0.05]])  # ratios e^0.5 (clipped) and e^0.05
    grad = mx.grad(loss_of)(logps)
    assert grad[0, 0].item() == 0 and grad[0, 1].item() < 0
    _, metrics = losses.grpo_loss(logps, logps, mask, mx.array([1.0]), 0.0, EPSILON, old)
    assert metrics["clip_fraction"].item() == 0.5


def test_group_advantages_are_normalised_within_each_group():
    from zyquo_tui.trainer.losses import grpo_advantages

    advantages = grpo_advantages([1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5], group_size=4)
    assert advantages[:4] == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-3)
    assert advantages[4:] == [0.0] * 4  # all equal: nothing to learn from that prompt


def test_answers_sharing_prompts_give_the_same_loss_and_gradients_in_slices(tiny_model):
    """The chunked loss (trainer/chunked_loss.py) on the shared prompts' hidden states: the
    same loss and gradients as the whole batch's logits, and the reference's scores in slices
    equal the whole batch's."""
    from mlx.utils import tree_flatten

    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.chunked_loss import sliced_cross_entropy
    from zyquo_tui.trainer.shared_prompts import SharedPrompts, layout

    model, tokenizer = _lora_model(tiny_model, moved=True)
    prompts, answers, groups, advantages = _rollout(tokenizer, model.args.vocab_size)
    shared = SharedPrompts.for_model(model)
    sliced = sliced_cross_entropy(model, 8)
    arrays = layout(prompts, answers, groups.count(0), pad_to=8)
    whole_logps, _ = shared.answer_logprobs(*arrays)
    sliced_logps, _ = shared.answer_logprobs(*arrays, sliced=sliced.forward_of_hidden)
    assert mx.allclose(whole_logps, sliced_logps, atol=1e-5).item()
    ref_logps = mx.stop_gradient(whole_logps) - 0.05
    results = []
    for of_hidden in (None, sliced.of_hidden):
        objective = partial(losses.grpo_shared_objective, beta=BETA, epsilon=EPSILON,
                            shared=shared, sliced=of_hidden)
        results.append(nn.value_and_grad(model, objective)(model, *arrays, advantages,
                                                           ref_logps))
    ((loss, _, _), grads), ((sliced_loss, _, _), sliced_grads) = results
    assert sliced_loss.item() == pytest.approx(loss.item(), rel=1e-5)
    ours, theirs = dict(tree_flatten(grads)), dict(tree_flatten(sliced_grads))
    for name, grad in ours.items():
        scale = mx.abs(grad).max().item()
        assert scale > 0, name
        assert mx.abs(grad - theirs[name]).max().item() <= 1e-4 * scale, name


def test_a_reused_batchs_clipped_token_contributes_no_gradient(tiny_model):
    """The reuse grpo_iterations makes: the answers' log-probabilities under the policy that
    sampled them (adapters at 0) are the ratio's denominator after an update has moved the
    adapters. The tokens whose ratio left [1 - ε, 1 + ε] on the side their advantage pushes
    are clipped: each contributes no gradient, every other token does, and clip_fraction
    counts exactly the clipped ones."""
    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.encoding import pad_rows

    model, tokenizer = _lora_model(tiny_model, moved=False)
    prompts, answers, groups, advantages = _rollout(tokenizer, model.args.vocab_size)
    rows = [(prompts[g] + a, len(prompts[g])) for a, g in zip(answers, groups)]
    tokens, lengths, _ = pad_rows(rows, 4096)
    old, mask = losses.token_logprobs(model, tokens, lengths)  # the sampling policy
    mx.random.seed(5)
    for _, module in model.named_modules():  # one update later
        if hasattr(module, "lora_b"):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.02
    logps, _ = losses.token_logprobs(model, tokens, lengths)

    def loss_of(scores):
        return losses.grpo_loss(scores, scores, mask, advantages, 0.0, EPSILON, old)[0]

    grad = mx.grad(loss_of)(logps)
    ratio = mx.exp(logps - old)
    pushed = advantages[:, None]
    clipped = (((ratio > 1 + EPSILON) & (pushed > 0)) | ((ratio < 1 - EPSILON) & (pushed < 0))
               ) & mask
    kept = mask & ~clipped
    assert clipped.sum().item() > 0 and kept.sum().item() > 0
    assert mx.all(mx.where(clipped, grad, 0) == 0).item()
    assert mx.all(mx.where(kept, grad != 0, True)).item()
    _, metrics = losses.grpo_loss(logps, logps, mask, advantages, 0.0, EPSILON, old)
    assert metrics["clip_fraction"].item() == pytest.approx(
        clipped.sum().item() / mask.sum().item())
    # Without the sampling policy's log-probabilities (each batch trained once) nothing is
    # ever clipped: the ratio is 1.
    _, on_policy = losses.grpo_loss(logps, logps, mask, advantages, 0.0, EPSILON)
    assert on_policy["clip_fraction"].item() == 0


@pytest.mark.parametrize("shared", [False, True], ids=["whole", "shared_prompts"])
@pytest.mark.parametrize("chunk_tokens", ["off", 8], ids=["logits", "sliced"])
def test_a_grpo_run_scores_its_answers_at_the_sampling_temperature(tiny_model, shared,
                                                                   chunk_tokens):
    """The policy's (old_logps), the training loss's and the reference's log-probabilities
    of a rollout are log_softmax(logits / T) at the run's sampling temperature T."""
    from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters
    from zyquo_tui.trainer.encoding import pad_rows
    from zyquo_tui.trainer.engine import adapters_disabled
    from zyquo_tui.trainer.objectives import GrpoObjective
    from zyquo_tui.trainer.shared_prompts import layout

    temperature = 0.5
    model, tokenizer = _lora_model(tiny_model, moved=True)
    hp = Hyperparameters.from_dict({"grad_checkpoint": not shared})
    for key, value in {"objective": "grpo", "sampling_temperature": temperature,
                       "grpo_iterations": 2, "group_size": 3}.items():
        SETTINGS[key].set(hp, value)
    objective = GrpoObjective(hp, model, str(tiny_model), chunk_tokens, tokenizer)
    assert (objective.shared is not None) is shared
    prompts, answers, groups, advantages = _rollout(tokenizer, model.args.vocab_size)
    if shared:
        arrays = layout(prompts, answers, 3, pad_to=8)
    else:
        rows = [(prompts[g] + a, len(prompts[g])) for a, g in zip(answers, groups)]
        arrays = pad_rows(rows, 4096)[:2]

    def expected(reference: bool) -> list[list[float]]:
        """Each answer's token log-probabilities, from whole sequences' logits / T."""
        out = []
        with adapters_disabled(model) if reference else contextlib.nullcontext():
            for answer, g in zip(answers, groups):
                sequence = mx.array(prompts[g] + answer)[None]
                logits = model(sequence[:, :-1])[0, len(prompts[g]) - 1:].astype(mx.float32)
                logps = nn.log_softmax(logits / temperature, axis=-1)
                out.append(mx.take_along_axis(logps, mx.array(answer)[:, None], -1)[:, 0]
                           .tolist())
        return out

    def per_answer(logps) -> list[list[float]]:
        if shared:
            return [logps[i, :len(a)].tolist() for i, a in enumerate(answers)]
        return [logps[i, len(prompts[g]) - 1:len(prompts[g]) - 1 + len(a)].tolist()
                for i, (a, g) in enumerate(zip(answers, groups))]

    model.eval()
    policy = per_answer(objective._policy_logprobs(arrays))
    reference = objective.sampler.reference
    score = reference.answer_logprobs if shared else reference.token_logprobs
    ref = per_answer(score(*arrays))
    for got, want in ((policy, expected(False)), (ref, expected(True))):
        for row, row_want in zip(got, want):
            assert row == pytest.approx(row_want, abs=1e-4)
    # The training loss reads the same log-probabilities: with old_logps its own, every
    # ratio is 1 and nothing is clipped.
    old = objective._policy_logprobs(arrays)
    loss, _, metrics = objective.loss(model, *arrays, advantages, mx.zeros_like(old), old)
    assert metrics["clip_fraction"].item() == 0
    assert loss.item() == pytest.approx(-advantages.mean().item() + 0.1 * metrics["kl"].item(),
                                        abs=1e-4)
