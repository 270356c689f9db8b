"""`zyquo-tui plan`: the JSON contract, exit statuses, bad input, --config, --data and --measure."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from test_memory import GIB
from test_plan_cli import REPO, estimate_of, fake_machine, plan
from test_plan_cli import model  # noqa: F401  (a fixture the tests here take)

from zyquo_tui.core.memory import replica as replica_module

from zyquo_tui.core.memory.history import (
    HISTORY_ABSOLUTE_SLACK,
    HISTORY_FILE,
    MemoryHistory,
)


def test_data_sets_the_width_from_the_longest_tokenized_row(capsys, tiny_model, isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    data = REPO / "sample_data" / "text"
    status, out, _ = plan(capsys, "--model", tiny_model, "--data", data, "--num-layers", "-1",
                          "--json")
    assert status == 0
    longest = out["longest_row_tokens"]
    rows = sum(1 for line in (data / "train.jsonl").read_text().splitlines() if line.strip())
    assert out["rows"] == rows and 0 < longest < 2048
    assert out["batch_width"] == 1 + 32 * -(-longest // 32)  # padded, well under the 2048 cap
    assert not any("row lengths unknown" in note for note in out["notes"])


def test_the_config_line_says_why_the_width_is_not_the_longest_row(capsys, tiny_model,
                                                                  isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    data = REPO / "sample_data" / "completions"
    _, out, _ = plan(capsys, "--model", tiny_model, "--data", data, "--json")
    longest, rows = out["longest_row_tokens"], out["rows"]
    status, text, _ = plan(capsys, "--model", tiny_model, "--data", data)
    assert status == 0
    assert (f"{1 + 32 * -(-longest // 32)} tokens per row (the longest of {rows} rows has "
            f"{longest} tokens, padded as mlx-lm pads a batch)") in text
    status, text, _ = plan(capsys, "--model", tiny_model, "--data", data,
                           "--max-seq-length", longest - 8)
    assert f"{longest - 8} tokens per row (the longest of {rows} rows has {longest} tokens, " \
           "cut to max_seq_length)" in text
    status, text, _ = plan(capsys, "--model", tiny_model, "--data", data,
                           "--max-seq-length", longest)
    assert f"{longest} tokens per row (the longest of {rows} rows has {longest} tokens)" in text


def test_preference_data_is_planned_as_the_preference_run_it_trains(capsys, tiny_model,
                                                                    isolated_home):
    """The objective follows the data unless given: dpo counts two sequences a row; an
    objective the data cannot train is refused with runs new's sentence."""
    fake_machine(isolated_home, 64 * GIB)
    preference = REPO / "sample_data" / "preference"
    # The whole-batch loss, whose term is proportional to the sequences a batch holds.
    common = ("--model", tiny_model, "--num-layers", "-1", "--loss-chunk-tokens", "off",
              "--json")
    status, sft, _ = plan(capsys, *common, "--data", REPO / "sample_data" / "completions")
    assert status == 0 and sft["objective"] == "sft"
    status, dpo, _ = plan(capsys, *common, "--data", preference)
    assert status == 0 and dpo["objective"] == "dpo"
    assert dpo["breakdown"]["loss"] == 2 * dpo["batch_width"] * sft["breakdown"]["loss"] \
        / sft["batch_width"]  # two sequences a row, each as wide as the widest
    status, orpo, _ = plan(capsys, *common, "--data", preference, "--objective", "orpo")
    assert status == 0 and orpo["objective"] == "orpo"
    status, _, err = plan(capsys, *common, "--data", preference, "--objective", "sft")
    assert status == 2 and "choose --objective dpo or orpo" in err
    status, full, _ = plan(capsys, "--model", tiny_model, "--method", "full", "--objective",
                           "dpo", "--json")
    assert status == 0 and full["breakdown"]["reference"] > 0


