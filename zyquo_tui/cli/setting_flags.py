"""The CLI flag of each run setting, made from its one definition (core/runs/settings.py).

A flag's text is read as the new-run form reads a field (`Setting.parse`): text that is no
value of the setting's kind is kept, so the definition's check refuses it with the same sentence
the form shows (`batch_size must be a whole number, not 'abc'.`).
"""

from __future__ import annotations

import argparse
from typing import Any, Iterable

from zyquo_tui.core.runs.settings import (
    BOOL,
    BYTES,
    CHOICE,
    COUNT_OR_FILE,
    COUNT_OR_OFF,
    FILE,
    FLOAT,
    FOLDER,
    INT,
    LR_SCHEDULES,
    NAMES,
    NONE_TEXT,
    NUMBERS,
    SCHEDULE,
    SETTINGS,
    Hyperparameters,
)
from zyquo_tui.core.runs.value_checks import value_text


def _dest(key: str) -> str:
    return f"setting_{key}"


def _help(key: str) -> str:
    setting = SETTINGS[key]
    default = setting.default
    if default is None:
        shown = "unset"
    elif setting.kind == BOOL:
        shown = "on" if default else "off"
    else:
        shown = value_text(default)
    lora = "; LoRA and DoRA only" if setting.lora_only else ""
    owner = "zyquo-tui's" if setting.own else "mlx-lm's"
    text = f"{setting.help} ({owner} {setting.name}; default {shown}{lora})"
    return text.replace("%", "%%")  # argparse formats help with %


_METAVARS = {INT: "N", FLOAT: "X", NUMBERS: "X,X,...", NAMES: "NAME,...",
             COUNT_OR_FILE: "FILE|N", COUNT_OR_OFF: "auto|N|off", FILE: "FILE",
             FOLDER: "FOLDER", BYTES: "SIZE"}


def _metavar(key: str) -> str:
    setting = SETTINGS[key]
    if setting.kind == CHOICE:
        choices = (*setting.choices, NONE_TEXT) if setting.optional else setting.choices
        return "{" + ",".join(choices) + "}"
    return _METAVARS.get(setting.kind, "VALUE")


class _ExtendNames(argparse.Action):
    """A list flag given again adds its names to the earlier ones; an empty text (the default,
    None) or text kept for the check to name replaces them, as a single flag would give it."""

    def __call__(self, parser, namespace, values, option_string=None):
        earlier = getattr(namespace, self.dest, None)
        if isinstance(earlier, list) and isinstance(values, list):
            values = earlier + values
        setattr(namespace, self.dest, values)


def add_setting_flags(parser: argparse.ArgumentParser, keys: Iterable[str] | None = None
                      ) -> None:
    """A flag for each setting (those of `keys` alone when given), in the definition's order."""
    wanted = set(SETTINGS if keys is None else keys)
    for key, setting in SETTINGS.items():
        if key not in wanted:
            continue
        # Not given, a flag leaves no attribute (SUPPRESS): `--lr-schedule none` gives None.
        if setting.kind == BOOL:
            parser.add_argument(setting.flag, dest=_dest(key), default=argparse.SUPPRESS,
                                action=argparse.BooleanOptionalAction, help=_help(key))
        elif setting.kind == NAMES:
            # A list of names, comma-separated or the flag repeated (--reward a --reward b).
            parser.add_argument(setting.flag, dest=_dest(key), default=argparse.SUPPRESS,
                                action=_ExtendNames, type=setting.parse, metavar=_metavar(key),
                                help=f"{_help(key)} (repeatable)")
        else:
            parser.add_argument(setting.flag, dest=_dest(key), default=argparse.SUPPRESS,
                                type=setting.parse, metavar=_metavar(key), help=_help(key))


def settings_given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line gave, by key, in the definition's order."""
    return {key: getattr(args, _dest(key)) for key in SETTINGS if hasattr(args, _dest(key))}


def apply_settings(hp: Hyperparameters, values: dict[str, Any]) -> None:
    """Set the given settings in `hp`, in the definition's order (the optimizer before its
    weight decay, which lives in that optimizer's entry)."""
    for key in SETTINGS:
        if key in values:
            SETTINGS[key].set(hp, values[key])


def unnamed_schedule(hp: Hyperparameters, given: dict[str, Any]) -> str | None:
    """The sentence for a schedule's part given by flag (--warmup, ...) with no schedule to
    belong to, naming the flag to add: the settings' own check speaks mlx-lm's config
    (`lr_schedule needs a name`), which names no flag. None when there is no such part."""
    parts = [SETTINGS[key].flag for key in given
             if SETTINGS[key].group == SCHEDULE and key != "schedule"]
    if not parts or SETTINGS["schedule"].get(hp) is not None:
        return None
    return (f"{' and '.join(parts)} {'is' if len(parts) == 1 else 'are'} part of a "
            "learning-rate schedule, and none is set; add --lr-schedule "
            f"({', '.join(LR_SCHEDULES)}) with its --lr-schedule-arguments.")
