"""Shell completion: the script `zyquo-tui completion SHELL` prints, and bash's own completion
function, run as the shell runs it, completing commands, flags and the store's run ids."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.store.store import RunStore

BIN = Path(sys.executable).parent  # the venv's zyquo-tui, as the shell finds it on PATH


def complete(line: str, home: Path) -> list[str]:
    """What bash offers at the end of `line`, through the function the script defines."""
    words = line.split(" ")
    script = f"""
        source <(zyquo-tui completion bash)
        COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}
        COMP_WORDS=({" ".join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}
        _python_argcomplete zyquo-tui
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "ZYQUO_HOME": str(home),
                               "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    return [word.strip() for word in done.stdout.splitlines() if word.strip()]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_runs_show_with_the_stores_run_ids(isolated_home):
    store = RunStore().ensure()
    made = [store.create(Run.new(model="/m/tiny", data="/d/x", name=f"run {i}")) for i in (1, 2)]
    assert sorted(complete("zyquo-tui runs show ", isolated_home)) == sorted(r.id for r in made)
    assert complete("zyquo-tui runs show " + made[0].id[:17], isolated_home) \
        == [r.id for r in made if r.id.startswith(made[0].id[:17])]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_commands_and_flags(isolated_home):
    assert complete("zyquo-tui ru", isolated_home) == ["runs"]
    assert complete("zyquo-tui runs ne", isolated_home) == ["new"]
    assert complete("zyquo-tui runs new --learning", isolated_home) == ["--learning-rate"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shells_script_names_the_command(shell, capsys):
    from zyquo_tui.cli.main import main

    assert main(["completion", shell]) == 0
    assert "zyquo-tui" in capsys.readouterr().out


def test_an_unknown_shell_exits_2_with_one_sentence(capsys):
    from zyquo_tui.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["completion", "tcsh"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
