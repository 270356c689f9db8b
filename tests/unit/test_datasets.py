"""Dataset discovery and validation: every problem at its file and line, in bounded memory."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import pytest

from zyquo_tui.cli.main import main
from zyquo_tui.core.library.dataset_files import MAX_PROBLEMS_LISTED, validate_file
from zyquo_tui.core.library.datasets import (
    SOURCE_PATH,
    SOURCE_SAMPLE,
    SOURCE_ZYQUO,
    datasets_dir,
    discover_datasets,
    validate_dataset,
)
from zyquo_tui.core.library.rows import (
    CHAT,
    COMPLETIONS,
    ERROR,
    PREFERENCE,
    PROMPTS,
    TEXT,
    TOOLS,
    WARNING,
    row_format,
)
from zyquo_tui.resources import sample_data_dir

BAD = Path(__file__).parents[1] / "data" / "bad_datasets"


def chat_row(index: int, answer: str | None = None) -> str:
    return json.dumps({"messages": [
        {"role": "user", "content": f"What is {index} plus 1?"},
        {"role": "assistant", "content": answer or f"{index} plus 1 is {index + 1}."}]})


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def dataset(folder: Path, train: int | None = 8, valid: int | None = 8,
            first_valid: int = 1000) -> Path:
    """A chat dataset folder with `train` and `valid` distinct rows (None: no such file)."""
    if train is not None:
        write_lines(folder / "train.jsonl", [chat_row(i) for i in range(train)])
    if valid is not None:
        write_lines(folder / "valid.jsonl",
                    [chat_row(first_valid + i) for i in range(valid)])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def found(report) -> list[tuple[int | None, str]]:
    return [(p.line, p.severity) for p in report.problems]


CORPUS = {
    "invalid_json.jsonl": [(3, ERROR, "invalid JSON at column 48")],
    "invalid_utf8.jsonl": [(4, ERROR, "invalid UTF-8")],
    "bom.jsonl": [(1, ERROR, "byte-order mark")],
    "empty_line.jsonl": [(3, ERROR, "empty line")],
    "json_array_row.jsonl": [(4, ERROR, "a JSON array where a row should be")],
    "whole_file_array.jsonl": [(1, ERROR, "one JSON array, not JSON Lines"),
                               (2, ERROR, "invalid JSON"),
                               (4, ERROR, "a row spread over several lines")],
    "missing_key.jsonl": [(3, ERROR, "missing 'completion' for a completions row")],
    "mistyped_key.jsonl": [(2, ERROR, "'prompt' must be a string, found number")],
    "messages_not_a_list.jsonl": [(2, ERROR, "'messages' must be an array")],
    "unknown_role.jsonl": [(4, ERROR, "unknown role 'human'")],
    "sharegpt_style.jsonl": [(1, ERROR, "ShareGPT style")],
    "assistant_first.jsonl": [(2, ERROR, "must open with a user message, not assistant")],
    "two_users_in_a_row.jsonl": [(3, ERROR, "two user messages in a row")],
    "system_not_first.jsonl": [(3, ERROR, "a system message must come first")],
    "empty_content.jsonl": [(5, ERROR, "messages[1] (assistant): empty content")],
    "no_assistant.jsonl": [(3, ERROR, "has no assistant message")],
    "mixed_formats.jsonl": [(4, ERROR, "mixed formats: a text row in a chat file")],
    "unknown_format.jsonl": [(1, ERROR, "no known format (keys: answer, question)"),
                             (2, ERROR, "no known format")],
    "duplicates.jsonl": [(None, WARNING, "3 duplicate rows")],
}


def test_the_corpus_has_one_expectation_per_file():
    assert sorted(p.name for p in BAD.glob("*.jsonl")) == sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_each_bad_file_is_reported_at_its_line_and_nothing_else(name):
    report = validate_file(BAD / name)
    assert [(p.line, p.severity) for p in report.problems] == \
        [(line, severity) for line, severity, _ in CORPUS[name]]
    for problem, (_, _, text) in zip(report.problems, CORPUS[name]):
        assert text in problem.message
        assert problem.file == str(BAD / name)
    assert report.errors == sum(s == ERROR for _, s, _ in CORPUS[name])


def test_problems_print_as_file_colon_line_colon_message():
    (problem,) = validate_file(BAD / "empty_line.jsonl", "data/train.jsonl").problems
    assert str(problem) == ("data/train.jsonl:3: empty line: mlx-lm reads every line as a row; "
                            "remove it")
    (duplicates,) = validate_file(BAD / "duplicates.jsonl", "d.jsonl").problems
    assert str(duplicates).startswith("d.jsonl: warning: 3 duplicate rows")


def test_a_file_with_many_problems_lists_the_first_fifty_and_counts_the_rest(tmp_path):
    lines = [chat_row(0)] + [f"{{broken {i}" for i in range(120)]
    report = validate_file(write_lines(tmp_path / "train.jsonl", lines))
    assert len(report.problems) == MAX_PROBLEMS_LISTED
    assert report.problems[0].line == 2 and report.problems[-1].line == 51
    assert report.problems_not_listed == 70
    assert report.errors == 120


def test_whole_file_findings_are_listed_even_past_the_limit(tmp_path):
    lines = [chat_row(0)] + ["{broken"] * 120  # duplicates of each other, too
    report = validate_file(write_lines(tmp_path / "train.jsonl", lines))
    assert len(report.problems) == MAX_PROBLEMS_LISTED + 1
    assert report.problems[-1].message.startswith("119 duplicate rows")


def test_good_rows_of_every_format_pass(tmp_path):
    rows = {
        COMPLETIONS: {"prompt": "Hi", "completion": "Hello"},
        CHAT: {"messages": [{"role": "system", "content": "Be kind."},
                            {"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": "Hello"}]},
        TOOLS: {"messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"function": {"name": "weather", "arguments": {}}}]},
            {"role": "tool", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."}],
            "tools": [{"type": "function", "function": {"name": "weather"}}]},
        TEXT: {"text": "Once upon a time."},
        PREFERENCE: {"prompt": "Hi", "chosen": "Hello!", "rejected": "Go away."},
    }
    for kind, row in rows.items():
        assert row_format(row) == kind
        report = validate_file(write_lines(tmp_path / f"{kind}.jsonl", [json.dumps(row)]))
        assert (report.format, report.problems) == (kind, []), kind


def test_chat_rows_with_and_without_tools_make_one_tools_file(tmp_path):
    tools_row = {"messages": [{"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "Hello"}],
                 "tools": [{"type": "function", "function": {"name": "f"}}]}
    report = validate_file(write_lines(tmp_path / "t.jsonl", [chat_row(1), json.dumps(tools_row)]))
    assert (report.format, report.problems) == (TOOLS, [])


def test_a_conversation_ending_with_a_user_turn_is_a_warning(tmp_path):
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"},
                        {"role": "user", "content": "Bye"}]}
    (problem,) = validate_file(write_lines(tmp_path / "t.jsonl", [json.dumps(row)])).problems
    assert problem.severity == WARNING and "ends with a user message" in problem.message


def test_the_same_chosen_and_rejected_is_a_warning(tmp_path):
    row = {"prompt": "Hi", "chosen": "Hello", "rejected": "Hello"}
    (problem,) = validate_file(write_lines(tmp_path / "p.jsonl", [json.dumps(row)])).problems
    assert problem.severity == WARNING and "teaches nothing" in problem.message


@pytest.mark.parametrize("kind", ["chat", "completions", "text", "preference"])
def test_the_shipped_samples_are_valid_with_no_warning(kind):
    report = validate_dataset(sample_data_dir() / kind)
    assert report.problems == []
    assert report.format == kind
    assert report.rows == {"train": 225, "valid": 40, "test": 40}


def test_train_smaller_than_the_batch_size_is_an_error(tmp_path):
    folder = dataset(tmp_path / "d", train=3)
    report = validate_dataset(folder)
    assert [(p.file, p.severity) for p in report.problems] == [
        (str(folder / "train.jsonl"), ERROR)]
    assert "fewer than the batch size 4" in report.problems[0].message
    assert validate_dataset(folder, batch_size=2).ok


def test_no_valid_file_is_only_a_warning(tmp_path):
    report = validate_dataset(dataset(tmp_path / "d", valid=None))
    assert report.ok
    assert [(p.severity, "no valid.jsonl" in p.message) for p in report.problems] == \
        [(WARNING, True)]


def test_a_valid_set_smaller_than_one_batch_is_a_warning_since_validation_is_skipped(tmp_path):
    report = validate_dataset(dataset(tmp_path / "d", valid=3))
    assert report.ok
    (problem,) = report.problems
    assert problem.severity == WARNING and "validation is skipped" in problem.message


def test_a_valid_set_of_one_batch_is_a_warning(tmp_path):
    (problem,) = validate_dataset(dataset(tmp_path / "d", valid=5)).problems
    assert problem.severity == WARNING and "noisy" in problem.message


def test_an_empty_split_file_is_an_error(tmp_path):
    folder = dataset(tmp_path / "d")
    (folder / "valid.jsonl").write_text("")
    report = validate_dataset(folder)
    assert [(p.file, p.line, p.severity) for p in report.problems] == [
        (str(folder / "valid.jsonl"), None, ERROR)]
    assert "no rows" in report.problems[0].message


def test_valid_rows_that_are_also_train_rows_are_a_warning(tmp_path):
    folder = dataset(tmp_path / "d", train=10, valid=None)
    write_lines(folder / "valid.jsonl", [chat_row(i) for i in (1, 2, 3, 100, 101, 102, 103, 104)])
    (problem,) = validate_dataset(folder).problems
    assert problem.severity == WARNING
    assert problem.message.startswith("3 rows also in train.jsonl")


def test_a_folder_without_train_jsonl_is_one_error_naming_the_files_it_has(tmp_path):
    folder = dataset(tmp_path / "d", train=None)
    (problem,) = validate_dataset(folder).problems
    assert (problem.file, problem.severity) == (str(folder), ERROR)
    assert "no train.jsonl (this folder has valid.jsonl)" in problem.message


def test_splits_in_different_formats_are_a_warning(tmp_path):
    folder = dataset(tmp_path / "d", valid=None)
    write_lines(folder / "valid.jsonl", [json.dumps({"text": f"row {i}"}) for i in range(8)])
    (problem,) = validate_dataset(folder).problems
    assert problem.severity == WARNING and "text format, but train.jsonl is chat" in \
        problem.message


def test_a_missing_path_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        validate_dataset(tmp_path / "nowhere")


def test_validation_streams_a_file_in_memory_far_below_its_size(tmp_path):
    answer = "word " * 40
    path = write_lines(tmp_path / "train.jsonl", [chat_row(i, answer) for i in range(20_000)])
    tracemalloc.start()
    try:
        report = validate_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.rows == 20_000 and report.problems == []
    size = path.stat().st_size
    assert size > 5_000_000
    # The 1 MiB read buffer, a few rows, and 8 bytes a row for duplicate hashes.
    assert peak < 2_000_000, f"peak {peak} bytes for a {size}-byte file"


def test_progress_is_reported_while_a_big_file_is_read(tmp_path):
    path = write_lines(tmp_path / "train.jsonl", [json.dumps({"text": "x"})] * 140_000)
    seen = []
    validate_file(path, on_progress=seen.append)
    assert seen == [65_536, 131_072]


def test_datasets_are_found_in_the_home_the_samples_and_given_paths(isolated_home, tmp_path):
    dataset(datasets_dir() / "mine")
    dataset(datasets_dir() / "team" / "support")
    extra = dataset(tmp_path / "elsewhere")
    found = {d.name: d for d in discover_datasets(extra=[extra])}
    assert {name: d.source for name, d in found.items()} == {
        "mine": SOURCE_ZYQUO, "team/support": SOURCE_ZYQUO, "chat": SOURCE_SAMPLE,
        "completions": SOURCE_SAMPLE, "text": SOURCE_SAMPLE, "preference": SOURCE_SAMPLE,
        "rl": SOURCE_SAMPLE, "elsewhere": SOURCE_PATH}
    assert found["preference"].format == PREFERENCE
    assert found["rl"].format == PROMPTS
    assert found["mine"].format == CHAT
    assert set(found["chat"].split_bytes) == {"train", "valid", "test"}


def test_check_of_a_valid_dataset_exits_0_and_says_so(capsys):
    assert main(["data", "check", str(sample_data_dir() / "completions")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{sample_data_dir() / 'completions'}: completions; train 225 rows, "
                   "valid 40 rows, test 40 rows", "valid: 0 errors, 0 warnings"]


def test_check_with_warnings_only_exits_0(tmp_path, capsys):
    folder = dataset(tmp_path / "d", valid=None)
    assert main(["data", "check", str(folder)]) == 0
    assert f"{folder / 'valid.jsonl'}: warning: no valid.jsonl" in capsys.readouterr().out


def test_check_prints_each_problem_as_file_line_message_and_exits_1(tmp_path, capsys):
    folder = tmp_path / "d"
    shutil.copyfile(BAD / "two_users_in_a_row.jsonl", dataset(folder) / "train.jsonl")
    assert main(["data", "check", str(folder)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"{folder / 'train.jsonl'}:3: messages[1]: two user messages in a row: "
                      "user and assistant must take turns")
    assert out[-1] == "not valid: 1 error, 0 warnings"


def test_check_of_preference_rows_says_which_objectives_train_them(capsys):
    folder = sample_data_dir() / "preference"
    assert main(["data", "check", str(folder)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == "valid: 0 errors, 0 warnings"
    assert out[-1] == "trains the objectives dpo and orpo (`runs new --objective`), not sft"
    assert main(["data", "check", str(folder), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is True and data["objectives"] == ["dpo", "orpo"]
    assert data["training_refusal"] is None


def test_check_of_chat_pairs_needs_a_shared_prompt(tmp_path):
    folder = tmp_path / "pairs"
    folder.mkdir()
    user = {"role": "user", "content": "Hi?"}
    rows = [
        {"chosen": [user, {"role": "assistant", "content": "Hello."}],
         "rejected": [user, {"role": "assistant", "content": "Go away."}]},
        {"chosen": [user, {"role": "assistant", "content": "Hello."}],
         "rejected": [{"role": "user", "content": "Bye?"},
                      {"role": "assistant", "content": "No."}]},
        {"chosen": "Hello.", "rejected": "No."},
        {"prompt": "Hi?", "chosen": "Same.", "rejected": "Same."},
        {"prompt": "Hi?", "chosen": "", "rejected": "No."},
    ]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = validate_dataset(folder)
    found = {(p.line, p.severity): p.message for p in report.problems if p.line}
    assert "do not share their prompt turns" in found[(2, "error")]
    assert "'prompt' is missing" in found[(3, "error")]
    assert "are the same" in found[(4, "warning")]
    assert "'chosen' is empty" in found[(5, "error")]
    assert 1 not in {line for line, _ in found}


def test_check_batch_size_decides_whether_train_is_big_enough(tmp_path):
    folder = dataset(tmp_path / "d", train=6)
    assert main(["data", "check", str(folder)]) == 0
    assert main(["data", "check", str(folder), "--batch-size", "8"]) == 1


def test_check_json_lists_problems_format_and_rows(tmp_path, capsys):
    folder = dataset(tmp_path / "d")
    shutil.copyfile(BAD / "mixed_formats.jsonl", folder / "train.jsonl")
    assert main(["data", "check", str(folder), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1
    assert (data["valid"], data["format"], data["rows"], data["batch_size"]) == \
        (False, "chat", {"train": 5, "valid": 8}, 4)
    assert data["problems"] == [{"file": str(folder / "train.jsonl"), "line": 4,
                                 "message": data["problems"][0]["message"],
                                 "severity": "error", "source": None}]
    assert data["problems"][0]["message"].startswith("mixed formats")
    assert (data["errors"], data["warnings"], data["token_stats"]) == (1, 0, None)


def test_check_of_a_folder_without_train_jsonl_is_a_problem_found(tmp_path):
    assert main(["data", "check", str(dataset(tmp_path / "d", train=None))]) == 1


@pytest.mark.parametrize("argv", [
    ["data", "check", "/no/such/folder"],
    ["data", "check", "SAMPLE", "--max-seq-length", "512"],
    ["data", "check", "SAMPLE", "--model", "/no/such/model"],
    ["data", "check", "SAMPLE", "--batch-size", "0"],
])
def test_bad_usage_exits_2_with_one_sentence(argv, capsys):
    argv = [str(sample_data_dir() / "chat") if a == "SAMPLE" else a for a in argv]
    try:
        status = main(argv)
    except SystemExit as exit:  # argparse rejects a bad number itself
        status = exit.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zyquo-tui: ") and "\n" not in err


def test_data_list_shows_the_samples(capsys):
    assert main(["data", "list", "--json"]) == 0
    names = [d["name"] for d in json.loads(capsys.readouterr().out)["datasets"]]
    assert {"chat", "completions", "text", "preference"} <= set(names)


def test_conversational_preference_rows_pass_and_their_messages_are_checked(tmp_path):
    good = {"prompt": [{"role": "user", "content": "Hi"}],
            "chosen": [{"role": "assistant", "content": "Hello!"}],
            "rejected": [{"role": "assistant", "content": "Go away."}]}
    bad = {**good, "rejected": [{"role": "bot", "content": "Go away."}]}
    report = validate_file(write_lines(tmp_path / "p.jsonl", [json.dumps(good), json.dumps(bad)]))
    assert report.format == PREFERENCE
    assert [(p.line, p.message) for p in report.problems] == [
        (2, "rejected[0]: unknown role 'bot'")]
