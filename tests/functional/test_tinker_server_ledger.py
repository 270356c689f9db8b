"""One ledger of memory for the machine (server/ledger.py): while `zyquo-tui serve` has a model
loaded it holds the machine's active-run place, so a queued run waits for it (and says so); a
training client asked for while a run trains is refused with one sentence; and a new model is
judged together with those loaded. A real server, the real CLI, real runs of the sample model."""

from __future__ import annotations

import json
import time

import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402
from test_tinker_server import serving  # noqa: E402
from test_tinker_server_lifetimes import DATUM  # noqa: E402

from conftest import (  # noqa: E402
    SAMPLE_DATA,
    hold_trainers_at,
    release,
    wait_until_held,
    zyquo_cli,
)


@pytest.fixture
def served(isolated_home, sample_models, monkeypatch):
    """A server on the test's own store (the one the CLI uses), pointed at by the SDK."""
    with serving(isolated_home, sample_models, monkeypatch) as server:
        yield server


def new_run(home, iters: int = 6) -> str:
    done = zyquo_cli("runs", "new", "--model", str(home / "models" / "zyquo-tiny"), "--data",
                     str(SAMPLE_DATA / "completions"), "--iters", str(iters),
                     "--steps-per-report", "2", "--steps-per-eval", "100", "--save-every",
                     "100", "--val-batches", "1")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def state_of(run_id: str) -> str:
    return json.loads(zyquo_cli("runs", "show", run_id, "--json").stdout)["state"]


