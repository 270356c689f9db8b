"""Checks of one setting's value, and the reading and writing of values as text.

Each check is called with how sentences name the setting and the value, and returns (severity,
sentence) pairs; its fields are the setting's bounds. The definition of each setting
(core/runs/settings.py) names its check.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from zyquo_tui.core.runs.problems import ERROR, WARNING

INT_TEXT = re.compile(r"^[+-]?\d+$")


def is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_from_text(text: str) -> int | float | None:
    """`3` is 3, `1e-5` is 1e-05; None for text that is no number."""
    text = text.strip().replace("_", "")
    if INT_TEXT.match(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return None


def value_text(value: Any) -> str:
    """A value as a form field or a flag writes it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(value_text(item) for item in value)
    return str(value)


# -- checks --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WholeNumber:
    """A whole number of at least `minimum`, or one of `also` (-1: all of them)."""

    minimum: int = 1
    also: tuple[int, ...] = ()

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if self.minimum == 0:
            if not is_whole(value) or value < 0:
                return [(ERROR, f"{called} must be a whole number of 0 or more, not {value!r}.")]
            return []
        if not is_whole(value):
            return [(ERROR, f"{called} must be a whole number, not {value!r}.")]
        if value < self.minimum and value not in self.also:
            extra = f" (or {', '.join(map(str, self.also))})" if self.also else ""
            return [(ERROR, f"{called} must be at least {self.minimum}{extra}, not {value}.")]
        return []


@dataclass(frozen=True)
class LearningRate:
    """A number above 0; above `high`, a warning that training will likely diverge."""

    high: float = 1.0

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not is_number(value):
            return [(ERROR, f"{called} must be a number, not {value!r}.")]
        if not value > 0 or math.isnan(value) or math.isinf(value):
            return [(ERROR, f"{called} must be greater than 0, not {value}.")]
        if value > self.high:
            return [(WARNING, f"{called} {value} is very high; training will likely diverge.")]
        return []


@dataclass(frozen=True)
class AnyNumber:
    """Any number."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not is_number(value) or not math.isfinite(value):
            return [(ERROR, f"{called} must be a number, not {value!r}.")]
        return []


@dataclass(frozen=True)
class NumberFromZero:
    """A number of 0 or more; `noun` says what kind (a learning rate...)."""

    noun: str = "a number"

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not is_number(value) or not value >= 0 or math.isinf(value):
            return [(ERROR, f"{called} must be {self.noun} of 0 or more, not {value!r}.")]
        return []


@dataclass(frozen=True)
class Fraction:
    """A number from 0 up to, not including, 1 (a dropout probability)."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not is_number(value) or not 0 <= value < 1:
            return [(ERROR, f"{called} must be from 0 up to (not including) 1, not {value!r}.")]
        return []


@dataclass(frozen=True)
class OneOf:
    """One of `choices`."""

    choices: tuple[str, ...]

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if value not in self.choices:
            return [(ERROR, f"{called} {value!r} is unknown; choose one of "
                            f"{', '.join(self.choices)}.")]
        return []


@dataclass(frozen=True)
class TrueOrFalse:
    """On or off."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not isinstance(value, bool):
            return [(ERROR, f"{called} must be true or false, not {value!r}.")]
        return []


@dataclass(frozen=True)
class ScheduleArguments:
    """A schedule's arguments: a list of numbers whose first is the initial learning rate.

    Text that did not parse into numbers (a form field, a flag) is named part by part.
    """

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if isinstance(value, str):
            parts = [part.strip() for part in value.split(",") if part.strip()]
            bad = next((part for part in parts if number_from_text(part) is None), value)
            return [(ERROR, f"{called} must be numbers separated by commas, not {bad!r}.")]
        if not isinstance(value, list) or not value:
            return [(ERROR, f"{called} must be a list starting with the learning rate.")]
        bad = next((item for item in value if not is_number(item)), None)
        if bad is not None:
            return [(ERROR, f"{called} must all be numbers, not {bad!r}.")]
        return []


@dataclass(frozen=True)
class LayerNames:
    """A list of layer names such as self_attn.q_proj."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if (not isinstance(value, list) or not value
                or not all(isinstance(name, str) and name for name in value)):
            return [(ERROR, f"{called} must be a list of layer names such as self_attn.q_proj, "
                            f"not {value!r}.")]
        return []


