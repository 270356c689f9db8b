"""Datasets as they come: `data convert` turns ShareGPT, Alpaca, renamed columns and parquet
into a folder mlx-lm reads, keeping each row's source for error messages; `--data` takes a
folder of parquet files and a Hugging Face dataset already in the local cache. Each trains
for real on the sample model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import REPO

from zyquo_tui.cli.main import main
from zyquo_tui.core.library.data_argument import resolve_data

FORMATS = REPO / "tests" / "data" / "formats"


def cli(capsys, *args) -> tuple[int, str, str]:
    status = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in lines(path)]


def write_parquet(rows_: list[dict], path: Path) -> None:
    import pyarrow
    import pyarrow.parquet

    path.parent.mkdir(parents=True, exist_ok=True)
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows_), path)


def alpaca_rows() -> list[dict]:
    return json.loads((FORMATS / "alpaca.json").read_text(encoding="utf-8"))


def test_sharegpt_speakers_become_roles_and_each_row_keeps_its_source_line(capsys, tmp_path):
    folder = tmp_path / "chat"
    assert cli(capsys, "data", "convert", FORMATS / "sharegpt.jsonl", "-o", folder)[0] == 0

    source = lines(FORMATS / "sharegpt.jsonl")
    for split in ("train", "valid", "test"):
        for row, where in zip(rows(folder / f"{split}.jsonl"), lines(folder / "sources" /
                                                                    f"{split}.txt")):
            file, line = where.rsplit(":", 1)
            assert file == str(FORMATS / "sharegpt.jsonl")
            original = json.loads(source[int(line) - 1])["conversations"]
            roles = {"system": "system", "human": "user", "gpt": "assistant"}
            assert row["messages"] == [{"role": roles[t["from"]], "content": t["value"]}
                                       for t in original]


def test_alpaca_input_follows_the_instruction(capsys, tmp_path):
    folder = tmp_path / "completions"
    assert cli(capsys, "data", "convert", FORMATS / "alpaca.json", "-o", folder,
               "--valid-fraction", "0")[0] == 0
    converted = rows(folder / "train.jsonl")
    assert len(converted) == 40 and not (folder / "valid.jsonl").exists()
    first = alpaca_rows()[0]
    assert first["input"]  # the sample's first row has an input
    assert converted[0] == {"prompt": f"{first['instruction']}\n\n{first['input']}",
                            "completion": first["output"]}
    assert converted[1] == {"prompt": alpaca_rows()[1]["instruction"],
                            "completion": alpaca_rows()[1]["output"]}
    assert lines(folder / "sources" / "train.txt")[:2] == [
        f"{FORMATS / 'alpaca.json'}:row 1", f"{FORMATS / 'alpaca.json'}:row 2"]


def test_the_held_out_rows_follow_the_seed(capsys, tmp_path):
    made = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        assert cli(capsys, "data", "convert", FORMATS / "renamed.jsonl", "-o", tmp_path / name,
                   "--prompt-feature", "question", "--completion-feature", "answer",
                   "--valid-fraction", "0.2", "--test-fraction", "0.1", "--seed", seed)[0] == 0
        made[name] = [lines(tmp_path / name / f"{s}.jsonl") for s in ("train", "valid", "test")]
    assert [len(split) for split in made["a"]] == [28, 8, 4]
    assert made["a"] == made["b"] and made["a"] != made["c"]
    assert sorted(sum(made["a"], [])) == sorted(sum(made["c"], []))  # the same rows, dealt anew


def test_data_check_on_sharegpt_or_alpaca_suggests_the_convert_command(capsys):
    for source, kind, target in (("sharegpt.jsonl", "ShareGPT", "chat"),
                                 ("alpaca.json", "Alpaca", "completions")):
        status, out, _ = cli(capsys, "data", "check", FORMATS / source)
        assert status == 1
        assert out.splitlines()[-1] == (
            f"These are {kind} rows, which mlx-lm does not read: `zyquo-tui data convert "
            f"{FORMATS / source} -o FOLDER` writes them as {target} rows.")
    status, out, _ = cli(capsys, "data", "check", REPO / "sample_data" / "chat", "--json")
    assert status == 0 and json.loads(out)["suggestion"] is None


def test_data_check_on_a_parquet_file_suggests_the_convert_command(capsys, tmp_path):
    source = tmp_path / "train-00000-of-00001.parquet"
    write_parquet(rows(REPO / "sample_data" / "completions" / "train.jsonl"), source)
    status, out, _ = cli(capsys, "data", "check", source)
    assert status == 1
    assert out.splitlines()[-1] == (
        f"mlx-lm reads JSON Lines, not parquet: `zyquo-tui data convert {source} -o FOLDER` "
        "writes its rows as a dataset folder (--data takes parquet as it is, and converts it).")


def test_a_row_that_cannot_be_converted_is_named_at_its_line_and_nothing_is_written(
        capsys, tmp_path):
    source = tmp_path / "sharegpt.jsonl"
    text = lines(FORMATS / "sharegpt.jsonl")
    text[4] = text[4].replace('"from": "gpt"', '"from": "narrator"')
    source.write_text("\n".join(text) + "\n", encoding="utf-8")

    status, out, err = cli(capsys, "data", "convert", source, "-o", tmp_path / "out")

    assert status == 1 and out == ""
    assert err == (f"zyquo-tui: {source}:5: conversations[1]: unknown speaker 'narrator'; "
                   "ShareGPT's are assistant, bard, bing, chatgpt, function_call, "
                   "function_response, gpt, human, model, observation, system, tool, user; "
                   "fix the source, or name its columns with --prompt-feature and "
                   "--completion-feature.\n")
    assert not (tmp_path / "out").exists()


def test_a_parquet_source_is_converted_again_only_when_it_changed(tmp_path):
    source = tmp_path / "train.parquet"
    write_parquet(alpaca_rows(), source)
    folder = Path(resolve_data(str(source)))
    made_at = (folder / "converted.json").stat().st_mtime_ns

    assert Path(resolve_data(str(source))) == folder
    assert (folder / "converted.json").stat().st_mtime_ns == made_at

    write_parquet(alpaca_rows()[:20], source)
    assert Path(resolve_data(str(source))) == folder
    assert sum(len(rows(folder / f"{s}.jsonl")) for s in ("train", "valid", "test")) == 20


@pytest.fixture
def hf_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face home of the test's own, offline."""
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(home / "datasets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return home


def test_a_dataset_in_the_hub_cache_converts_by_its_id(hf_cache):
    # `hf download --repo-type dataset acme/chat` leaves the repository's files in a snapshot.
    repo = hf_cache / "hub" / "datasets--acme--chat"
    revision = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    conversations = [json.loads(line) for line in lines(FORMATS / "sharegpt.jsonl")]
    # The hub cache keeps a file once, in blobs/, and links it from each snapshot.
    blob = repo / "blobs" / "5d41402abc4b2a76b9719d911017c592"
    write_parquet(conversations, blob)
    served = repo / "snapshots" / revision / "data" / "train-00000-of-00001.parquet"
    served.parent.mkdir(parents=True)
    served.symlink_to(os.path.relpath(blob, served.parent))

    folder = Path(resolve_data("acme/chat"))

    assert folder == Path(os.environ["ZYQUO_HOME"]) / "datasets" / "acme" / "chat"
    # Rows are named as the repository names its file, not by the blob's hash.
    assert lines(folder / "sources" / "train.txt")[0] == f"{served}:row 1"
    assert rows(folder / "train.jsonl")[1] == {"messages": [
        {"role": "user", "content": conversations[1]["conversations"][0]["value"]},
        {"role": "assistant", "content": conversations[1]["conversations"][1]["value"]}]}


def test_splits_come_from_file_names_or_the_folder_that_holds_them():
    from zyquo_tui.core.library.source_rows import split_of

    named = {"data/train-00000-of-00001.parquet": "train",
             "data/validation-00000-of-00001.parquet": "valid",
             "acme___tiny/default/0.0.0/0123abcd/test-set-train.arrow": "train",
             "default/test/0000.parquet": "test", "dev.jsonl": "valid",
             "data/rows.parquet": None}
    assert {name: split_of(Path(name)) for name in named} == named
