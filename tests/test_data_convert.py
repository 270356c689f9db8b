"""Datasets as they come: `data convert` turns ShareGPT, Alpaca, renamed columns and parquet
into a folder mlx-lm reads, keeping each row's source for error messages; `--data` takes a
folder of parquet files and a Hugging Face dataset already in the local cache. Each trains
for real on the sample model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_trainer

from zyquo_tui.cli.main import main
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.library.data_argument import resolve_data
from zyquo_tui.core.library.datasets import validate_dataset
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.library_text import dataset_problems

FORMATS = REPO / "tests" / "data" / "formats"
SHORT = ("--iters", "6", "--batch-size", "4", "--num-layers", "-1", "--steps-per-report", "2",
         "--steps-per-eval", "3", "--save-every", "6", "--val-batches", "1")


def cli(capsys, *args) -> tuple[int, str, str]:
    status = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in lines(path)]


def train(capsys, tiny_model: Path, data: str | Path) -> list[dict]:
    """`runs new` with `--data data`, then the real trainer to the end; the run's events."""
    status, out, err = cli(capsys, "runs", "new", "--model", tiny_model, "--data", data, *SHORT)
    assert status == 0, err
    store = RunStore()
    run_dir = store.run_dir(out.strip())
    done = run_trainer(run_dir)
    assert done.returncode == 0, done.stderr
    return read_events(run_dir / "events.jsonl")


def write_parquet(rows_: list[dict], path: Path) -> None:
    import pyarrow
    import pyarrow.parquet

    path.parent.mkdir(parents=True, exist_ok=True)
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows_), path)


def alpaca_rows() -> list[dict]:
    return json.loads((FORMATS / "alpaca.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("source, flags, data_format", [
    ("sharegpt.jsonl", (), "chat"),
    ("alpaca.json", (), "completions"),
    ("renamed.jsonl", ("--prompt-feature", "question", "--completion-feature", "answer"),
     "completions"),
])
def test_a_converted_dataset_trains(capsys, tmp_path, tiny_model, source, flags, data_format):
    folder = tmp_path / "converted"
    status, out, err = cli(capsys, "data", "convert", FORMATS / source, "-o", folder, *flags,
                           "--json")
    assert status == 0, err
    summary = json.loads(out)
    assert summary["rows"] == {"train": 32, "valid": 4, "test": 4}
    assert summary["format"] == data_format

    status, out, _ = cli(capsys, "data", "check", folder, "--json")
    assert status == 0 and json.loads(out)["format"] == data_format

    events = train(capsys, tiny_model, folder)
    assert [e["iteration"] for e in events if e["type"] == "train"] == [2, 4, 6]
    assert events[-1]["type"] == "completed"


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


def test_check_and_a_run_name_the_source_row_of_a_bad_converted_row(capsys, tmp_path,
                                                                     tiny_model):
    source = tmp_path / "sharegpt.jsonl"
    text = lines(FORMATS / "sharegpt.jsonl")
    bad = json.loads(text[6])
    bad["conversations"][-1]["value"] = " "  # converts, but trains nothing
    text[6] = json.dumps(bad)
    source.write_text("\n".join(text) + "\n", encoding="utf-8")
    folder = tmp_path / "chat"
    assert cli(capsys, "data", "convert", source, "-o", folder, "--valid-fraction", "0.1")[0] == 0
    line = lines(folder / "sources" / "train.txt").index(f"{source}:7") + 1

    status, out, _ = cli(capsys, "data", "check", folder)
    assert status == 1
    assert f"{folder / 'train.jsonl'}:{line} (from {source}:7): messages[1] (assistant): " \
           "empty content" in out.splitlines()
    # The form and the Datasets screen say it by the files' names.
    shown = dataset_problems(validate_dataset(folder)).plain
    assert f"train.jsonl:{line} (from sharegpt.jsonl:7): messages[1] (assistant): empty " \
           "content" in shown.splitlines()

    status, out, err = cli(capsys, "runs", "new", "--model", tiny_model, "--data", folder,
                           *SHORT)
    assert status == 0, err
    run_dir = RunStore().run_dir(out.strip())
    assert run_trainer(run_dir).returncode == 1
    failed = read_events(run_dir / "events.jsonl")[-1]
    assert failed["type"] == "failed" and failed["cause"] == "data"
    assert failed["message"].startswith(f"{folder / 'train.jsonl'}:{line} (from {source}:7): ")


def test_a_folder_of_parquet_files_trains_by_its_path(capsys, tmp_path, tiny_model):
    # As the Hugging Face hub serves a dataset: data/SPLIT-00000-of-0000N.parquet.
    source = tmp_path / "hub-download"
    alpaca = alpaca_rows()
    write_parquet(alpaca[:30], source / "data" / "train-00000-of-00001.parquet")
    write_parquet(alpaca[30:36], source / "data" / "validation-00000-of-00001.parquet")
    write_parquet(alpaca[36:], source / "data" / "test-00000-of-00001.parquet")

    status, out, err = cli(capsys, "data", "convert", source, "-o", tmp_path / "out", "--json")
    assert status == 0, err
    assert json.loads(out)["rows"] == {"train": 30, "valid": 6, "test": 4}  # the hub's splits
    assert lines(tmp_path / "out" / "sources" / "valid.txt")[0] == \
        f"{source / 'data' / 'validation-00000-of-00001.parquet'}:row 1"

    events = train(capsys, tiny_model, source)
    assert events[-1]["type"] == "completed"
    run = RunStore().list()[0]
    converted = Path(run.data)
    assert converted.parent == Path(os.environ["ZYQUO_HOME"]) / "datasets" / "converted"
    assert rows(converted / "train.jsonl")[0] == {
        "prompt": f"{alpaca[0]['instruction']}\n\n{alpaca[0]['input']}",
        "completion": alpaca[0]["output"]}


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


