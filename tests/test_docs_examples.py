"""The Python example in the README runs as written, on the sample model: a reader who copies
it gets a trained run, so it cannot drift from the package's modules."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from conftest import REPO


def readme_python_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Scripting runs from Python", 1)[1]
    return re.search(r"```python\n(.+?)\n```", section, flags=re.S).group(1)


def test_the_readme_python_example_trains_a_run(isolated_home, sample_models):
    shutil.copytree(sample_models["zyquo-tiny"], isolated_home / "models" / "zyquo-tiny")
    done = subprocess.run([sys.executable, "-c", readme_python_example()], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=REPO,
                          env={**os.environ, "ZYQUO_HOME": str(isolated_home)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
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
    shutil.copytree(sample_models["zyquo-tiny"], isolated_home / "models" / "zyquo-tiny")
    text = (REPO / "docs" / "api.md").read_text()
    example = re.search(r"```python\n(.+?)\n```", text, flags=re.S).group(1)
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, cwd=REPO,
                          env={**os.environ, "ZYQUO_HOME": str(isolated_home)})
    assert done.returncode == 0, done.stderr[-3000:]
    method, verdict, stored = done.stdout.strip().splitlines()
    assert method == "lora []" and verdict == "fits fits"
    assert stored.endswith(" configured")


def test_the_client_guide_example_trains_saves_and_samples(isolated_home, sample_models,
                                                          tmp_path):
    shutil.copytree(sample_models["zyquo-tiny"], isolated_home / "models" / "zyquo-tiny")
    text = (REPO / "docs" / "client.md").read_text()
    example = re.search(r"```python\n(.+?)\n```", text, flags=re.S).group(1)
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, cwd=tmp_path,
                          env={**os.environ, "ZYQUO_HOME": str(isolated_home)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    steps = [line.split() for line in lines[:-1]]
    assert [int(s[0]) for s in steps] == [1, 2, 3, 4, 5]
    assert float(steps[-1][1]) < float(steps[0][1])
    assert lines[-1].startswith("[") and (tmp_path / "my-state" / "0000005_state.json").is_file()
