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


def test_a_grpo_run_without_reward_spread_for_ten_steps_is_pointed_out_once():
    from zyquo_tui.core.runs.stopping import RewardSignalWatch

    watch = RewardSignalWatch()
    assert [watch.observe(step, 1, 0.0) for step in range(1, 10)] == [False] * 9
    assert watch.observe(10, 1, 0.0)
    assert "For 10 steps (to step 10) every answer in each group got the same reward" \
        in watch.sentence(10)
    assert not watch.observe(11, 1, 0.0)  # said once


def test_reports_of_several_steps_count_every_step_and_a_spread_ends_the_watch():
    from zyquo_tui.core.runs.stopping import RewardSignalWatch

    resumed = RewardSignalWatch()  # resumed at step 40, reporting every 5 steps
    assert not resumed.observe(45, 5, 0.0)
    assert resumed.observe(50, 5, 0.0) and resumed.first_step == 41
    learning = RewardSignalWatch()
    assert not learning.observe(5, 5, 0.0)
    assert not learning.observe(10, 5, 0.25)  # a group told its answers apart
    assert not learning.observe(15, 5, 0.0)
