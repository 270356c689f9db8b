"""Dataset discovery and validation: every problem at its file and line, in bounded memory."""

from __future__ import annotations

import json

from conftest import zyquo_cli
from test_datasets import chat_row, write_lines

from zyquo_tui.core.library.dataset_files import MAX_PROBLEMS_LISTED
from zyquo_tui.core.library.datasets import (
    validate_dataset,
)


def test_data_check_says_how_many_problems_at_a_line_it_listed(tmp_path, capsys):
    folder = tmp_path / "many"
    folder.mkdir()
    lines = [chat_row(0)] + ["{broken"] * 120  # and a whole-file finding: duplicates
    write_lines(folder / "train.jsonl", lines)
    done = zyquo_cli("data", "check", str(folder))
    assert done.returncode == 1
    assert (f"{folder / 'train.jsonl'}: ... and 70 more problems (the first "
            f"{MAX_PROBLEMS_LISTED} at a line are listed)\n") in done.stdout


def test_several_worker_processes_report_exactly_what_one_process_does(tmp_path):
    folder = tmp_path / "d"
    lines = [chat_row(i) for i in range(3000)]
    for line_number in (1, 777, 1500, 2999):  # one bad row early, in the middle, at the end
        lines[line_number - 1] = f"{{not json {line_number}"
    lines[1999] = json.dumps({"text": "a text row"})
    lines[2500] = lines[10]  # a duplicate across distant parts of the file
    write_lines(folder / "train.jsonl", lines + [""])  # and a trailing empty line
    write_lines(folder / "valid.jsonl", [chat_row(i) for i in (5, 6, 5000, 5001, 5002)])
    one = validate_dataset(folder, workers=1)
    three = validate_dataset(folder, workers=3)
    assert [str(p) for p in three.problems] == [str(p) for p in one.problems]
    assert [p.line for p in one.files["train"].problems] == [1, 777, 1500, 2000, 2999, 3001, None]
    assert (three.rows, three.errors, three.warnings) == (one.rows, one.errors, one.warnings)
    assert three.files["train"].duplicate_rows == one.files["train"].duplicate_rows == 1
    assert any("2 rows also in train.jsonl" in p.message for p in three.problems)
