"""Reward functions of GRPO runs: the built-in ones, the user's own, and their weighted total.

A reward function has mlx-lm-lora's signature, so a reward file written for mlx-lm-lora works
unchanged:

    def f(prompts: list[str], completions: list[str], answer: list[str], types=None)
        -> list[float]

called with keywords, one entry per sampled answer (a prompt and its row's answer repeated for
each of its group's answers); `types` is each row's `type` field when the rows have one, else
None. A value of None (or NaN) means the reward does not apply to that answer: it counts 0 in
the total and is left out of the reward's mean.

A run names its rewards as its `reward_functions` setting holds them: a built-in name or
FILE.py:FUNCTION (the file's path made absolute when the run was made, since the trainer runs
elsewhere). A reward that raises (SystemExit included), returns anything but one number (or
None) per answer, or is still running after the run's reward_timeout, fails the run at that step
(`RewardError`; trainer/grpo.py turns it into the `failed` event).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

RewardFunction = Callable[..., Sequence[float | None]]

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")
# `format`'s pattern: the answer ends with one answer in tags, as mlx-lm-lora's reasoning
# rewards expect (`... <answer>15</answer>`), so `exact_answer` reads it without guessing.
FORMAT_PATTERN = re.compile(r"^(?:(?!<answer>).)*<answer>(?:(?!</?answer>).)+</answer>\s*$",
                            re.DOTALL)
# `length`: 1 for a one-word answer, falling linearly to 0 at this many words.
LENGTH_WORDS = 100


def extracted_answer(text: str) -> str | None:
    """What an answer says its result is: the last <answer>..</answer>, else its last number."""
    tagged = ANSWER_TAG.findall(text)
    if tagged:
        return tagged[-1].strip()
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else None


def _same(given: str, expected: str) -> bool:
    def number(text: str) -> float | None:
        try:
            return float(text.replace(",", ""))
        except ValueError:
            return None

    a, b = number(given), number(expected)
    if a is not None and b is not None:
        return a == b
    return given.strip().rstrip(".").casefold() == expected.strip().rstrip(".").casefold()


def exact_answer(prompts, completions, answer, types=None) -> list[float]:
    """1 when the answer's result (`extracted_answer`) equals the row's answer (as numbers
    when both are: 15 and 15.0 are equal), else 0."""
    scores = []
    for text, expected in zip(completions, answer, strict=True):
        found = extracted_answer(text)
        scores.append(1.0 if found is not None and _same(found, str(expected)) else 0.0)
    return scores


def format(prompts, completions, answer, types=None) -> list[float]:  # noqa: A001 - its name
    """1 when the answer matches FORMAT_PATTERN (it ends with one tagged answer), else 0. For
    another pattern, write a reward file: a function of the same signature (docs/CLI.md)."""
    return [1.0 if FORMAT_PATTERN.match(text) else 0.0 for text in completions]


def length(prompts, completions, answer, types=None) -> list[float]:
    """Shorter is better: 1 for one word, linearly down to 0 at LENGTH_WORDS words; 0 for an
    empty answer (so saying nothing never wins)."""
    scores = []
    for text in completions:
        words = len(text.split())
        scores.append(0.0 if words == 0 else max(0.0, 1 - (words - 1) / (LENGTH_WORDS - 1)))
    return scores


BUILTIN: dict[str, RewardFunction] = {"exact_answer": exact_answer, "format": format,
                                      "length": length}


class RewardError(Exception):
    """A reward function failed: `name` is the run's name for it, `details` its traceback."""

    def __init__(self, name: str, message: str, details: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.details = details


def load_reward(name: str) -> RewardFunction:
    """The function a reward name means: a built-in, or FILE.py:FUNCTION loaded from its file
    (which runs the file, as mlx-lm-lora's imports do)."""
    if name in BUILTIN:
        return BUILTIN[name]
    path, _, function = name.rpartition(":")
    spec = importlib.util.spec_from_file_location(f"zyquo_reward_{Path(path).stem}", path)
    try:
        if spec is None or spec.loader is None:
            raise ImportError(f"{path} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found = getattr(module, function)
    except (Exception, SystemExit) as error:  # a file that calls sys.exit as it loads
        raise RewardError(name, f"the reward file {path} could not be loaded "
                          f"({type(error).__name__}: {error})", traceback.format_exc()) from None
    if not callable(found):
        raise RewardError(name, f"{function} in {path} is not a function")
    if inspect.iscoroutinefunction(found):
        raise RewardError(name, f"{function} in {path} is an async def; make it a plain def "
                          "that returns one number per answer")
    return found


@dataclass
class Scores:
    """The rewards of a batch's sampled answers."""

    totals: list[float]  # each answer's weighted total
    by_name: dict[str, list[float | None]]  # each reward's own values (None: did not apply)

    def means(self) -> dict[str, float]:
        """Each reward's unweighted mean over the answers it applied to (0 if none)."""
        out = {}
        for name, values in self.by_name.items():
            applied = [v for v in values if v is not None]
            out[name] = sum(applied) / len(applied) if applied else 0.0
        return out


class Rewards:
    """A run's reward functions with their weights (1 each unless given); `timeout`: the
    seconds one call may take (None: no limit)."""

    def __init__(self, names: list[str], weights: list[float] | None = None,
                 timeout: float | None = None) -> None:
        self.names = list(names)
        self.weights = [float(w) for w in weights] if weights else [1.0] * len(self.names)
        self.timeout = timeout
        self.functions = [load_reward(name) for name in self.names]

    def score(self, prompts: list[str], completions: list[str], answers: list[str],
              types: list | None = None) -> Scores:
        by_name = {}
        for name, function in zip(self.names, self.functions):
            values = self._call(name, function, dict(prompts=prompts, completions=completions,
                                                     answer=answers, types=types))
            by_name[name] = self._checked(name, values, len(completions))
        totals = [sum(w * (values[i] or 0.0) for w, values in zip(self.weights,
                                                                   by_name.values()))
                  for i in range(len(completions))]
        return Scores(totals, by_name)

    def _call(self, name: str, function: RewardFunction, arguments: dict):
        """The function's values, from a thread of its own so that one that never returns
        is left behind after `timeout` seconds (a thread cannot be killed: it is a daemon,
        and the run fails and its process ends). SystemExit and every other exception
        become RewardError, a sentence and the traceback."""
        outcome: dict[str, object] = {}

        def call() -> None:
            try:
                outcome["values"] = function(**arguments)
            except BaseException as error:  # SystemExit too: a thread would swallow it
                outcome["error"] = error
                outcome["details"] = traceback.format_exc()

        worker = threading.Thread(target=call, name=f"reward {name}", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            raise RewardError(name, f"the reward function {name} was still running after "
                              f"{self.timeout:g} s (reward_timeout), so it was stopped; make it "
                              "return sooner or raise --reward-timeout")
        error = outcome.get("error")
        if isinstance(error, SystemExit):
            raise RewardError(name, f"the reward function {name} called sys.exit "
                              f"({error.code!r}); a reward must return its values",
                              str(outcome["details"]))
        if isinstance(error, BaseException):
            raise RewardError(name, f"the reward function {name} raised "
                              f"{type(error).__name__}: {error}", str(outcome["details"]))
        values = outcome["values"]
        if inspect.iscoroutine(values):
            values.close()  # never awaited: closed, so Python does not warn of it
            raise RewardError(name, f"the reward function {name} returned a coroutine; make "
                              "it a plain def that returns one number per answer")
        return values

    @staticmethod
    def _checked(name: str, values, count: int) -> list[float | None]:
        try:
            values = list(values)
        except TypeError:
            raise RewardError(name, f"the reward function {name} returned "
                              f"{type(values).__name__}, not a list of {count} numbers") from None
        if len(values) != count:
            raise RewardError(name, f"the reward function {name} returned {len(values)} "
                              f"values for {count} answers; it must return one per answer")
        checked: list[float | None] = []
        for value in values:
            if value is None:
                checked.append(None)
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise RewardError(name, f"the reward function {name} returned {value!r}, "
                                  "not a number") from None
            if math.isinf(number):
                raise RewardError(name, f"the reward function {name} returned an infinite "
                                  "reward")
            checked.append(None if math.isnan(number) else number)
        return checked
