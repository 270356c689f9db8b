"""The Python examples in the README and the guides run as written, on the sample model: a
reader who copies one gets what it says, so they cannot drift from the package's modules."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from conftest import REPO


def python_example(text: str) -> str:
    """The first ```python block of a document."""
    return re.search(r"```python\n(.+?)\n```", text, flags=re.S).group(1)


def readme_python_example() -> str:
    return python_example((REPO / "README.md").read_text().split(
        "## Scripting runs from Python", 1)[1])


def run_example(example: str, home, sample_models, cwd=REPO) -> list[str]:
    """The example run as a script of its own against a store holding the sample model; the
    lines it printed."""
    shutil.copytree(sample_models["zyquo-tiny"], home / "models" / "zyquo-tiny")
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, cwd=cwd,
                          env={**os.environ, "ZYQUO_HOME": str(home)})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


def test_the_readme_python_example_trains_a_run(isolated_home, sample_models):
    lines = run_example(readme_python_example(), isolated_home, sample_models)
    assert lines[0] == "Verdict.FITS" and lines[-1] == "RunState.COMPLETED"
    steps = [int(line.split()[0]) for line in lines[1:-1]]
    assert steps and steps[-1] == 30


def test_the_readme_python_example_imports_three_names_or_fewer_from_zyquo_tui():
    imports = [line for line in readme_python_example().splitlines()
               if re.match(r"(import|from) zyquo_tui", line)]
    assert len(imports) <= 3, imports


def test_every_name_docs_api_documents_is_zyquo_tuis_public_api():
    """docs/api.md's table names exactly the names `import zyquo_tui as zq` gives."""
    import zyquo_tui as zq

    table = (REPO / "docs" / "api.md").read_text().split("| name |", 1)[1].split("\n\n", 1)[0]
    documented = {name for cell in re.findall(r"^\| ([^|]+) \|", table, flags=re.M)
                  for name in re.findall(r"`([A-Za-z_]+)`", cell)}
    assert documented == set(zq.__all__) - {"__version__"}
    for name in documented:
        assert getattr(zq, name) is not None


def test_the_api_guide_example_drafts_plans_and_stores_a_run(isolated_home, sample_models):
    example = python_example((REPO / "docs" / "api.md").read_text())
    method, verdict, stored = run_example(example, isolated_home, sample_models)
    assert method == "lora []" and verdict == "fits fits"
    assert stored.endswith(" configured")


def test_the_client_guide_example_trains_saves_and_samples(isolated_home, sample_models,
                                                          tmp_path):
    example = python_example((REPO / "docs" / "client.md").read_text())
    lines = run_example(example, isolated_home, sample_models, cwd=tmp_path)
    steps = [line.split() for line in lines[:-1]]
    assert [int(s[0]) for s in steps] == [1, 2, 3, 4, 5]
    assert float(steps[-1][1]) < float(steps[0][1])
    assert lines[-1].startswith("[") and (tmp_path / "my-state" / "0000005_state.json").is_file()