def test_a_setting_runs_new_would_refuse_is_bad_input_to_plan(capsys, tiny_model,
                                                              isolated_home):
    """A plan of a run that cannot be made is no plan: an unknown reward is refused with
    runs new's sentence and exit 2, even where no replica is measured."""
    fake_machine(isolated_home, 64 * GIB)
    common = ("--model", tiny_model, "--data", REPO / "sample_data" / "rl", "--objective",
              "grpo", "--no-replica")
    status, _, err = plan(capsys, *common, "--reward", "exact_match")
    assert status == 2
    assert err.strip() == ("zyquo-tui: reward_functions: 'exact_match' is no built-in reward "
                           "(exact_answer, format, length); give one of them or "
                           "FILE.py:FUNCTION.")
    status, out, _ = plan(capsys, *common, "--reward", "exact_answer", "--json")
    assert status == 0 and out["objective"] == "grpo"


def test_measure_reports_the_real_peak_beside_the_estimate_and_remembers_it(
        capsys, tiny_model, isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    status, out, _ = plan(capsys, "--model", tiny_model, "--num-layers", "-1", "--batch-size",
                          "2", "--max-seq-length", "128", "--measure", "--json")
    assert status == 0
    assert out["measured_peak_bytes"] > out["breakdown"]["base_weights"]
    assert abs(out["measured_error"]) < 0.5
    history = MemoryHistory.load(isolated_home)
    assert len(history.records) == 1
    record = history.records[0]
    # MLX's peak, and the process's resident peak above its footprint ready to train (less
    # MLX's memory then): the history keeps the larger
    assert record["mlx_peak_bytes"] == out["measured_peak_bytes"]
    assert record["peak_rss_bytes"] == out["measured_peak_rss_bytes"]
    assert record["ready_rss_bytes"] == out["measured_ready_rss_bytes"]
    assert record["measured_peak_bytes"] == max(
        out["measured_peak_bytes"],
        out["measured_peak_rss_bytes"] - out["measured_ready_rss_bytes"])
    assert record["estimate_bytes"] == out["model_estimate_bytes"]
    assert (isolated_home / HISTORY_FILE).is_file()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_child_of_a_large_process_reads_its_own_peak_not_its_parents():
    """ru_maxrss keeps the parent's high-water mark through fork and exec; the peak a trainer
    or a measurement reports must be its own."""
    code = ("from zyquo_tui.core.system.machine import peak_resident_bytes; "
            "print(peak_resident_bytes())")
    held = bytearray(300 * 1024 * 1024)
    held[::4096] = b"\x01" * len(held[::4096])  # touched, so resident
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    del held
    assert int(child.stdout) < 200 * 1024 * 1024


def test_a_measure_of_the_small_sample_model_does_not_scale_later_plans(
        capsys, tiny_model, isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    args = ("--model", tiny_model, "--batch-size", "2", "--max-seq-length", "128", "--json")
    status, measured, _ = plan(capsys, *args, "--measure")
    assert status == 0
    (record,) = MemoryHistory.load(isolated_home).records
    # The tokenizer and the rows are the runtime's, not training's: the resident peak counts
    # from the footprint once they are loaded (65 MiB above the start on this machine)...
    assert record["ready_rss_bytes"] >= record["start_rss_bytes"]
    assert record["measured_peak_bytes"] == max(
        record["mlx_peak_bytes"], record["peak_rss_bytes"] - record["ready_rss_bytes"])
    # ...and what is left of the runtime's own (compiled kernels, the allocator's cache) is a
    # fixed amount that later plans do not take for an error of scale.
    assert abs(record["measured_peak_bytes"] - record["estimate_bytes"]) <= \
        HISTORY_ABSOLUTE_SLACK
    status, later, _ = plan(capsys, *args)
    assert status == 0 and "history_correction" not in later["breakdown"]
    assert later["estimate_bytes"] == later["model_estimate_bytes"]


def test_the_verdict_is_judged_by_a_replicas_measured_peak(capsys, tiny_model, isolated_home,
                                                           monkeypatch):
    """Real training of the replica (a copy of the sample model with its widths divided) in a
    subprocess; the verdict judges the peak it predicts, and the breakdown says so. The sample
    model's configs are small enough to be measured whole (replica.py's WHOLE_BYTES): held at
    0 here, plan takes a replica proper, and the whole measurement of the same config, made
    after, checks its prediction."""
    monkeypatch.setattr(replica_module, "WHOLE_BYTES", 0)
    fake_machine(isolated_home, 64 * GIB)
    args = ("--model", tiny_model, "--num-layers", "-1", "--data",
            REPO / "sample_data" / "completions")
    status, data, _ = plan(capsys, *args, "--json", replica=True)
    assert status == 0, data
    replica = data["replica"]
    assert replica["scale"] >= 2 and replica["replica_peak_bytes"] > 0
    assert data["estimate_bytes"] == replica["peak_bytes"] != data["model_estimate_bytes"]
    assert sum(data["breakdown"].values()) == data["estimate_bytes"]
    assert data["replica_skipped"] is None
    status, text, _ = plan(capsys, *args, replica=True)
    assert "replica correction" in text and "measured on a replica" in text
    status, terms, _ = plan(capsys, *args, "--json")  # --no-replica: the terms alone
    assert terms["replica"] is None and terms["estimate_bytes"] == data["model_estimate_bytes"]
    assert terms["replica_skipped"] == "not measured (--no-replica)"
    monkeypatch.undo()
    status, whole, _ = plan(capsys, *args, "--json", replica=True)
    assert status == 0 and whole["replica"]["scale"] == 1
    # A replica's figure carries REPLICA_ERROR. On a model this small one more 64 KiB buffer
    # in the replica's peak, scaled by k^2, is 3.6% of the whole: the half-scale replica was
    # seen moving by exactly that between runs (+0.25% and -3.3% of the whole; -5.5% once
    # under load), so the bound is the margin plus that spread.
    spread = replica["scale"] ** 2 * 64 * 1024 / whole["estimate_bytes"]
    assert abs(data["estimate_bytes"] / whole["estimate_bytes"] - 1) <= (
        replica_module.REPLICA_ERROR + spread), (data, whole)
    status, text, _ = plan(capsys, *args, replica=True)
    assert "measured whole" in text


def test_without_a_replica_the_terms_judge_and_the_plan_says_why(capsys, model, isolated_home):
    """A model folder of headers alone (no tokenizer, no weights): the replica cannot train,
    which costs the replica, not the plan."""
    fake_machine(isolated_home, 64 * GIB)
    status, data, _ = plan(capsys, "--model", model, "--num-layers", "-1", "--max-seq-length",
                           "512", "--json", replica=True)
    assert status == 0
    assert data["replica"] is None and data["replica_skipped"].startswith("no replica: ")
    assert data["estimate_bytes"] == estimate_of(model, max_seq_length=512)


def test_plan_by_epochs_counts_the_datasets_rows_and_says_the_steps(capsys, tiny_model,
                                                                   isolated_home):
    fake_machine(isolated_home, 64 * GIB)
    data = REPO / "sample_data" / "completions"  # 225 train rows
    status, out, _ = plan(capsys, "--model", tiny_model, "--data", data, "--num-layers", "-1",
                          "--epochs", "2", "--batch-size", "5", "--json")
    assert status == 0 and (out["iters"], out["epochs"]) == (90, 2)
    status, out, _ = plan(capsys, "--model", tiny_model, "--data", data, "--num-layers", "-1",
                          "--iters", "84")
    assert "steps     84 iterations: 1.50 epochs of 56 batches of 4 from 225 rows" in out
    status, out, err = plan(capsys, "--model", tiny_model, "--num-layers", "-1", "--epochs", "2")
    assert status == 2 and err == ("zyquo-tui: --epochs needs --data: an epoch is a pass over "
                                   "train.jsonl, and its rows and the batch size make it into "
                                   "iterations.\n")


def recorded_memory(supervisor, run_id: str, timeout: float = 120) -> dict:
    """run.memory once the runner has recorded the run's end (it may measure the config for
    the record first: core/memory/run_gate.py measure_for_record)."""
    deadline = time.monotonic() + timeout
    while (supervisor.get(run_id).process or {}).get("returncode") is None:
        assert time.monotonic() < deadline, "the runner never recorded the end"
        time.sleep(0.1)
    return supervisor.get(run_id).memory


def train_peak(store, run_id: str) -> int:
    """The MLX peak the run's train events reported."""
    from zyquo_tui.core.events.protocol import read_events

    return max(event["peak_memory_bytes"] for event in read_events(store.events_path(run_id))
               if event["type"] == "train")


def test_a_run_planned_first_records_the_figure_plan_measured(capsys, tiny_model,
                                                              isolated_home):
    """`plan` measured the config whole and kept the measurement (replica_measurements.jsonl):
    the next plan answers from it, and the run of that config, its record made exact when it
    ends, holds the figure plan showed, not the terms', with nothing measured again."""
    from helpers import make_run, stop_runs, wait_until_ended

    from zyquo_tui.core.memory.replica_cache import CACHE_FILE
    from zyquo_tui.core.processes.supervisor import Supervisor
    from zyquo_tui.core.runs.run import RunState
    from zyquo_tui.core.store.store import RunStore

    fake_machine(isolated_home, 64 * GIB)
    data = REPO / "sample_data" / "chat"
    args = ("--model", tiny_model, "--data", data, "--num-layers", "-1", "--batch-size", "4")
    status, planned, _ = plan(capsys, *args, "--json", replica=True)
    assert status == 0 and planned["replica"]["scale"] == 1, planned
    assert planned["estimate_bytes"] != planned["model_estimate_bytes"]
    kept = (isolated_home / CACHE_FILE).read_text().splitlines()
    assert len(kept) == 1
    status, again, _ = plan(capsys, *args, "--iters", "2", "--json", replica=True)
    assert again["estimate_bytes"] == planned["estimate_bytes"]
    assert again["replica"]["measured_at"] and "measured_at" not in planned["replica"]
    assert (isolated_home / CACHE_FILE).read_text().splitlines() == kept

    store, run = make_run(tiny_model, data, store=RunStore(isolated_home), iters=2)
    supervisor = Supervisor(store)
    try:
        supervisor.start(run.id)
        assert wait_until_ended(supervisor, run.id).state is RunState.COMPLETED
        memory = recorded_memory(supervisor, run.id)
    finally:
        stop_runs(store, run.id)
    assert memory["exact_sequence"]
    assert memory["estimate_bytes"] == planned["estimate_bytes"]
    assert memory["model_estimate_bytes"] == planned["model_estimate_bytes"]
    assert memory["replica"]["measured_at"]
    assert (isolated_home / CACHE_FILE).read_text().splitlines() == kept
    # The figure is this run's: within a replica's margin of the peak the run reached.
    peak = train_peak(store, run.id)
    assert abs(memory["estimate_bytes"] / peak - 1) <= replica_module.REPLICA_ERROR


def test_a_run_nobody_planned_records_its_config_measured_whole(tiny_model, isolated_home):
    """A small run started without `plan`: its runner measures the config whole once it has
    completed (the rows' real width known), so its record holds the figure plan would have
    shown, within a replica's margin of the run's own peak, not the terms' over-statement."""
    from helpers import make_run, stop_runs, wait_until_ended

    from zyquo_tui.core.memory.replica_cache import CACHE_FILE
    from zyquo_tui.core.processes.supervisor import Supervisor
    from zyquo_tui.core.runs.run import RunState
    from zyquo_tui.core.store.store import RunStore

    fake_machine(isolated_home, 64 * GIB)
    store, run = make_run(tiny_model, REPO / "sample_data" / "chat", store=RunStore(isolated_home),
                          iters=2, batch_size=4)
    supervisor = Supervisor(store)
    try:
        started = supervisor.start(run.id)
        assert started.memory["replica"] is None  # the start judged by the terms
        assert wait_until_ended(supervisor, run.id).state is RunState.COMPLETED
        memory = recorded_memory(supervisor, run.id)  # the runner measures, then settles
    finally:
        stop_runs(store, run.id)
    assert memory["exact_sequence"] and memory["replica"]["scale"] == 1, memory
    assert len((isolated_home / CACHE_FILE).read_text().splitlines()) == 1
    peak = train_peak(store, run.id)
    assert abs(memory["estimate_bytes"] / peak - 1) <= replica_module.REPLICA_ERROR
    # The terms alone over-state this config by more than that.
    assert memory["model_estimate_bytes"] / peak - 1 > replica_module.REPLICA_ERROR


@pytest.mark.parametrize("how", ["start", "enqueue"])
def test_a_start_or_a_queued_run_takes_the_machine_from_a_runner_measuring_a_record(
        how, tiny_model, isolated_home, monkeypatch, tmp_path):
    """The record's measurement uses idle time only. With the runner of a completed run held
    in that measurement (trainer/step_hold.py), another run's start takes the machine at once,
    and a run queued meanwhile starts: the measurement is stopped, its process gone, and the
    completed run keeps the terms' record, made exact."""
    import psutil
    from helpers import make_run, stop_runs, wait_until_ended

    from zyquo_tui.core.processes.supervisor import Supervisor
    from zyquo_tui.core.runs.run import RunState
    from zyquo_tui.core.store.store import RunStore
    from zyquo_tui.trainer.step_hold import (
        HOLD_MEASURE_ENV,
        MEASURE_HELD_FILE,
        MEASURE_RELEASE_FILE,
    )

    monkeypatch.setenv(HOLD_MEASURE_ENV, str(tmp_path))
    fake_machine(isolated_home, 64 * GIB)
    data = REPO / "sample_data" / "chat"
    store, first = make_run(tiny_model, data, store=RunStore(isolated_home), iters=2,
                            batch_size=4)
    _, second = make_run(tiny_model, data, store=store, iters=2, batch_size=2)
    supervisor = Supervisor(store)
    try:
        supervisor.start(first.id)
        assert wait_until_ended(supervisor, first.id).state is RunState.COMPLETED
        deadline = time.monotonic() + 120
        while not (tmp_path / MEASURE_HELD_FILE).exists():  # the runner measures, held
            assert time.monotonic() < deadline, "the runner never measured the record"
            time.sleep(0.05)
        measuring = int((tmp_path / MEASURE_HELD_FILE).read_text())
        if how == "start":
            started = supervisor.start(second.id)  # refused if the runner kept the machine
            assert started.state in (RunState.STARTING, RunState.RUNNING), started.state
        else:
            assert supervisor.enqueue(second.id).state is RunState.QUEUED
            assert wait_until_ended(supervisor, second.id).state is RunState.COMPLETED
        assert not psutil.pid_exists(measuring), "the measurement was not stopped"
        memory = supervisor.get(first.id).memory
        assert memory["exact_sequence"] and memory["replica"] is None, memory
    finally:
        (tmp_path / MEASURE_RELEASE_FILE).touch()  # the second run's own measurement goes on
        stop_runs(store, first.id, second.id)


def test_a_resumed_run_nobody_planned_ends_with_its_config_measured(tiny_model, isolated_home,
                                                                     monkeypatch):
    """Cancelled, the run's record is made exact by the terms (a cancelled run is not
    measured); resumed to its end, its runner measures the config and the exact record takes
    that figure."""
    from conftest import hold_trainers_at, release, wait_until_held
    from helpers import make_run, stop_runs, wait_until_ended

    from zyquo_tui.core.processes.supervisor import Supervisor
    from zyquo_tui.core.runs.run import RunState
    from zyquo_tui.core.store.store import RunStore

    hold_trainers_at(monkeypatch, 2)
    fake_machine(isolated_home, 64 * GIB)
    store, run = make_run(tiny_model, REPO / "sample_data" / "chat",
                          store=RunStore(isolated_home), iters=4, batch_size=4)
    supervisor = Supervisor(store)
    try:
        supervisor.start(run.id)
        wait_until_held(store.run_dir(run.id))
        supervisor.cancel(run.id)
        assert wait_until_ended(supervisor, run.id).state is RunState.CANCELLED
        memory = recorded_memory(supervisor, run.id)
        assert memory["exact_sequence"] and memory["replica"] is None, memory
        release(store.run_dir(run.id))
        supervisor.resume(run.id)
        assert wait_until_ended(supervisor, run.id).state is RunState.COMPLETED
        memory = recorded_memory(supervisor, run.id)
    finally:
        stop_runs(store, run.id)
    assert memory["exact_sequence"] and memory["replica"]["scale"] == 1, memory
