"""Evaluating a model on rows with reference answers: the figures `zyquo-tui eval` shows for the
base and the adapter, and a run's `eval` events (`--eval-every`).

For each row (core/library/eval_rows.py):
- nll: the mean negative log-likelihood per token of the reference answer given the prompt,
  the row rendered as training renders it with the prompt masked (encoding.encode_row: the
  chat template's answer turn, its end-of-turn tokens included);
- with a scorer, the greedy answer (sampling.complete_batch, temperature 0, from
  encoding.prompt_tokens, as `runs try` answers) scored by it: `exact` is 1 when the answer
  equals the reference once both are normalised (`normalised`), a reward is the reward
  functions' weighted total for it (trainer/rewards.py, mlx-lm-lora's signature; a reward
  that does not apply counts 0, as in a grpo run).
Each figure is summarised over the rows as its mean, n and standard error (`summary`).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zyquo_tui.core.library.eval_rows import DEFAULT_EVAL_MAX_TOKENS, EvalRow, read_eval_rows

EXACT = "exact"
# What normalising leaves out at an answer's end: whitespace and sentence punctuation.
TRAILING = " \t\r\n.,;:!?"
SPACES = re.compile(r"\s+")


def normalised(text: str) -> str:
    """An answer as exact match compares it: surrounding whitespace and trailing punctuation
    (. , ; : ! ?) removed, runs of whitespace made one space, case folded."""
    return SPACES.sub(" ", text.strip().rstrip(TRAILING)).casefold()


def exact_match(answer: str, reference: str) -> float:
    return 1.0 if normalised(answer) == normalised(reference) else 0.0


def summary(values: list[float], binary: bool = False) -> dict[str, Any]:
    """{"mean", "se", "n"}: the standard error is sd/sqrt(n) with the sample standard deviation
    (n - 1), or for a share of 0s and 1s (`binary`) sqrt(p(1 - p)/n); None where n is too small
    (no rows: no mean; one row: no spread)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "se": None, "n": 0}
    mean = sum(values) / n
    if binary:
        se = math.sqrt(mean * (1 - mean) / n)
    elif n > 1:
        se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    else:
        se = None
    return {"mean": mean, "se": se, "n": n}


@dataclass
class RowFigures:
    """One row's figures for one model: its answer's NLL per token, and its score (None
    without a scorer) with the greedy answer that earned it."""

    nll: float | None
    score: float | None = None
    answer: str | None = None


def answer_nll(model, tokenizer, row: EvalRow) -> float | None:
    """The reference answer's mean NLL per token given the prompt (None: no answer tokens)."""
    import mlx.core as mx

    from zyquo_tui.trainer.encoding import encode_row

    tokens, offset = encode_row(tokenizer, row.prompt, row.reference, train_on_prompt=False)
    if offset >= len(tokens) or len(tokens) < 2:
        return None
    logits = model(mx.array(tokens[:-1])[None])[0].astype(mx.float32)
    targets = mx.array(tokens[1:])
    losses = mx.logsumexp(logits, axis=-1) - mx.take_along_axis(
        logits, targets[:, None], axis=-1)[:, 0]
    start = max(offset - 1, 0)
    return float(losses[start:].mean().item())


class Scorer:
    """What scores a greedy answer: exact match, or reward functions (names as a run's
    reward_functions setting holds them)."""

    def __init__(self, exact: bool = False, rewards: list[str] | None = None,
                 reward_timeout: float | None = None) -> None:
        """`reward_timeout`: seconds a reward may take for one call, after which it fails
        the evaluation (None waits for it)."""
        from zyquo_tui.trainer.rewards import Rewards

        self.exact = exact
        self.rewards = Rewards(rewards, timeout=reward_timeout) if rewards else None

    @property
    def metric(self) -> str | None:
        return EXACT if self.exact else "reward" if self.rewards else None

    def scores(self, rows: list[EvalRow], answers: list[str]) -> list[float]:
        if self.exact:
            return [exact_match(a, row.reference) for a, row in zip(answers, rows, strict=True)]
        assert self.rewards is not None
        types = [row.type for row in rows] if any(row.type is not None for row in rows) \
            else None
        return self.rewards.score([row.prompt_text for row in rows], answers,
                                  [row.reference for row in rows], types).totals


# Greedy answers are decoded this many rows at a time (one KV cache, one forward pass a token
# for all of them): on a 2-core CPU 16 rows decode about as fast as 3 one by one.
ANSWER_BATCH = 16


