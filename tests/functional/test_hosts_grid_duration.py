"""Beyond one run: `hosts check` before a distributed run, `runs grid` into the queue, and
`plan`'s duration from this machine's finished runs."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import SAMPLE_DATA, our_processes, zyquo_cli
from helpers import FAST, make_run

from zyquo_tui.cli.main import main as cli_main
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.processes.supervisor import Supervisor
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore

# -- hosts check ----------------------------------------------------------------------------


def test_this_machine_is_ready_without_ssh(tiny_model):
    done = zyquo_cli("hosts", "check", "--hosts", "localhost", "--model", str(tiny_model),
                     "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ready"] is True
    [host] = report["hosts"]
    assert host["local"] is True and host["paths"] == {str(tiny_model): True}
    assert set(host["packages"]) == {"zyquo-tui", "mlx", "mlx-lm"}


def test_an_unreachable_host_is_not_ready_in_one_sentence():
    done = zyquo_cli("hosts", "check", "--hosts", "no-such-host.invalid")
    assert done.returncode == 1
    [line] = done.stdout.strip().splitlines()
    assert line.startswith("no-such-host.invalid  not ready: ")
    assert "SSH" in line or "ssh" in line


def test_a_missing_model_path_is_named(tmp_path):
    done = zyquo_cli("hosts", "check", "--model", str(tmp_path / "gone"))
    assert done.returncode == 1
    assert f"has no {tmp_path / 'gone'}" in done.stdout


# -- runs grid ------------------------------------------------------------------------------


def test_a_two_by_two_grid_queues_four_runs_that_run_one_after_another(tiny_model):
    done = zyquo_cli("runs", "grid", "--model", str(tiny_model), "--data",
                     str(SAMPLE_DATA / "completions"), "--learning-rate", "1e-4,3e-4",
                     "--rank", "4,8", "--iters", "6", "--num-layers", "-1",
                     "--steps-per-eval", "6", "--val-batches", "1", "--save-every", "6",
                     "--queue", "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert len(made["runs"]) == 4 and made["queued"] is True
    assert {(r["values"]["learning_rate"], r["values"]["rank"]) for r in made["runs"]} == \
        {(1e-4, 4), (1e-4, 8), (3e-4, 4), (3e-4, 8)}
    store = RunStore()
    supervisor = Supervisor(store)
    try:
        ended = [asyncio.run(supervisor.wait(r["id"], timeout=600)) for r in made["runs"]]
    finally:
        for process in our_processes(str(store.home)):
            process.kill()
    assert all(run.state is RunState.COMPLETED for run in ended)
    assert {run.group for run in ended} == {made["group"]}
    assert ended[0].name.endswith("learning_rate=0.0001 rank=4")
    assert ended[1].hyperparameters.rank == 8
    # One after another: each started after the one before it ended.
    spans = sorted((run.summary["started_at"], run.summary["ended_at"]) for run in ended)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end


@pytest.mark.parametrize("rates, sentence", [
    ("1e-3,,2e-3", "--learning-rate '1e-3,,2e-3' has an empty value between its ','s"),
    ("1e-3,0.001", "--learning-rate gives 0.001 twice, which would make two identical runs"),
])
def test_an_empty_or_repeated_grid_value_makes_no_run(tiny_model, isolated_home, rates,
                                                      sentence):
    done = zyquo_cli("runs", "grid", "--model", str(tiny_model), "--data",
                     str(SAMPLE_DATA / "completions"), "--learning-rate", rates, "--rank", "4,8")
    assert done.returncode == 2 and sentence in done.stderr, done.stderr
    assert not list((isolated_home / "runs").glob("*/run.json"))


def test_a_bad_value_in_a_grid_makes_no_run(tiny_model, isolated_home):
    done = zyquo_cli("runs", "grid", "--model", str(tiny_model), "--data",
                     str(SAMPLE_DATA / "completions"), "--learning-rate", "1e-4,fast")
    assert done.returncode == 2
    assert "learning_rate must be a number, not 'fast'" in done.stderr
    assert not list((isolated_home / "runs").glob("*/run.json"))


def test_a_grid_over_a_dataset_with_a_broken_row_makes_no_run(tiny_model, isolated_home,
                                                              tmp_path):
    data = tmp_path / "broken"
    data.mkdir()
    rows = (SAMPLE_DATA / "completions" / "train.jsonl").read_text().splitlines()
    rows[4] = "not json"
    (data / "train.jsonl").write_text("\n".join(rows) + "\n")
    done = zyquo_cli("runs", "grid", "--model", str(tiny_model), "--data", str(data),
                     "--learning-rate", "1e-4,3e-4")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{data / 'train.jsonl'}:5: invalid JSON" in done.stderr
    assert not list((isolated_home / "runs").glob("*/run.json"))


# -- duration -------------------------------------------------------------------------------


def plan_json(capsys, *args: str) -> dict:
    """`plan --json` in this process (the tests here read its duration, not its process)."""
    assert cli_main(["plan", *args, "--json", "--no-replica"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_without_a_finished_run_the_duration_is_unknown(tiny_model, capsys):
    planned = plan_json(capsys, "--model", str(tiny_model), "--num-layers", "-1", "--iters", "50")
    assert planned["duration_seconds"] is None
    assert planned["duration_basis"]["source"] is None
    assert "no finished run" in planned["duration_basis"]["sentence"]


def test_after_one_run_the_plan_reckons_the_next_from_that_runs_events(tiny_model, capsys):
    """The basis run's events split its wall time into start-up, training steps, validations
    and the rest: planned again with the same settings, it takes what it took; planned three
    times as long, its steps and the rest take three times as long. (How close a plan comes to
    a run that has not happened yet is timing, on a noisy machine: bench/bench_distributed.py
    prints it.)"""
    data = SAMPLE_DATA / "completions"
    store, first = make_run(tiny_model, data, iters=20)
    supervisor = Supervisor(store)
    supervisor.start(first.id)
    done = asyncio.run(supervisor.wait(first.id, timeout=600))
    assert done.state is RunState.COMPLETED
    took = read_events(store.events_path(first.id))[-1]["time"] - done.process["requested_at"]

    def plan(iters: int) -> dict:
        return plan_json(capsys, "--model", str(tiny_model), "--data", str(data),
                         "--iters", str(iters), "--num-layers", str(FAST["num_layers"]),
                         "--batch-size", str(FAST["batch_size"]),
                         "--steps-per-eval", str(FAST["steps_per_eval"]),
                         "--val-batches", str(FAST["val_batches"]))

    again, longer = plan(20), plan(60)
    basis = again["duration_basis"]
    assert basis["source"] == "history" and basis["run_id"] == first.id
    assert basis["same_model"] is True and basis["iters"] == 20
    assert again["duration_seconds"] == pytest.approx(took, abs=0.5), (basis, took)
    parts = longer["duration_basis"]
    assert parts["iters"] == 60 and parts["startup_seconds"] == basis["startup_seconds"]
    assert parts["tokens_per_step"] == basis["tokens_per_step"]
    for name in ("training_seconds", "other_seconds"):
        assert parts[name] == pytest.approx(3 * basis[name], abs=0.2), name
    assert longer["duration_seconds"] == pytest.approx(
        sum(parts[name] for name in ("startup_seconds", "training_seconds",
                                     "validation_seconds", "other_seconds")), abs=0.5)
    assert basis["tokens_per_step_from"] == "basis" and "give --data" not in basis["sentence"]
    # By epochs, the duration is the iterations they make: 225 rows at this batch, one pass.
    by_epochs = plan_json(capsys, "--model", str(tiny_model), "--data", str(data), "--epochs", "1",
                          "--num-layers", str(FAST["num_layers"]),
                          "--batch-size", str(FAST["batch_size"]),
                          "--steps-per-eval", str(FAST["steps_per_eval"]),
                          "--val-batches", str(FAST["val_batches"]))
    one_pass = 225 // FAST["batch_size"]
    assert by_epochs["iters"] == by_epochs["duration_basis"]["iters"] == one_pass
    assert by_epochs["duration_basis"]["training_seconds"] == pytest.approx(
        one_pass / 20 * basis["training_seconds"], abs=0.2)

    # Without the dataset a step's tokens are a guess from the basis run's rows (scaled by the
    # batch), and the sentence says so: the memory verdict beside it assumes max_seq_length.
    unseen = plan_json(capsys, "--model", str(tiny_model), "--iters", "20",
                       "--batch-size", str(2 * FAST["batch_size"]))["duration_basis"]
    assert unseen["tokens_per_step_from"] == "basis_batch_scaled"
    assert unseen["tokens_per_step"] == pytest.approx(2 * basis["tokens_per_step"], abs=0.2)
    assert f"as long as run {first.id}'s rows; give --data to count these" in unseen["sentence"]

    # A speed measured without the dataset is measured on rows of max_seq_length tokens: the
    # step's tokens are those rows', not another run's (speed and tokens from the same rows).
    measured = plan_json(capsys, "--model", str(tiny_model), "--iters", "20",
                         "--max-seq-length", "64", "--batch-size", str(FAST["batch_size"]),
                         "--measure")["duration_basis"]
    assert measured["source"] == "measured"
    assert measured["tokens_per_step_from"] == "max_seq_length"
    assert measured["tokens_per_step"] == FAST["batch_size"] * 63
    assert measured["training_seconds"] == pytest.approx(
        20 * measured["tokens_per_step"] / measured["tokens_per_second"], abs=0.2)
    assert "(every row max_seq_length long, as measured; give --data" in measured["sentence"]


# -- what mlx.launch is given ---------------------------------------------------------------


def test_this_machine_is_rank_zero_without_ssh_and_others_keep_their_names(tmp_path):
    import pytest

    from zyquo_tui.core.runs.hosts import distribution_of
    from zyquo_tui.core.system.cluster import LaunchError, launch_command, own_names

    mine = next((name for name in own_names() if name.count(".") == 3
                 and not name.startswith("127.")), None)
    if mine is None:
        pytest.skip("this machine has no IPv4 address besides loopback")
    found = distribution_of({"hosts": [mine, "10.255.0.2"]})
    argv = launch_command(found, tmp_path, ["python", "-m", "zyquo_tui.trainer", "RUN"])
    assert argv[argv.index("--") + 1:] == ["python", "-m", "zyquo_tui.trainer", "RUN"]
    written = json.loads((tmp_path / "hostfile.json").read_text())
    assert written["backend"] == "ring"
    assert written["hosts"] == [{"ssh": "127.0.0.1", "ips": [mine]},
                                {"ssh": "10.255.0.2", "ips": ["10.255.0.2"]}]

    with pytest.raises(LaunchError, match="is not this machine"):
        launch_command(distribution_of({"hosts": ["10.255.0.2", mine]}), tmp_path, ["x"])
    with pytest.raises(LaunchError, match="the other hosts cannot reach"):
        launch_command(distribution_of({"hosts": ["localhost", "10.255.0.2"]}), tmp_path,
                       ["x"])


def test_a_hostfile_in_mlx_format_names_the_ranks(tmp_path):
    from zyquo_tui.core.runs.hosts import distribution_of, world_size_of

    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps({"backend": "jaccl", "envs": ["MLX_METAL_FAST_SYNCH=1"],
                                    "hosts": [{"ssh": "a", "ips": ["10.0.0.1"]},
                                              {"ssh": "b", "ips": ["10.0.0.2"]},
                                              {"ssh": "c", "ips": ["10.0.0.3"]}]}))
    found = distribution_of({"hostfile": str(hostfile)})
    assert found.world_size == 3 and found.backend == "jaccl"
    assert found.envs == ["MLX_METAL_FAST_SYNCH=1"]
    assert world_size_of({"hostfile": str(hostfile)}) == 3
    hostfile.write_text("[{\"ips\": []}]")
    done = zyquo_cli("hosts", "check", "--hostfile", str(hostfile))
    assert done.returncode == 2
    assert 'host 1 has no "ssh" name' in done.stderr
