"""After a power cut: `runs recover` resumes the runs that died with the machine, once."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal

import psutil
import pytest
from conftest import (
    SAMPLE_DATA,
    hold_trainers_at,
    release,
    wait_for_event,
    wait_until_held,
    zyquo_cli,
)
from helpers import losses_by_iteration, make_run

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.processes.supervisor import Supervisor
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore

COMPLETIONS = SAMPLE_DATA / "completions"
SETTINGS = dict(iters=30, steps_per_report=1, save_every=4, steps_per_eval=10)


def wait_state(supervisor: Supervisor, run_id: str, timeout: float = 180):
    return asyncio.run(supervisor.wait(run_id, timeout=timeout))


def power_cut(supervisor: Supervisor, run_id: str) -> None:
    """SIGKILL the runner, then the trainer (its whole group), and wait until both are gone:
    what a power cut leaves behind (run.json still says running)."""
    process = supervisor.store.get(run_id).process
    victims = [psutil.Process(process["runner_pid"]), psutil.Process(process["pid"])]
    os.kill(process["runner_pid"], signal.SIGKILL)
    os.killpg(process["pid"], signal.SIGKILL)
    psutil.wait_procs(victims, timeout=30)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in victims)


def recover() -> dict:
    done = zyquo_cli("runs", "recover", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_run_killed_with_its_runner_is_resumed_by_recover_exactly_and_only_once(tiny_model,
                                                                                  monkeypatch):
    store, reference = make_run(tiny_model, COMPLETIONS, **SETTINGS)
    supervisor = Supervisor(store)
    supervisor.start(reference.id)
    assert wait_state(supervisor, reference.id).state is RunState.COMPLETED

    _, run = make_run(tiny_model, COMPLETIONS, store=store, **SETTINGS)
    _, queued = make_run(tiny_model, COMPLETIONS, store=store, iters=4, save_every=4)
    # Step 8's checkpoint is saved and step 9 trained when the power goes; the resumed
    # session, which trains step 9 again, holds there too, so the second recover finds it
    # active.
    hold_trainers_at(monkeypatch, 9)
    supervisor.start(run.id)
    supervisor.enqueue(queued.id)
    try:
        wait_until_held(store.run_dir(run.id))
        power_cut(supervisor, run.id)
        assert store.get(run.id).state is RunState.RUNNING  # nobody has looked yet

        first = recover()
        second = recover()  # while the resumed run is active: starts nothing
        release(store.run_dir(run.id))

        assert first["interrupted"] == [run.id]
        assert [r["id"] for r in first["resumed"]] == [run.id]
        assert first["resumed"][0]["step"] == 8
        assert second["interrupted"] == [] and second["resumed"] == []
        assert second["queue_started"] is False
        assert wait_state(supervisor, run.id).state is RunState.COMPLETED
        # Then the queue went on: the run waiting behind it trained too.
        assert wait_state(supervisor, queued.id).state is RunState.COMPLETED
    finally:
        for run_id in (run.id, queued.id):
            if supervisor.get(run_id).state.is_active:
                supervisor.cancel(run_id)
                wait_state(supervisor, run_id)

    want = losses_by_iteration(read_events(store.events_path(reference.id)), "train",
                               "train_loss")
    have = losses_by_iteration(read_events(store.events_path(run.id)), "train", "train_loss")
    assert sorted(have) == sorted(want)
    for step in want:
        assert have[step] == pytest.approx(want[step], abs=1e-5), step
    third = recover()
    assert third == {"interrupted": [], "resumed": [], "not_resumed": [],
                     "queue_started": False, "queue": []}
    assert [e["type"] for e in read_events(store.events_path(run.id))].count("started") == 2


def test_with_auto_resume_off_recover_marks_the_run_and_leaves_it(tiny_model, isolated_home):
    (isolated_home / "config.toml").write_text("[runs]\nauto_resume = false\n")
    store, run = make_run(tiny_model, COMPLETIONS, iters=100000, steps_per_report=1,
                          save_every=2, steps_per_eval=100000)
    supervisor = Supervisor(RunStore(isolated_home))
    supervisor.start(run.id)
    try:
        wait_for_event(store.run_dir(run.id), lambda e: e["type"] == "checkpoint")
    finally:
        power_cut(supervisor, run.id)

    done = zyquo_cli("runs", "recover")

    assert done.returncode == 0, done.stderr
    assert f"{run.id} interrupted" in done.stdout
    assert f"{run.id} not resumed: auto_resume is off" in done.stdout
    record = store.get(run.id)
    assert record.state is RunState.INTERRUPTED and record.process["recovered_at"]
    again = zyquo_cli("runs", "recover")
    assert again.returncode == 0 and again.stdout.strip() == "Nothing to recover."


def test_a_bad_auto_resume_setting_is_one_sentence(isolated_home):
    (isolated_home / "config.toml").write_text("[runs]\nauto_resume = 'yes'\n")
    done = zyquo_cli("runs", "recover")
    assert done.returncode == 2
    assert "[runs] auto_resume must be true or false, not 'yes'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_served_run_cut_off_with_its_server_is_marked_and_never_resumed(sample_models,
                                                                          isolated_home,
                                                                          monkeypatch):
    """A run `zyquo-tui serve` trained for a Tinker program has no data of its own to train
    on again: after a power cut, recover marks it interrupted and leaves it (the program
    resumes it from its saved state), and `runs resume` says so."""
    tinker = pytest.importorskip("tinker")
    from test_tinker_server import ADAM, TEXTS, new_training_client, sft_datum, start_server

    (isolated_home / "models").mkdir()
    shutil.copytree(sample_models["zyquo-tiny"], isolated_home / "models" / "zyquo-tiny")
    server = start_server(isolated_home)
    try:
        monkeypatch.setenv("TINKER_BASE_URL", server.url)
        monkeypatch.setenv("TINKER_API_KEY", server.key)
        monkeypatch.setenv("TINKER_TELEMETRY", "0")
        training = new_training_client(tinker.ServiceClient())
        data = [sft_datum(training.get_tokenizer(), text) for text in TEXTS]
        training.forward_backward(data, "cross_entropy").result()
        training.optim_step(ADAM).result()
        training.save_state("one").result()
    finally:  # the power cut: the server goes without a word
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
    (run,) = RunStore(isolated_home).list()
    assert run.state is RunState.RUNNING  # as the server left it

    report = recover()

    assert report["interrupted"] == [run.id] and report["resumed"] == []
    (left,) = report["not_resumed"]
    assert left["id"] == run.id and "zyquo-tui serve" in left["reason"]
    assert RunStore(isolated_home).get(run.id).state is RunState.INTERRUPTED
    refused = zyquo_cli("runs", "resume", run.id)
    assert refused.returncode != 0 and "zyquo-tui serve" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert RunStore(isolated_home).get(run.id).state is RunState.INTERRUPTED
