"""Experiment trackers (`--report-to`): a real run's figures reach trackio's local store and
wandb's offline files as its events carry them; a tracker that is unknown or not installed is
one sentence at `runs new`; one that cannot start costs a warning, not the run; a config's
report_to is honoured, never silently dropped."""

from __future__ import annotations

import glob
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import SAMPLE_DATA, run_trainer
from helpers import make_run

from zyquo_tui.cli.main import main
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.trainer.trackers import TrackedEvents, Tracker

COMPLETIONS = SAMPLE_DATA / "completions"
SHORT = {"iters": 10, "steps_per_report": 2, "steps_per_eval": 5, "save_every": 10}


def train_losses(run_dir: Path) -> dict[int, float]:
    return {e["iteration"]: e["train_loss"] for e in read_events(run_dir / "events.jsonl")
            if e["type"] == "train"}


def val_losses(run_dir: Path) -> dict[int, float]:
    return {e["iteration"]: e["val_loss"] for e in read_events(run_dir / "events.jsonl")
            if e["type"] == "val"}


def test_a_run_reporting_to_trackio_leaves_its_losses_in_trackios_local_store(
        tiny_model, tmp_path, monkeypatch):
    pytest.importorskip("trackio")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    store, run = make_run(tiny_model, COMPLETIONS, report_to="trackio",
                          project_name="zq-tests", **SHORT)
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 0, done.stderr[-2000:]
    # trackio's own reader of its store, in a process of its own (as another tool would).
    read = subprocess.run(
        [sys.executable, "-c", "import json, sys; from trackio.sqlite_storage import "
         "SQLiteStorage; print(json.dumps(SQLiteStorage.get_logs('zq-tests', sys.argv[1])))",
         run.name], capture_output=True, text=True, check=True, timeout=120,
        stdin=subprocess.DEVNULL)
    logs = json.loads(read.stdout)
    tracked_train = {row["step"]: row["train_loss"] for row in logs if "train_loss" in row}
    tracked_val = {row["step"]: row["val_loss"] for row in logs if "val_loss" in row}
    assert tracked_train == train_losses(store.run_dir(run.id)) and len(tracked_train) == 5
    assert tracked_val == val_losses(store.run_dir(run.id)) and tracked_val
    assert all("learning_rate" in row and "peak_memory_bytes" in row
               for row in logs if "train_loss" in row)


def wandb_history(path: str) -> list[dict]:
    """The history records of a wandb offline run file (wandb 0.31 has no reader of its own):
    after wandb's 7-byte header, records in LevelDB's log format (32 KiB blocks from the file's
    start; each chunk a 4-byte checksum, a 2-byte length, a 1-byte type: 1 whole, 2 first,
    3 middle, 4 last), each a wandb Record protobuf."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    block, records, pending, at = 32768, [], b"", 7
    while at + 7 <= len(data):
        if block - at % block < 7:  # a block's tail too short for a chunk header: padding
            at += block - at % block
            continue
        length, kind = struct.unpack_from("<HB", data, at + 4)
        pending += data[at + 7:at + 7 + length]
        at += 7 + length
        if kind in (1, 4):
            records.append(pending)
            pending = b""
        elif kind == 0:
            break
    history = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
    return history


def test_a_run_reporting_to_wandb_offline_writes_its_losses_in_the_run_folder(
        tiny_model, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    store, run = make_run(tiny_model, COMPLETIONS, report_to="wandb", **SHORT)
    run_dir = store.run_dir(run.id)
    done = run_trainer(run_dir)
    assert done.returncode == 0, done.stderr[-2000:]
    files = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1
    history = wandb_history(files[0])
    tracked = {row["_step"]: row["train_loss"] for row in history if "train_loss" in row}
    assert tracked == train_losses(run_dir) and len(tracked) == 5


def refused(capsys, *args) -> tuple[int, str]:
    status = main([str(arg) for arg in args])
    return status, capsys.readouterr().err


def test_an_unknown_tracker_is_refused_at_runs_new_in_one_sentence(capsys, tiny_model):
    status, err = refused(capsys, "runs", "new", "--model", tiny_model, "--data", COMPLETIONS,
                          "--report-to", "tensorboard")
    assert status == 2 and err.count("\n") == 1
    assert "report_to names 'tensorboard', which is no tracker zyquo-tui knows" in err
    assert not list((RunStore().home / "runs").glob("*/run.json"))


def test_a_tracker_not_installed_is_refused_at_runs_new_with_what_to_install(
        capsys, tiny_model, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "swanlab" else real(name, *a))
    status, err = refused(capsys, "runs", "new", "--model", tiny_model, "--data", COMPLETIONS,
                          "--report-to", "swanlab")
    assert status == 2 and "swanlab, which is not installed here" in err
    assert "pip install swanlab" in err


def test_a_configs_report_to_is_the_runs_and_goes_back_out_in_its_yaml(capsys, tiny_model,
                                                                        tmp_path):
    pytest.importorskip("trackio")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"model": str(tiny_model), "data": str(COMPLETIONS),
                                      "report_to": "trackio", "project_name": "mine",
                                      "num_layers": -1}))
    assert main(["runs", "import-config", str(config), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    run = RunStore().get(made["id"])
    assert (run.hyperparameters.report_to, run.hyperparameters.project_name) == \
        ("trackio", "mine")
    assert "report_to" not in made["unknown_keys"]
    assert main(["runs", "export-config", run.id]) == 0
    exported = yaml.safe_load(capsys.readouterr().out)
    assert (exported["report_to"], exported["project_name"]) == ("trackio", "mine")


def test_a_tracker_that_cannot_start_is_a_warning_and_the_run_trains(tiny_model, tmp_path,
                                                                    monkeypatch):
    pytest.importorskip("trackio")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where trackio wants its folder")
    monkeypatch.setenv("TRACKIO_DIR", str(blocker / "trackio"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    store, run = make_run(tiny_model, COMPLETIONS, report_to="trackio", **SHORT)
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 0, done.stderr[-2000:]
    events = read_events(store.run_dir(run.id) / "events.jsonl")
    warnings = [e for e in events if e["type"] == "warning" and e.get("code") == "tracker"]
    assert len(warnings) == 1 and "trackio" in warnings[0]["message"]
    assert events[-1]["type"] == "completed"


class _FailsAtSecondLog(Tracker):
    name = "failing"

    def __init__(self) -> None:
        self.logged: list[int] = []

    def log(self, metrics, step) -> None:
        if self.logged:
            raise ConnectionError("the tracker's server went away")
        self.logged.append(step)

    def finish(self) -> None:
        pass


def test_a_tracker_failing_mid_run_is_dropped_with_one_warning_and_the_events_go_on(tmp_path):
    from zyquo_tui.core.events.protocol import EventWriter

    writer = EventWriter(tmp_path / "events.jsonl")
    warned: list[tuple[str, str]] = []
    tracker = _FailsAtSecondLog()
    tracked = TrackedEvents(writer, [tracker], lambda code, message: warned.append(
        (code, message)))
    for step in (1, 2, 3):
        tracked.write("train", iteration=step, train_loss=1.0 / step, learning_rate=1e-3,
                      iterations_per_second=1.0, tokens_per_second=10.0, trained_tokens=step,
                      peak_memory_bytes=1)
    tracked.close()
    assert tracker.logged == [1] and len(warned) == 1
    assert "ConnectionError" in warned[0][1] and "training goes on" in warned[0][1]
    assert [e["iteration"] for e in read_events(tmp_path / "events.jsonl")] == [1, 2, 3]
