"""The package as a user gets it: the wheel's content, the README's commands, the layers."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

CORE_IMPORT_CHECK = """
import importlib, pkgutil, sys
import zyquo_tui.core as core
imported = 0
for module in pkgutil.walk_packages(core.__path__, "zyquo_tui.core."):
    importlib.import_module(module.name)
    imported += 1
banned = [m for m in sys.modules if m.split(".")[0] in ("textual", "mlx", "mlx_lm",
                                                         "transformers")]
print(imported, ",".join(sorted(banned)))
"""


def test_core_imports_neither_textual_nor_mlx():
    done = subprocess.run([sys.executable, "-c", CORE_IMPORT_CHECK], capture_output=True,
                          text=True, check=True)
    imported, _, banned = done.stdout.strip().partition(" ")
    core_modules = [p for p in (REPO / "zyquo_tui" / "core").rglob("*.py")]
    assert int(imported) == len(core_modules) - 1, "every module of core (but its __init__)"
    assert banned == ""


def test_the_cli_imports_no_mlx_for_headless_commands():
    code = ("import sys; from zyquo_tui.cli.main import build_parser; build_parser(); "
            "print([m for m in sys.modules if m.startswith(('mlx', 'textual'))])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(REPO)],
                   check=True, capture_output=True, timeout=600)
    return next(out.glob("zyquo_tui-*.whl"))


def test_the_wheel_ships_the_styles_and_the_sample_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    styles = [n for n in names if n.startswith("zyquo_tui/styles/") and n.endswith(".tcss")]
    assert styles, "the .tcss files must ship inside the package"
    for split in ("train", "valid", "test"):
        for kind in ("completions", "chat", "text", "preference", "rl"):
            assert f"zyquo_tui/sample_data/{kind}/{split}.jsonl" in names
    assert "zyquo_tui/trainer/__main__.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "zyquo-tui = zyquo_tui.cli.main:main" in zipfile.ZipFile(wheel).read(
        entry_points).decode()


def test_an_installed_wheel_finds_its_styles_and_sample_data(wheel, tmp_path):
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    code = ("from zyquo_tui.resources import styles_dir, sample_data_dir; "
            "print(styles_dir()); print(sample_data_dir())")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env, cwd=tmp_path)
    styles, sample = map(Path, done.stdout.split())
    assert styles == tmp_path / "site" / "zyquo_tui" / "styles" and any(styles.glob("*.tcss"))
    assert sample == tmp_path / "site" / "zyquo_tui" / "sample_data"
    assert (sample / "chat" / "train.jsonl").is_file()
