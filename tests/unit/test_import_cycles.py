"""No import cycles under zyquo_tui/: every module's imports, walked, close no loop.

Every import statement counts, those inside functions too: an import moved into a function
(or a class defined inside one) to dodge a cycle still ties the two modules together. Imports
under `if TYPE_CHECKING:` do not count: they never run, they name a type (a screen typing its
`app` as the ZyquoApp that shows it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import zyquo_tui

PACKAGE = Path(zyquo_tui.__file__).parent


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its __init__.py)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under `if TYPE_CHECKING:` (their imports never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                skipped.update(id(inner) for inner in ast.walk(statement))
    return skipped


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The package's modules that `name` imports, each with the line of its first import.
    `from package import module` is an import of the module; an import of a name is one of
    the module that defines it."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _type_checking_only(tree)
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the importer's package
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules
                       else source for alias in node.names]
        else:
            continue
        for target in targets:
            imported = known(target) if target.startswith("zyquo_tui") else None
            if imported and imported != name:
                found.setdefault(imported, node.lineno)
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle as the modules along it (the first repeated at the end), or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" once all it reaches is seen
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                return path[path.index(imported):] + [imported]
            if imported not in state and (cycle := visit(imported)):
                return cycle
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def described(cycle: list[str], graph: dict[str, dict[str, int]],
              modules: dict[str, Path]) -> str:
    steps = []
    for importer, imported in zip(cycle, cycle[1:]):
        where = modules[importer].relative_to(PACKAGE.parent)
        steps.append(f"{importer} imports {imported} ({where}:{graph[importer][imported]})")
    return "; ".join(steps)


def test_no_module_of_the_package_imports_itself_through_others():
    modules = module_files()
    graph = import_graph(modules)
    cycle = find_cycle(graph)
    assert cycle is None, "an import cycle: " + described(cycle, graph, modules)


def test_a_cycle_is_found_and_named_with_its_lines(tmp_path):
    """The walk itself: a cycle hidden in a function, and a relative import, are found; an
    import under TYPE_CHECKING is not one."""
    package = tmp_path / "zyquo_tui"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from zyquo_tui.sub import b\n")
    (package / "sub" / "b.py").write_text("def late():\n    from . import c\n")
    (package / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zyquo_tui.sub import b\n"
        "import zyquo_tui.sub.a\n")
    modules = module_files(package)
    graph = import_graph(modules)
    assert graph["zyquo_tui.sub.c"] == {"zyquo_tui.sub.a": 4}
    cycle = find_cycle(graph)
    assert cycle == ["zyquo_tui.sub.a", "zyquo_tui.sub.b", "zyquo_tui.sub.c", "zyquo_tui.sub.a"]
    (package / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zyquo_tui.sub import a\n")
    assert find_cycle(import_graph(module_files(package))) is None
