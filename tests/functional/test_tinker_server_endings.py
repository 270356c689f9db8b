"""How a served run ends when its program does not end it: cancelled with `zyquo-tui runs cancel`
while the program sits idle (never later completed), and interrupted when the server is told
to stop (SIGTERM). Real signals, the real CLI, a real server."""

from __future__ import annotations

import json
import os
import signal

import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402
from test_tinker_server import serving  # noqa: E402
from test_tinker_server_ledger import wait_for_state  # noqa: E402
from test_tinker_server_lifetimes import DATUM  # noqa: E402

from conftest import zyquo_cli  # noqa: E402


@pytest.fixture
def served(isolated_home, sample_models, monkeypatch):
    """A server on the test's own store (the one the CLI uses), pointed at by the SDK."""
    with serving(isolated_home, sample_models, monkeypatch) as server:
        yield server


def stepped(program, seed: int):
    """A training client that took one step; its run's id."""
    training = program.create_lora_training_client(base_model="zyquo-tiny", rank=4,
                                                   seed=seed).result()
    forward_backward = training.forward_backward([DATUM], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    forward_backward.result()
    run_id = training.save_state("one").result().path.split("/")[2]
    return training, run_id


def terminal_events(home, run_id: str) -> list[str]:
    from zyquo_tui.core.events.protocol import read_events

    return [e["type"] for e in read_events(home / "runs" / run_id / "events.jsonl")
            if e["type"] in ("completed", "failed", "cancelled")]


def test_a_run_cancelled_while_its_program_sits_idle_ends_cancelled_never_completed(
        served, isolated_home):
    program = tinker.ServiceClient()
    training, run_id = stepped(program, seed=5)
    done = zyquo_cli("runs", "cancel", run_id)
    assert done.returncode == 0, done.stderr
    # The program sends nothing more; the server ends the run all the same.
    assert wait_for_state(run_id, {"cancelled", "completed", "interrupted"}, 60) == "cancelled"
    assert terminal_events(isolated_home, run_id) == ["cancelled"]
    with pytest.raises(tinker.RequestFailedError, match="was cancelled") as refused:
        training.forward_backward([DATUM], "cross_entropy").result()
    assert "\n" not in str(refused.value).split(" for self.request_id")[0]
    assert json.loads(zyquo_cli("runs", "show", run_id, "--json").stdout)["state"] == \
        "cancelled"
    program.close("success").result(timeout=60)  # finishing the session completes nothing
    assert state_of_run(isolated_home, run_id) == "cancelled"
    assert terminal_events(isolated_home, run_id) == ["cancelled"]


def state_of_run(home, run_id: str) -> str:
    from zyquo_tui.core.store.store import RunStore

    return RunStore(home).get(run_id).state.value


def test_sigterm_marks_the_served_runs_interrupted_and_the_server_exits_cleanly(
        served, isolated_home):
    from zyquo_tui.core.processes.machine_hold import HOLDER_FILE
    from zyquo_tui.core.processes.supervisor import Supervisor
    from zyquo_tui.core.store.store import RunStore

    first, second = tinker.ServiceClient(), tinker.ServiceClient()
    _, training_run = stepped(first, seed=7)
    _, cancelled_run = stepped(second, seed=8)
    assert zyquo_cli("runs", "cancel", cancelled_run).returncode == 0
    assert (isolated_home / HOLDER_FILE).is_file()  # the server holds the machine
    os.kill(served.process.pid, signal.SIGTERM)
    # It finishes its shutdown, then ends by the signal it was sent (uvicorn raises it
    # again): 143 as a shell reports it.
    assert served.process.wait(timeout=60) == -signal.SIGTERM
    assert "Traceback" not in served.process.stdout.read()
    record = RunStore(isolated_home).get(training_run)
    assert record.state.value == "interrupted"
    assert "lost_at" not in (record.process or {})  # the server said so, not a later reader
    assert state_of_run(isolated_home, cancelled_run) == "cancelled"  # a cancel still wins
    assert terminal_events(isolated_home, training_run) == []
    assert not (isolated_home / HOLDER_FILE).exists()
    assert not Supervisor(RunStore(isolated_home)).machine_busy()
    listed = {r["id"]: r["state"] for r in json.loads(zyquo_cli("runs", "list",
                                                                 "--json").stdout)}
    assert listed[training_run] == "interrupted"


def test_a_program_s_close_status_is_its_run_s_end(served, isolated_home):
    """`ServiceClient.close(status, detail)`: success ends the runs completed, errored failed
    (cause `program`, its detail in the message, as `runs show` says), interrupted
    interrupted."""
    from zyquo_tui.core.events.protocol import read_events

    ends = {}
    for seed, (status, detail) in enumerate([("success", None),
                                             ("errored", "the reward server went away"),
                                             ("interrupted", "ctrl-c")]):
        program = tinker.ServiceClient()
        _, run_id = stepped(program, seed=seed + 11)
        program.close(status, detail).result(timeout=60)
        ends[status] = run_id
    assert wait_for_state(ends["success"], {"completed", "failed", "interrupted"}) == "completed"
    assert wait_for_state(ends["interrupted"], {"completed", "failed",
                                                "interrupted"}) == "interrupted"
    assert wait_for_state(ends["errored"], {"completed", "failed", "interrupted"}) == "failed"
    shown = json.loads(zyquo_cli("runs", "show", ends["errored"], "--json").stdout)
    assert shown["failure"]["cause"] == "program"
    assert shown["failure"]["message"] == ("The program closed its session as errored: the "
                                           "reward server went away.")
    [failed] = [e for e in read_events(isolated_home / "runs" / ends["errored"] / "events.jsonl")
                if e["type"] == "failed"]
    assert failed["cause"] == "program" and failed["suggestion"]
    assert terminal_events(isolated_home, ends["interrupted"]) == []
