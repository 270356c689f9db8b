"""What a distillation run's step costs in time beside training, as the duration estimate
counts it when its basis run did not distill the same way: the teacher's forward pass of every
trained token (scaled by the teacher's size) and, on-policy, the student's sampling of its
answers."""

from __future__ import annotations

import pytest
from test_memory import facts

from zyquo_tui.core.memory.duration import _same_distillation, distill_share, model_size
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters


def distill_hp(**settings) -> Hyperparameters:
    hp = Hyperparameters.from_dict({"batch_size": 4})
    for key, value in {"objective": "distill", "teacher": "/models/teacher",
                       "max_completion_tokens": 63, **settings}.items():
        SETTINGS[key].set(hp, value)
    return hp


def test_each_trained_token_also_costs_the_teachers_forward_pass_by_its_size():
    student = facts()
    size = model_size(student)
    # A teacher as large as the student: its forward pass is a third of a training token.
    assert distill_share(distill_hp(), student, size, [40]) == pytest.approx(1 / (1 + 1 / 3))
    # One three times as large costs as much as the student's forward and backward.
    assert distill_share(distill_hp(), student, 3 * size, [40]) == pytest.approx(1 / 2)
    # A teacher whose folder cannot be read counts at the student's size.
    assert distill_share(distill_hp(), student, None, [40]) == pytest.approx(1 / (1 + 1 / 3))


def test_on_policy_the_students_sampling_of_its_answers_is_counted_too():
    student = facts()
    size = model_size(student)
    off = distill_share(distill_hp(), student, size, [36])
    on = distill_share(distill_hp(on_policy=True), student, size, [36])
    # 64 sampled tokens (63 and the stop token) after a 36-token prompt: a forward pass each.
    assert on == pytest.approx(1 / (1 + 1 / 3 + 64 / (36 + 64) / 3))
    assert on < off


def test_a_basis_that_distilled_from_the_same_teacher_the_same_way_counts_it_already():
    hp = distill_hp()
    assert _same_distillation(hp, distill_hp())
    assert not _same_distillation(hp, distill_hp(teacher="/models/other"))
    assert not _same_distillation(hp, distill_hp(on_policy=True))
    assert not _same_distillation(hp, Hyperparameters.from_dict({"batch_size": 4}))
