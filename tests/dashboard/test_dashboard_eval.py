"""The checkpoints screen's Eval, driven from the keyboard (Pilot): a trained sample run's
checkpoint against its base model, through the real evaluator subprocess."""

from __future__ import annotations

import io
import json
import shutil

from conftest import SAMPLE_DATA, zyquo_cli
from helpers import copy_run
from test_dashboard_try_export import QUIET, open_checkpoints, wait_until

from rich.console import Console
from textual.widgets import Static

from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.dialogs.evaluation import EvalDialog
from zyquo_tui.dashboard.dialogs.text_prompt import TextPromptDialog


def rendered(content) -> str:
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(content)
    return console.export_text()


async def test_eval_a_checkpoint_on_the_test_split_shows_base_and_adapter(trained_runs,
                                                                         isolated_home):
    run_id = copy_run(trained_runs["float"], isolated_home)
    app = ZyquoApp(RunStore(isolated_home), notifications=QUIET, poll_interval=0.3)
    async with app.run_test(size=(120, 36)) as pilot:
        await open_checkpoints(pilot, run_id, 20)
        await pilot.press("v")
        dialog = app.screen
        assert isinstance(dialog, EvalDialog)
        assert dialog.request.step == 20 and dialog.request.rows == 40
        assert dialog.request.data == SAMPLE_DATA / "completions" / "test.jsonl"
        await wait_until(pilot, lambda: dialog.result is not None, "the evaluation", 300)
        shown = rendered(dialog.query_one("#eval-result", Static).content)
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, EvalDialog)

    # The figures the CLI prints for the same checkpoint and rows, on the screen.
    cli = zyquo_cli("eval", run_id, "--checkpoint", "20", "--exact", "--json")
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)
    assert dialog.result == expected
    adapter, base = expected["adapter"]["nll"], expected["base"]["nll"]
    assert adapter["mean"] < base["mean"]
    for figure in (base, adapter):
        assert f"{figure['mean']:.3f} ± {figure['se']:.3f}" in shown
    assert "ADAPTER (step 20)" in shown and "exact match (n=40)" in shown


async def test_eval_asks_for_rows_when_the_run_has_no_test_split(trained_runs, isolated_home,
                                                                tmp_path):
    run_id = copy_run(trained_runs["float"], isolated_home)
    data = tmp_path / "no-test"
    data.mkdir()
    shutil.copy(SAMPLE_DATA / "completions" / "train.jsonl", data / "train.jsonl")
    RunStore(isolated_home).update(run_id, lambda run: setattr(run, "data", str(data)))
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join((SAMPLE_DATA / "chat" / "test.jsonl").read_text()
                            .splitlines(keepends=True)[:3]))
    app = ZyquoApp(RunStore(isolated_home), notifications=QUIET, poll_interval=0.3)
    async with app.run_test(size=(120, 36)) as pilot:
        await open_checkpoints(pilot, run_id, 40)
        await pilot.press("v")
        assert isinstance(app.screen, TextPromptDialog)
        await pilot.press(*str(tmp_path / "missing.jsonl"), "enter")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, EvalDialog)  # refused: a notification says why
        assert any("missing.jsonl is not a file" in n.message
                   for n in app._notifications)

        await pilot.press("v")
        await pilot.press(*str(rows), "enter")
        dialog = app.screen
        assert isinstance(dialog, EvalDialog) and dialog.request.rows == 3
        await wait_until(pilot, lambda: dialog.result is not None, "the evaluation", 300)
        assert dialog.result["data"] == str(rows)
        assert dialog.result["adapter"]["nll"]["n"] == 3
