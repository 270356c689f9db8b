"""A loss as the dashboard writes it: four decimals, and a GRPO objective a hair below zero
(its validation loss at the first step) as 0.0000, not -0.0000."""

from __future__ import annotations

import math

from zyquo_tui.core.formatting import fmt_loss


def test_a_loss_is_written_with_four_decimals_and_no_negative_zero():
    assert [fmt_loss(v) for v in (1.23456, 0.0, -2e-9, -0.0, 2e-9, -0.00006, -1.5)] == \
        ["1.2346", "0.0000", "0.0000", "0.0000", "0.0000", "-0.0001", "-1.5000"]
    assert fmt_loss(None) == "–" and fmt_loss(math.inf) == "inf"
