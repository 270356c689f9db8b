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
from conftest import run_trainer
from test_data_convert import (
    FORMATS,
    alpaca_rows,
    cli,
    lines,
    rows,
    write_parquet,
)
from test_data_convert import hf_cache  # noqa: F401  (a fixture the tests here take)

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.library.datasets import validate_dataset
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.library_text import dataset_problems

SHORT = ("--iters", "6", "--batch-size", "4", "--num-layers", "-1", "--steps-per-report", "2",
         "--steps-per-eval", "3", "--save-every", "6", "--val-batches", "1")


def train(capsys, tiny_model: Path, data: str | Path) -> list[dict]:
    """`runs new` with `--data data`, then the real trainer to the end; the run's events."""
    status, out, err = cli(capsys, "runs", "new", "--model", tiny_model, "--data", data, *SHORT)
    assert status == 0, err
    store = RunStore()
    run_dir = store.run_dir(out.strip())
    done = run_trainer(run_dir)
    assert done.returncode == 0, done.stderr
    return read_events(run_dir / "events.jsonl")


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

    # `runs new` refuses to make the run, naming the row and its source...
    status, out, err = cli(capsys, "runs", "new", "--model", tiny_model, "--data", folder,
                           *SHORT)
    assert status == 2 and out == "" and RunStore().list() == []
    assert f"(the first: {folder / 'train.jsonl'}:{line} (from {source}:7): messages[1] " \
           "(assistant): empty content)" in err
    # ...and the trainer, given such a run all the same (made before the row went bad, or by
    # a script), fails naming them too.
    from helpers import make_run

    store, run = make_run(tiny_model, folder, store=RunStore(), iters=6)
    run_dir = store.run_dir(run.id)
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
