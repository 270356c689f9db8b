"""The package as a user gets it: the wheel's content, the README's commands, the layers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", quick_start, flags=re.S)


def test_the_quick_start_is_exactly_two_commands_and_ci_runs_the_second():
    install_and_open, install_and_test = readme_commands()
    assert "zyquo-tui" in install_and_open and "pytest" in install_and_test
    assert "\n" not in install_and_open and "\n" not in install_and_test
    ci_lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert install_and_test in ci_lines, ".ci/run must run the README's test command verbatim"


# core's folders, lowest first: each imports only folders before it (and core's own top,
# errors.py and formatting.py), so an idea low down never depends on one built on it.
CORE_ORDER = ("runs", "system", "events", "store", "library", "memory", "setup", "processes")


def core_imports(path: Path) -> set[str]:
    """The core folders `path` imports from, at any depth (inside a function, or under
    `if TYPE_CHECKING:` too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                   [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for module in modules:
            parts = module.split(".")
            if parts[:2] == ["zyquo_tui", "core"] and len(parts) > 2 and parts[2] in CORE_ORDER:
                found.add(parts[2])
    return found


def test_core_folders_import_each_other_in_one_direction():
    core = REPO / "zyquo_tui" / "core"
    assert sorted(CORE_ORDER) == sorted(p.name for p in core.iterdir()
                                        if (p / "__init__.py").is_file())
    upward = []
    for rank, folder in enumerate(CORE_ORDER):
        for path in sorted((core / folder).rglob("*.py")):
            for target in core_imports(path):
                if CORE_ORDER.index(target) > rank:
                    upward.append(f"{path.relative_to(REPO)} imports core/{target}")
    assert core_imports(core / "memory" / "facts.py") >= {"library"}  # the check sees imports
    assert upward == []


PACKAGE = REPO / "zyquo_tui"


def imports_of(path: Path, prefix: str) -> list[int]:
    """Lines of `path` importing the module `prefix` or one under it, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules = [node.module or ""]
        else:
            continue
        if any(m == prefix or m.startswith(prefix + ".") for m in modules):
            lines.append(node.lineno)
    return lines


def textual_imports(path: Path) -> list[int]:
    """The lines of `path` that import textual, in any form and at any depth (inside a
    function or an `if TYPE_CHECKING:` too)."""
    return imports_of(path, "textual")


def test_every_textual_import_is_under_the_dashboard():
    dashboard = PACKAGE / "dashboard"
    assert textual_imports(dashboard / "app.py"), "the check must see the dashboard's imports"
    outside = [f"{path.relative_to(REPO)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
               if dashboard not in path.parents for line in textual_imports(path)]
    assert outside == [], "Textual belongs under zyquo_tui/dashboard/ only"


def test_only_the_users_own_code_imports_the_training_client():
    # The client imports mlx: core, the dashboard and the CLI must not reach it, and the
    # trainer is what it is built on, not a user of it.
    assert imports_of(REPO / "examples" / "sft_loop.py", "zyquo_tui.client")
    users = [f"{path.relative_to(REPO)}:{line}" for folder in ("core", "dashboard", "cli",
                                                                "trainer")
             for path in sorted((PACKAGE / folder).rglob("*.py"))
             for line in imports_of(path, "zyquo_tui.client")]
    assert users == []


def test_the_package_top_holds_only_the_entry_points_and_the_shared_resources():
    # Everything else lives in a folder by area: core/, cli/, trainer/, dashboard/, client/.
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "resources.py"]


def test_a_checkout_finds_the_top_level_folders():
    from zyquo_tui.resources import sample_data_dir, styles_dir

    assert styles_dir() == REPO / "styles"
    assert sample_data_dir() == REPO / "sample_data"
