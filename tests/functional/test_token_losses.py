"""Tinker's losses (trainer/token_losses.py) against Tinker's published definitions, on cases
computed by hand: the summed value and its gradient with respect to the target tokens'
log-probabilities."""

from __future__ import annotations

import math

import mlx.core as mx
import pytest

from zyquo_tui.trainer import token_losses


def value_and_grad(loss_fn: str, lp: list[float], *columns: list[float], **config):
    per_token = token_losses.PER_TOKEN[loss_fn]
    arrays = [mx.array(c, dtype=mx.float32) for c in columns]

    def total(x):
        return per_token(x, *arrays, **config).sum()

    value, grad = mx.value_and_grad(total)(mx.array(lp, dtype=mx.float32))
    return value.item(), grad.tolist()


def test_cross_entropy_is_the_weighted_sum_of_negative_logprobs():
    value, grad = value_and_grad("cross_entropy", [-1.0, -2.0], [1.0, 0.5])
    assert value == pytest.approx(2.0)  # 1 * 1 + 0.5 * 2
    assert grad == pytest.approx([-1.0, -0.5])


def test_importance_sampling_weighs_the_advantage_by_the_ratio():
    log = math.log
    value, grad = value_and_grad("importance_sampling", [log(0.5), log(0.25)],
                                 [log(0.25), log(0.25)], [1.0, -2.0])
    # r = (2, 1): -(2 * 1 + 1 * -2) = 0; d/dlp of -r A is -r A
    assert value == pytest.approx(0.0, abs=1e-6)
    assert grad == pytest.approx([-2.0, 2.0])


def test_ppo_takes_the_smaller_objective_and_clipped_tokens_give_no_gradient():
    lp = [0.0, 0.0, 0.0]
    ratios = [2.0, 1.1, 0.5]
    sampling = [-math.log(r) for r in ratios]
    value, grad = value_and_grad("ppo", lp, sampling, [1.0, 1.0, -1.0])
    # min(2, 1.2) = 1.2 (clipped); 1.1 inside the range; min(-0.5, -0.8) = -0.8 (clipped)
    assert value == pytest.approx(-1.2 - 1.1 + 0.8)
    assert grad == pytest.approx([0.0, -1.1, 0.0], abs=1e-6)
    wider, _ = value_and_grad("ppo", lp, sampling, [1.0, 1.0, -1.0],
                              clip_low_threshold=0.4, clip_high_threshold=3.0)
    assert wider == pytest.approx(-2.0 - 1.1 + 0.5)  # nothing clipped: -sum(r A)


def test_cispo_weighs_the_logprob_by_the_clipped_ratio_without_its_gradient():
    lp = [-1.0, -2.0]
    sampling = [lp[0] - math.log(2.0), lp[1] - math.log(1.1)]
    value, grad = value_and_grad("cispo", lp, sampling, [1.0, 2.0])
    assert value == pytest.approx(-(1.2 * -1.0 * 1.0 + 1.1 * -2.0 * 2.0))  # 5.6
    assert grad == pytest.approx([-1.2, -2.2])  # -clip(r) A: no gradient through r


def test_dro_adds_a_quadratic_penalty_on_the_log_ratio():
    value, grad = value_and_grad("dro", [-1.0], [-1.5], [2.0], beta=0.1)
    assert value == pytest.approx(-(-1.0 * 2.0 - 0.5 * 0.1 * 0.25))  # 2.0125
    assert grad == pytest.approx([-(2.0 - 0.1 * 0.5)])  # -(A - beta (lp - q))


def test_the_objective_sums_over_datums_and_padding_adds_nothing():
    class Uniform:
        """A model whose every prediction is uniform over 4 tokens: log p = -ln 4."""

        def __call__(self, inputs):
            return mx.zeros((*inputs.shape, 4))

    inputs = mx.array([[1, 2, 3], [1, 2, 0]])
    targets = mx.array([[2, 3, 1], [2, 3, 0]])
    mask = mx.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    weights = mx.array([[1.0, 1.0, 0.0], [1.0, 1.0, 5.0]])  # the padded position's 5 is ignored
    objective, _ = token_losses.objective_for("cross_entropy", {})
    loss, tokens, outputs = objective(Uniform(), inputs, targets, mask, weights)
    assert loss.item() == pytest.approx(4 * math.log(4), rel=1e-5)
    assert tokens.item() == 5
    assert outputs["logprobs"].tolist()[1][2] == 0.0


def test_an_unknown_config_key_is_refused():
    with pytest.raises(KeyError, match="beta"):
        token_losses.objective_for("ppo", {"beta": 1.0})
