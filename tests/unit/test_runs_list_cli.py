"""`zyquo-tui runs list` builds only its own parser: scripts call it over and over, and the other
actions' parsers (a flag for every setting) and the modules behind them (exports, checkpoints,
try) cost it more than listing 10,000 runs (bench/bench_runs_list.py times it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zyquo_tui.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]
NOT_FOR_LISTING = ("zyquo_tui.core.processes.exports", "zyquo_tui.core.store.retention",
                   "zyquo_tui.core.processes.try_session", "zyquo_tui.cli.grid_cmd")


def test_runs_list_imports_none_of_the_other_actions_modules(tmp_path):
    code = ("import contextlib, io, json, sys\n"
            "from zyquo_tui.cli.main import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    status = main(['runs', 'list', '--json'])\n"
            f"print(json.dumps([status, json.loads(out.getvalue()), "
            f"[m for m in {NOT_FOR_LISTING!r} if m in sys.modules]]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "ZYQUO_HOME": str(tmp_path / "home")},
                          check=True)
    status, rows, imported = json.loads(done.stdout)
    assert (status, rows, imported) == (0, [], [])


def test_the_list_parser_alone_reads_what_the_whole_one_reads():
    whole = build_parser("runs").parse_args(["runs", "list", "--json"])
    alone = build_parser("runs", "list").parse_args(["runs", "list", "--json"])
    assert vars(alone) == vars(whole)


def test_a_mistyped_action_is_told_every_action(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser("runs", "lst").parse_args(["runs", "lst"])
    assert exited.value.code == 2
    assert "invalid choice: 'lst' (choose from 'list', 'new', 'start'" in capsys.readouterr().err


def test_runs_list_from_a_fresh_index_imports_no_run_record_nor_settings(tmp_path):
    """The run record and the settings definition cost `runs list` a third of its time; rows
    served from the index need neither."""
    from zyquo_tui.core.runs.run import Run, RunState
    from zyquo_tui.core.store.store import RunStore

    store = RunStore(tmp_path / "home").ensure()
    run = Run.new(model="/models/tiny", data="/data/sums")
    run.state = RunState.COMPLETED
    store.create(run)
    env = {**os.environ, "ZYQUO_HOME": str(tmp_path / "home")}
    subprocess.run([sys.executable, "-m", "zyquo_tui", "runs", "list", "--json"], cwd=REPO,
                   env=env, check=True, capture_output=True)  # writes the index
    code = ("import contextlib, io, json, sys\n"
            "from zyquo_tui.cli.main import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    status = main(['runs', 'list', '--json'])\n"
            "print(json.dumps([status, [r['id'] for r in json.loads(out.getvalue())], "
            "[m for m in ('zyquo_tui.core.runs.run', 'zyquo_tui.core.runs.settings') "
            "if m in sys.modules]]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env=env, check=True)
    assert json.loads(done.stdout) == [0, [run.id], []]
