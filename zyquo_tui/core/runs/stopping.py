"""When the trainer stops a run before its last step: early stopping and divergence.

Both watch the figures the trainer reports and say when a rule the user chose is met; the
trainer (trainer/session.py) acts on it. Plain Python, so the rules are tested without MLX.

- Early stopping: `patience` validations in a row without a loss lower than the best so far
  by at least `min_delta` end the run (completed, with the reason and the best step).
- Divergence: a train loss more than `factor` times its running minimum (and at least
  MIN_GAP above it) for `reports` reports in a row is a warning; config.toml decides whether
  it also stops the run (core/store/user_settings.py).
- No reward signal: a grpo run whose every group's answers got equal rewards for its first
  NO_SIGNAL_STEPS steps has learnt nothing (the advantages are all 0): a warning, once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EARLY_STOPPING = "early_stopping"
DIVERGED = "diverged"
STOP_REASONS = (EARLY_STOPPING, DIVERGED)

DIVERGENCE_FACTOR = 2.0
DIVERGENCE_REPORTS = 3
# A loss near zero doubles from noise alone: "far above" also means this much above, in nats.
MIN_GAP = 0.5


@dataclass
class EarlyStopping:
    """Counts validations without improvement; `triggered` once `patience` have passed."""

    patience: int
    min_delta: float = 0.0
    best_loss: float | None = None
    best_step: int | None = None
    without_improvement: int = 0

    def observe(self, step: int, loss: float) -> bool:
        """Take the validation loss of `step`; True when it is a new best."""
        if not math.isfinite(loss):
            self.without_improvement += 1
            return False
        if self.best_loss is None or loss < self.best_loss - self.min_delta:
            self.best_loss, self.best_step = loss, step
            self.without_improvement = 0
            return True
        if loss < self.best_loss:  # lower, but by less than min_delta: still the best loss
            self.best_loss, self.best_step = loss, step
        self.without_improvement += 1
        return False

    @property
    def triggered(self) -> bool:
        return self.without_improvement >= self.patience

    def sentence(self) -> str:
        by = f" by at least {self.min_delta:g}" if self.min_delta else ""
        noun = "validation" if self.patience == 1 else "validations"
        best = (f"; the best was {self.best_loss:.4f} at step {self.best_step}"
                if self.best_loss is not None else "")
        return (f"Stopped early: the validation loss did not improve{by} for {self.patience} "
                f"{noun}{best}.")


@dataclass
class DivergenceWatch:
    """Flags a train loss that stays far above its running minimum (see the module docstring).

    `observe` returns True once, at the report that completes the streak; a loss back near
    the minimum ends the streak and the watch can flag again later.
    """

    factor: float = DIVERGENCE_FACTOR
    reports: int = DIVERGENCE_REPORTS
    lowest: float | None = None
    streak: int = 0
    flagged: bool = False

    def far_above(self, loss: float) -> bool:
        if self.lowest is None:
            return False
        if not math.isfinite(loss):
            return True
        return loss > self.lowest * self.factor and loss - self.lowest >= MIN_GAP

    def observe(self, loss: float) -> bool:
        if self.far_above(loss):
            self.streak += 1
        else:
            self.streak = 0
            self.flagged = False
            if math.isfinite(loss):
                self.lowest = loss if self.lowest is None else min(self.lowest, loss)
        if self.streak >= self.reports and not self.flagged:
            self.flagged = True
            return True
        return False

    def sentence(self, step: int, loss: float) -> str:
        return (f"The train loss ({loss:.4f} at step {step}) has been more than "
                f"{self.factor:g} times its lowest ({self.lowest:.4f}) for {self.streak} "
                "reports: training may be diverging; a lower learning rate (or a warmup) "
                "usually helps.")


NO_REWARD_SIGNAL = "no_reward_signal"
# Steps of a grpo run with no spread of rewards within any group before it is pointed out.
NO_SIGNAL_STEPS = 10


@dataclass
class RewardSignalWatch:
    """Flags a grpo run whose rewards have told no answer from another for NO_SIGNAL_STEPS
    steps since it started (or resumed): GRPO learns only from the differences within a group,
    so every step so far trained nothing. Typical of a model that cannot answer any prompt
    yet. `observe` returns True once; the first step with a spread ends the watch."""

    steps: int = NO_SIGNAL_STEPS
    first_step: int | None = None  # the first step of the streak, from the first report
    done: bool = False

    def observe(self, step: int, steps_in_report: int, reward_std: float) -> bool:
        if self.done:
            return False
        if reward_std > 0:
            self.done = True
            return False
        if self.first_step is None:
            self.first_step = step - steps_in_report + 1
        if step - self.first_step + 1 >= self.steps:
            self.done = True
            return True
        return False

    def sentence(self, step: int) -> str:
        return (f"For {step - self.first_step + 1} steps (to step {step}) every answer in each "
                "group got the same reward, so grpo had nothing to learn from. A model that "
                "cannot answer any prompt yet needs an sft warm-up first (the sample data's "
                "README shows one); or add a reward that tells answers apart.")