@dataclass(frozen=True)
class CountOrFile:
    """A whole number of at least 1 (how many to take), or the path of an existing file."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if is_whole(value):
            if value < 1:
                return [(ERROR, f"{called} must be at least 1, not {value}.")]
            return []
        if not isinstance(value, str) or not value.strip():
            return [(ERROR, f"{called} must be a number of prompts or a file of prompts, not "
                            f"{value!r}.")]
        path = os.path.expanduser(value)
        if not os.path.isfile(path):
            return [(ERROR, f"{called}: {value} is no file; give a file of prompts, one a "
                            "line, or a number of validation prompts.")]
        try:  # as the trainer reads it (trainer/samples.py), so a start does not fail on it
            with open(path, encoding="utf-8") as prompts:
                if not any(line.strip() for line in prompts):
                    return [(ERROR, f"{called}: {value} has no prompts; write one prompt a "
                                    "line in the file.")]
        except (OSError, UnicodeDecodeError) as error:
            return [(ERROR, f"{called}: {value} cannot be read ({error}); give a text file "
                            "of prompts, one a line.")]
        return []


# Sizes as people write them: 12GB, 12 GiB, 800M, 1.5T, or whole bytes. GB and GiB alike mean
# 2**30 bytes, as macOS counts a Mac's memory and as fmt_bytes writes sizes back.
_SIZE_TEXT = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def bytes_from_text(text: str) -> int | None:
    """`12GB` is 12 * 2**30 bytes, `800M` 800 * 2**20, `4096` 4096; None for other text."""
    found = _SIZE_TEXT.match(text.strip().replace("_", ""))
    if found is None:
        return None
    return int(float(found.group(1)) * _SIZE_UNITS[found.group(2).lower()])


def size_in_bytes(value: Any) -> int | None:
    """A size setting's value (whole bytes, or text such as 12GB from a YAML file) in bytes;
    None for no size."""
    if is_whole(value):
        return int(value)
    return bytes_from_text(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class ByteSize:
    """A size of at least `minimum` bytes: whole bytes, or text such as 12GB or 800MB."""

    minimum: int = 1 << 20

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        size = size_in_bytes(value)
        if size is None:
            return [(ERROR, f"{called} must be a size such as 12GB or 800MB, not {value!r}.")]
        if size < self.minimum:
            return [(ERROR, f"{called} must be at least {self.minimum >> 20} MiB, not "
                            f"{size} bytes.")]
        return []


OFF_TEXT = "off"
AUTO_TEXT = "auto"


@dataclass(frozen=True)
class CountOrOff:
    """A whole number of at least 1, auto or off."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if value in (OFF_TEXT, AUTO_TEXT):
            return []
        if not is_whole(value) or value < 1:
            return [(ERROR, f"{called} must be auto, a whole number of at least 1 or off, not "
                            f"{value!r}.")]
        return []


class BaseOrModelFolder:
    """`base`, or the path of a model folder (one holding config.json)."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if value == "base":
            return []
        if not isinstance(value, str) or not value.strip():
            return [(ERROR, f"{called} must be base or a model folder, not {value!r}.")]
        if not os.path.isfile(os.path.join(os.path.expanduser(value), "config.json")):
            return [(ERROR, f"{called}: {value} is no model folder (no config.json); give base "
                            "(the model before training) or a model folder.")]
        return []


# The experiment trackers a run can report to, by name, and the package that brings each.
TRACKERS = {"wandb": "wandb", "swanlab": "swanlab", "trackio": "trackio"}


@dataclass(frozen=True)
class TrackerNames:
    """Experiment trackers, comma-separated as mlx-lm writes report_to, each one known and its
    library installed here (the trainer imports it)."""

    trackers: dict[str, str]

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        import importlib.util

        if not isinstance(value, str) or not value.strip():
            return [(ERROR, f"{called} must name trackers separated by commas "
                            f"({', '.join(self.trackers)}), not {value!r}.")]
        names = [name.strip().lower() for name in value.split(",") if name.strip()]
        unknown = [name for name in names if name not in self.trackers]
        if unknown:
            return [(ERROR, f"{called} names {unknown[0]!r}, which is no tracker zyquo-tui "
                            f"knows; choose from {', '.join(self.trackers)}.")]
        for name in names:
            if importlib.util.find_spec(self.trackers[name]) is None:
                return [(ERROR, f"{called} names {name}, which is not installed here; "
                                f"install it (pip install {self.trackers[name]}) or leave it "
                                "out.")]
        return []


@dataclass(frozen=True)
class SomeText:
    """Words: a name that is not empty."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not isinstance(value, str) or not value.strip():
            return [(ERROR, f"{called} must be a name, not {value!r}.")]
        return []