def wait_for_state(run_id: str, states: set[str], timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while (state := state_of(run_id)) not in states:
        assert time.monotonic() < deadline, f"run {run_id} stayed {state}"
        time.sleep(0.5)
    return state


def wait_until_the_machine_is_free(home, timeout: float = 60) -> None:
    """A runner whose queue is empty lets the machine go a moment after its last run ends."""
    from zyquo_tui.core.processes.supervisor import Supervisor
    from zyquo_tui.core.store.store import RunStore

    supervisor = Supervisor(RunStore(home))
    deadline = time.monotonic() + timeout
    while supervisor.machine_busy():
        assert time.monotonic() < deadline, "the machine was never let go"
        time.sleep(0.2)


def trained_once(service_client, seed: int = 3):
    training = service_client.create_lora_training_client(base_model="zyquo-tiny", rank=4,
                                                          seed=seed).result()
    training.forward_backward([DATUM], "cross_entropy").result()
    return training


def test_a_queued_run_waits_for_the_server_while_it_has_a_model_loaded(served,
                                                                      isolated_home):
    program = tinker.ServiceClient()
    trained_once(program)
    run_id = new_run(isolated_home)
    queued = zyquo_cli("runs", "queue", run_id)
    assert queued.returncode == 0, queued.stderr
    assert state_of(run_id) == "queued"
    waits = f"zyquo-tui serve (pid {served.process.pid})"
    listed = {r["id"]: r for r in json.loads(zyquo_cli("runs", "list", "--json").stdout)}
    assert listed[run_id]["waiting_for"] == waits and listed[run_id]["queue_position"] == 1
    assert (f"Queued runs wait for {waits}, which holds the machine while it has models "
            "loaded") in zyquo_cli("runs", "list").stdout
    other = new_run(isolated_home)
    refused = zyquo_cli("runs", "start", other)
    assert refused.returncode != 0
    assert f"{waits}, with models loaded, is active on this machine" in refused.stderr

    program.close("success").result(timeout=60)  # its model is freed: the queue goes on
    assert wait_for_state(run_id, {"completed", "failed", "interrupted"}) == "completed"
    listed = {r["id"]: r for r in json.loads(zyquo_cli("runs", "list", "--json").stdout)}
    assert listed[run_id]["waiting_for"] is None
    wait_until_the_machine_is_free(isolated_home)
    again = tinker.ServiceClient()
    try:
        assert trained_once(again).get_info().lora_rank == 4  # and the server takes it back
    finally:
        again.close("success").result(timeout=60)


def test_a_training_client_asked_for_while_a_run_trains_is_refused_in_one_sentence(
        served, isolated_home, monkeypatch):
    hold_trainers_at(monkeypatch, 2)  # the run holds after step 2 until released
    run_id = new_run(isolated_home)
    started = zyquo_cli("runs", "start", run_id)
    assert started.returncode == 0, started.stderr
    wait_until_held(isolated_home / "runs" / run_id)
    program = tinker.ServiceClient()
    try:
        with pytest.raises(tinker.RequestFailedError) as refused:
            program.create_lora_training_client(base_model="zyquo-tiny", rank=4).result()
        sentence = str(refused.value).split(" for self.request_id")[0]
        assert f"This server cannot load a model now: Run {run_id} (" in sentence
        assert ("is training on this machine, whose memory runs and served models share: try "
                "again when it ends (`zyquo-tui runs list`), or cancel it.") in sentence
        assert "\n" not in sentence
        # A sampler of the base model loads a model too: refused alike.
        base = program.create_sampling_client(base_model="zyquo-tiny").result()
        with pytest.raises(tinker.RequestFailedError, match=f"Run {run_id} .*is training"):
            base.sample(types.ModelInput.from_ints([5, 6]), 1,
                        types.SamplingParams(max_tokens=2)).result()

        release(isolated_home / "runs" / run_id)
        assert wait_for_state(run_id, {"completed", "failed", "interrupted"}) == "completed"
        wait_until_the_machine_is_free(isolated_home)
        assert trained_once(program).get_info().lora_rank == 4
    finally:
        program.close("success").result(timeout=60)


def test_a_new_model_is_judged_together_with_the_models_loaded(served, isolated_home):
    from zyquo_tui.core.store.store import RunStore

    first_program, second_program = tinker.ServiceClient(), tinker.ServiceClient()
    try:
        first = trained_once(first_program)
        run_id = next(run.id for run in RunStore(isolated_home).iter_runs()
                      if first.model_id.split(":")[0] in run.name)
        need = RunStore(isolated_home).get(run_id).memory["estimate_bytes"]
        assert need > 0
        # Room for one such model, not two (the limit a run of this machine is held to).
        (isolated_home / "config.toml").write_text(f"[memory]\nlimit = {need * 3 // 2}\n")
        with pytest.raises(tinker.RequestFailedError) as refused:
            second_program.create_lora_training_client(base_model="zyquo-tiny",
                                                       rank=4).result()
        sentence = str(refused.value).split(" for self.request_id")[0]
        assert sentence.startswith("Request failed: This run won't fit in memory: it needs "
                                   "about ")
        assert "(config.toml [memory] limit, less " in sentence
        assert "for the 1 model already loaded on this server)" in sentence
        assert "--override-memory" not in sentence and "\n" not in sentence

        first_program.close("success").result(timeout=60)  # its model goes: room again
        assert trained_once(second_program).get_info().lora_rank == 4
    finally:
        first_program.close("success").result(timeout=60)
        second_program.close("success").result(timeout=60)


def test_a_forward_backward_too_large_for_the_memory_left_is_refused_and_smaller_ones_train(
        served, isolated_home):
    """A training client's verdict judges one row of trained_model.SERVED_ROW_TOKENS (its
    batches are not known when it is made); each forward_backward is judged by its own rows
    before it is queued, so a batch the machine cannot hold is a 400 sentence, not a server
    that runs out of memory with every program on it."""
    from zyquo_tui.core.store.store import RunStore
    from zyquo_tui.server.trained_model import SERVED_ROW_TOKENS

    program = tinker.ServiceClient()
    try:
        client = trained_once(program)
        run = next(run for run in RunStore(isolated_home).iter_runs()
                   if client.model_id.split(":")[0] in run.name)
        assert run.memory["settings"]["batch_size"] == 1
        assert run.memory["settings"]["max_seq_length"] == SERVED_ROW_TOKENS
        # Room for what the verdict judged and a little more: not for 64 rows of 1,024 tokens.
        need = run.memory["estimate_bytes"]
        (isolated_home / "config.toml").write_text(f"[memory]\nlimit = {need * 2}\n")
        tokens = list(range(1, 1025))
        wide = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                           loss_fn_inputs={"target_tokens": tokens[1:]})
        with pytest.raises(tinker.BadRequestError) as refused:
            client.forward_backward([wide] * 64, "cross_entropy").result()
        sentence = str(refused.value)
        assert "This forward_backward of 64 rows of up to 1024 tokens needs about" in sentence
        assert "(config.toml [memory] limit)" in sentence and "send fewer or shorter" in sentence
        # The same model goes on with a call it can hold.
        done = client.forward_backward([DATUM], "cross_entropy").result()
        assert done.metrics["loss:sum"] > 0
    finally:
        program.close("success").result(timeout=60)
