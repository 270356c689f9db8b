"""What a distillation draft needs beyond its settings' own checks: a teacher named as a model
(`zyquo-tui models`' names, as --model takes them) made into its folder, a teacher with the
student's tokenizer (core/library/tokenizer_identity.py), and, on policy, rows with prompts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.tokenizer_identity import same_vocabulary
from zyquo_tui.core.runs.problems import Problem
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters


def teacher_folder(value: Any) -> Any:
    """A teacher given by name (as `zyquo-tui models` lists it) as its folder; a folder, or a
    name no model has, as given (the setting's own check then says what is wrong)."""
    if not isinstance(value, str) or not value.strip() \
            or (Path(value).expanduser() / "config.json").is_file():
        return value
    from zyquo_tui.core.library.models import resolve_model

    try:
        return str(resolve_model(value).path.resolve())
    except UserError:
        return value


def distillation_problems(hp: Hyperparameters, student: str | None, student_name: str | None,
                          data_format: str | None) -> list[Problem]:
    """A teacher whose vocabulary is not the student's; on-policy distillation of rows
    without prompts. Nothing for other objectives."""
    if SETTINGS["objective"].get(hp) != "distill":
        return []
    found = []
    teacher = SETTINGS["teacher"].get(hp)
    if student and isinstance(teacher, str) \
            and (Path(teacher).expanduser() / "config.json").is_file() \
            and same_vocabulary(student, teacher) is False:
        found.append(Problem("teacher", f"the teacher {Path(teacher).name} has another "
                             f"tokenizer than the model {student_name or Path(student).name} "
                             "(their vocabularies differ), and distillation compares their "
                             "next-token distributions token by token; choose a teacher of "
                             "the same family, with the same tokenizer."))
    if SETTINGS["on_policy"].get(hp) and data_format == "text":
        found.append(Problem("on_policy", "on-policy distillation samples the model's answers "
                             "to the rows' prompts, and text rows have no prompt; give "
                             "completions or chat rows, or leave out --on-policy."))
    return found
