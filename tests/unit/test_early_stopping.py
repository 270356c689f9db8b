"""Early stopping and divergence: the rules on their own, then real runs that stop by them."""

from __future__ import annotations

from zyquo_tui.core.runs.stopping import DivergenceWatch, EarlyStopping


def test_patience_counts_validations_without_enough_improvement():
    early = EarlyStopping(patience=2, min_delta=0.1)
    assert early.observe(1, 5.0) and early.best_step == 1
    assert not early.observe(2, 4.95)  # lower, but by less than min_delta
    assert early.best_step == 2 and not early.triggered
    assert early.observe(3, 4.8)  # 0.15 below the best: improvement, the count restarts
    assert not early.observe(4, 4.9) and not early.triggered
    assert not early.observe(5, 4.75)
    assert early.triggered and early.best_step == 5
    assert "did not improve by at least 0.1 for 2 validations" in early.sentence()


def test_divergence_needs_a_streak_far_above_the_lowest_loss():
    watch = DivergenceWatch(factor=2.0, reports=3)
    assert not any(watch.observe(loss) for loss in (5.0, 3.0, 1.0, 2.5, 2.6, 1.1))
    assert watch.lowest == 1.0  # 2.5 and 2.6 were far above, but only two in a row
    assert [watch.observe(loss) for loss in (2.2, 3.0, 2.4)] == [False, False, True]
    assert "more than 2 times its lowest (1.0000) for 3 reports" in watch.sentence(9, 2.4)
    assert not watch.observe(2.5), "one warning per streak"


def test_a_small_loss_doubling_by_noise_is_not_divergence():
    watch = DivergenceWatch(factor=2.0, reports=2)
    assert not any(watch.observe(loss) for loss in (0.05, 0.2, 0.3, 0.25, 0.4))
