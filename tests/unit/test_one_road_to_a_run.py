"""RunDraft (core/setup/draft.py) is the one road from choices to a Run: no other module of the
package calls `Run.new` (the store only stores what the draft made). The check walks every
module's syntax tree, calls inside functions included, so a new door cannot slip past it."""

from __future__ import annotations

import ast
from pathlib import Path

import zyquo_tui

PACKAGE = Path(zyquo_tui.__file__).parent
ALLOWED = {PACKAGE / "core" / "setup" / "draft.py"}


def run_new_calls(tree: ast.AST) -> list[int]:
    """The lines that call `Run.new(...)` (or `run.Run.new`, however Run was imported)."""
    return sorted(node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "new"
            and ((isinstance(node.func.value, ast.Name) and node.func.value.id == "Run")
                 or (isinstance(node.func.value, ast.Attribute)
                     and node.func.value.attr == "Run")))


def test_only_the_run_draft_calls_run_new():
    callers = [f"{path.relative_to(PACKAGE.parent)}:{line}"
               for path in sorted(PACKAGE.rglob("*.py")) if path not in ALLOWED
               for line in run_new_calls(ast.parse(path.read_text(), filename=str(path)))]
    assert callers == [], f"Run.new outside RunDraft: {callers}; make the run with RunDraft"
    assert run_new_calls(ast.parse((PACKAGE / "core" / "setup" / "draft.py").read_text()))


def test_the_walk_finds_a_call_wherever_it_is():
    """The finder itself: a call in a method, through a module, or as an argument, is found."""
    source = ("from zyquo_tui.core.runs import run\n"
              "class A:\n    def f(self):\n        return run.Run.new(model='m', data='d')\n"
              "store.create(Run.new(model='m', data='d'))\n"
              "Other.new()\n")
    assert run_new_calls(ast.parse(source)) == [4, 5]
