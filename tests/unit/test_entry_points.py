"""The table of subprocess entry points is the only place their module names are spelled."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from zyquo_tui.core.system import entry_points
from zyquo_tui.core.system.entry_points import ENTRY_POINTS, TRAINER, python_command

PACKAGE = Path(entry_points.__file__).resolve().parents[2]
# `"-m"` as an argument, or one of the entry modules as a string of its own.
SPELLED = re.compile(r"""["']-m["']|["'](?:%s)["']""" % "|".join(
    re.escape(entry.module) for entry in ENTRY_POINTS))


def test_every_entry_point_is_a_module_that_exists():
    for entry in ENTRY_POINTS:
        assert importlib.util.find_spec(entry.module) is not None, entry.module
    assert len({entry.module for entry in ENTRY_POINTS}) == len(ENTRY_POINTS)


def test_the_argv_runs_the_module_with_this_python_unless_told_otherwise():
    assert python_command(TRAINER, "/runs/x") == [sys.executable, "-m", "zyquo_tui.trainer",
                                                  "/runs/x"]
    assert python_command(TRAINER, python="/venv/bin/python")[0] == "/venv/bin/python"


def test_no_module_of_the_package_spells_an_entry_point_itself():
    table = Path(entry_points.__file__).resolve()
    offenders = [f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
                 for path in sorted(PACKAGE.rglob("*.py")) if path != table
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if SPELLED.search(line)]
    assert offenders == []