def cache_with_the_datasets_library(dataset_id: str, source_rows: list[dict],
                                    parquet: Path) -> None:
    """What `load_dataset(dataset_id)` leaves in $HF_DATASETS_CACHE, made by the datasets
    library's own parquet builder from a local file (in a subprocess: the library reads its
    environment when imported)."""
    write_parquet(source_rows, parquet)
    org, name = dataset_id.split("/")
    script = f"""
import os
from datasets.packaged_modules.parquet.parquet import Parquet
builder = Parquet(cache_dir=os.environ["HF_DATASETS_CACHE"], dataset_name={name!r},
                  config_name="default", hash="0123abcd", data_files={{"train": {str(parquet)!r}}})
# Filed under the hub id, as load_dataset({dataset_id!r}) files what it downloads.
builder.repo_id, builder.config_id = {dataset_id!r}, "default"
builder._cache_dir = builder._build_cache_dir()
builder.download_and_prepare()
"""
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                   stdin=subprocess.DEVNULL)


def test_a_dataset_in_the_datasets_cache_trains_by_its_id_offline(capsys, tmp_path, hf_cache,
                                                                   tiny_model):
    cache_with_the_datasets_library("acme/tiny-alpaca", alpaca_rows(), tmp_path / "t.parquet")
    # The datasets library itself loads it offline from there: a cache as it keeps one.
    loaded = subprocess.run(
        [sys.executable, "-c", "import datasets; print(datasets.load_dataset("
                               "'acme/tiny-alpaca')['train'].num_rows)"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert loaded.stdout.strip() == "40", loaded.stderr

    events = train(capsys, tiny_model, "acme/tiny-alpaca")

    assert events[-1]["type"] == "completed"
    folder = Path(os.environ["ZYQUO_HOME"]) / "datasets" / "acme" / "tiny-alpaca"
    assert RunStore().list()[0].data == str(folder)
    assert json.loads((folder / "converted.json").read_text())["rows"] == \
        {"train": 32, "valid": 4, "test": 4}


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


def test_a_dataset_id_not_in_the_cache_is_one_sentence(capsys, hf_cache, tiny_model):
    status, out, err = cli(capsys, "runs", "new", "--model", tiny_model, "--data",
                           "acme/not-downloaded", *SHORT)
    assert status == 2 and out == ""
    assert err == (f"zyquo-tui: acme/not-downloaded is not a dataset folder, and no Hugging "
                   f"Face dataset 'acme/not-downloaded' is in the local caches "
                   f"({hf_cache / 'hub'}, {hf_cache / 'datasets'}): download it once (`hf "
                   "download --repo-type dataset acme/not-downloaded`), then give --data "
                   "acme/not-downloaded again.\n")
    assert RunStore().list() == []


async def test_the_datasets_screen_opens_a_cached_hugging_face_dataset_by_its_id(
        models, tmp_path, hf_cache):
    from test_setup_helpers import FixedSources, until
    from test_setup_helpers import setup_dashboard as dashboard

    from zyquo_tui.dashboard.dialogs.text_prompt import TextPromptDialog
    from zyquo_tui.dashboard.screens.datasets_screen import DatasetsScreen

    alpaca = alpaca_rows()
    alpaca[3]["output"] = ""  # converts, but has no answer to learn
    cache_with_the_datasets_library("acme/tiny-alpaca", alpaca, tmp_path / "t.parquet")
    app = dashboard(FixedSources)
    async with app.run_test(size=(140, 40)) as pilot:
        app.push_screen(DatasetsScreen())
        await until(pilot, lambda: app.screen.datasets, "the list")
        screen = app.screen
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, TextPromptDialog), "the prompt")
        app.screen.query_one("Input").value = "acme/tiny-alpaca"
        await pilot.press("enter")
        folder = Path(os.environ["ZYQUO_HOME"]) / "datasets" / "acme" / "tiny-alpaca"
        await until(pilot, lambda: any(d.path == folder for d in screen.datasets),
                    "the converted dataset")
        table = screen.query_one("DataTable")
        table.move_cursor(row=[d.path for d in screen.datasets].index(folder))
        await until(pilot, lambda: screen.report is not None and screen.report.errors,
                    "the report")
        problems = str(screen.query_one("#problems").content)
        assert "(from tiny-alpaca-train.arrow:row 4): 'completion' is empty" in problems


def test_splits_come_from_file_names_or_the_folder_that_holds_them():
    from zyquo_tui.core.library.source_rows import split_of

    named = {"data/train-00000-of-00001.parquet": "train",
             "data/validation-00000-of-00001.parquet": "valid",
             "acme___tiny/default/0.0.0/0123abcd/test-set-train.arrow": "train",
             "default/test/0000.parquet": "test", "dev.jsonl": "valid",
             "data/rows.parquet": None}
    assert {name: split_of(Path(name)) for name in named} == named