def evaluate_rows(model, tokenizer, rows: list[EvalRow], scorer: Scorer | None,
                  max_tokens: int, on_row: Callable[[int], None] | None = None
                  ) -> list[RowFigures]:
    """Each row's figures with the model as it is now (put in eval mode meanwhile: no
    dropout). `on_row(i)` hears each row done."""
    from zyquo_tui.trainer.encoding import prompt_tokens
    from zyquo_tui.trainer.sampling import complete_batch

    scored = scorer is not None and scorer.metric is not None
    was_training = model.training
    model.eval()
    try:
        figures = []
        for start in range(0, len(rows), ANSWER_BATCH):
            chunk = rows[start:start + ANSWER_BATCH]
            answers = ([c.text for c in complete_batch(
                model, tokenizer, [prompt_tokens(tokenizer, row.prompt) for row in chunk],
                max_tokens, 0.0)] if scored else [None] * len(chunk))
            for index, (row, answer) in enumerate(zip(chunk, answers, strict=True)):
                figures.append(RowFigures(answer_nll(model, tokenizer, row), answer=answer))
                if on_row is not None:
                    on_row(start + index)
        if scored:
            for figure, score in zip(figures, scorer.scores(
                    rows, [f.answer or "" for f in figures]), strict=True):
                figure.score = score
        return figures
    finally:
        model.train(was_training)


def side_summary(figures: list[RowFigures], metric: str | None) -> dict[str, Any]:
    """One model's figures over the rows: {"nll": summary, "score": summary or None}."""
    nll = summary([f.nll for f in figures if f.nll is not None])
    score = None if metric is None else summary(
        [f.score for f in figures if f.score is not None], binary=metric == EXACT)
    return {"nll": nll, "score": score}


def paired_difference(adapter: list[RowFigures], base: list[RowFigures], metric: str | None
                      ) -> dict[str, Any]:
    """Adapter minus base, row by row (the same rows: a paired difference, whose standard error
    is the differences' sd/sqrt(n))."""
    def differences(key: str) -> list[float]:
        return [getattr(a, key) - getattr(b, key) for a, b in zip(adapter, base, strict=True)
                if getattr(a, key) is not None and getattr(b, key) is not None]

    return {"nll": summary(differences("nll")),
            "score": None if metric is None else summary(differences("score"))}


class InRunEvaluation:
    """A run's own evaluation (`--eval-every N --eval-data FILE`): the training model as it
    is after a step, on eval_data's rows (the first eval_max_rows), scored as its settings
    say; what an `eval` event carries."""

    def __init__(self, model, tokenizer, rows: list[EvalRow], scorer: Scorer, every: int,
                 iters: int, best_by_eval: bool,
                 max_tokens: int = DEFAULT_EVAL_MAX_TOKENS) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.rows, self.scorer = rows, scorer
        self.every, self.iters = every, iters
        self.best_by_eval = best_by_eval
        self.max_tokens = max_tokens

    @classmethod
    def from_settings(cls, hp, model, tokenizer) -> "InRunEvaluation":
        """From the run's settings; UserError for rows that cannot be evaluated, RewardError
        for a reward that cannot be loaded."""
        from zyquo_tui.core.runs.settings import SETTINGS

        rows = read_eval_rows(SETTINGS["eval_data"].get(hp), SETTINGS["eval_max_rows"].get(hp))
        scorer = Scorer(exact=SETTINGS["eval_exact"].get(hp) is True,
                        rewards=SETTINGS["eval_reward"].get(hp) or None,
                        reward_timeout=float(SETTINGS["reward_timeout"].get(hp)))
        return cls(model, tokenizer, rows, scorer, int(SETTINGS["eval_every"].get(hp)),
                   int(hp.iters), SETTINGS["best_by"].get(hp) == "eval")

    def due(self, step: int) -> bool:
        return step % self.every == 0 or step == self.iters

    def evaluate(self) -> dict[str, Any]:
        """The figures of an `eval` event (docs/EVENTS.md), but its step."""
        started = time.perf_counter()
        figures = evaluate_rows(self.model, self.tokenizer, self.rows, self.scorer,
                                self.max_tokens)
        side = side_summary(figures, self.scorer.metric)
        score = side["score"] or {}
        return {"rows": len(self.rows), "nll": side["nll"]["mean"], "nll_se": side["nll"]["se"],
                "metric": self.scorer.metric, "score": score.get("mean"),
                "score_se": score.get("se"), "eval_time": time.perf_counter() - started}