@dataclass(frozen=True)
class NumberList:
    """A list of numbers (reward weights)."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not isinstance(value, list) or not value:
            return [(ERROR, f"{called} must be numbers separated by commas, not {value!r}.")]
        bad = next((item for item in value if not is_number(item)), None)
        if bad is not None:
            return [(ERROR, f"{called} must all be numbers, not {bad!r}.")]
        return []


@dataclass(frozen=True)
class ExistingFile:
    """The path of a file that exists (what it must hold is checked where it is read)."""

    what: str = "a file"

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not isinstance(value, str) or not value.strip():
            return [(ERROR, f"{called} must be the path of {self.what}, not {value!r}.")]
        if not os.path.isfile(os.path.expanduser(value)):
            return [(ERROR, f"{called}: {value} is no file; give the path of {self.what}.")]
        return []


class ModelFolder:
    """The path of a model folder (one holding config.json)."""

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not isinstance(value, str) or not value.strip():
            return [(ERROR, f"{called} must be a model folder, not {value!r}.")]
        if not os.path.isfile(os.path.join(os.path.expanduser(value), "config.json")):
            return [(ERROR, f"{called}: {value} is no model folder (no config.json); give the "
                            "folder of a model in MLX or Hugging Face format.")]
        return []


@dataclass(frozen=True)
class RewardFunctions:
    """Reward functions: built-in names, or FILE.py:FUNCTION where the file defines FUNCTION.

    The file is parsed, never run, here: it runs in the trainer, which reports a reward that
    fails there as the run's failure."""

    builtins: tuple[str, ...]

    def __call__(self, called: str, value: Any) -> list[tuple[str, str]]:
        if not isinstance(value, list) or not value \
                or not all(isinstance(name, str) and name.strip() for name in value):
            return [(ERROR, f"{called} must name reward functions ({', '.join(self.builtins)} "
                            f"or FILE.py:FUNCTION), not {value!r}.")]
        for name in value:
            problem = self._problem(called, name.strip())
            if problem:
                return [(ERROR, problem)]
        return []

    def _problem(self, called: str, name: str) -> str | None:
        import ast

        if name in self.builtins:
            return None
        path, colon, function = name.rpartition(":")
        if not colon or not path.endswith(".py"):
            return (f"{called}: {name!r} is no built-in reward ({', '.join(self.builtins)}); "
                    "give one of them or FILE.py:FUNCTION.")
        path = os.path.expanduser(path)
        try:
            with open(path, encoding="utf-8") as file:
                tree = ast.parse(file.read(), filename=path)
        except OSError as error:
            return f"{called}: {path} cannot be read ({error.strerror}); give a Python file."
        except SyntaxError as error:
            return (f"{called}: {path}:{error.lineno}: {error.msg}; fix the file's Python "
                    "syntax.")
        defined = {node.name for node in tree.body
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        defined |= {target.id for node in tree.body if isinstance(node, ast.Assign)
                    for target in node.targets if isinstance(target, ast.Name)}
        if function not in defined:
            return (f"{called}: {path} defines no function {function!r}; name a function "
                    "of the file, f(prompts, completions, answer, types=None).")
        for node in tree.body:
            if isinstance(node, ast.AsyncFunctionDef) and node.name == function:
                # The trainer calls a reward and reads its list; a coroutine is no list.
                return (f"{called}: {path}:{node.lineno}: {function} is an async def; make it "
                        "a plain def that returns one number per answer (asyncio.run inside "
                        "it can await what it needs).")
        return None
