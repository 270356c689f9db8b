"""Runs that outlive whoever started them: the runner, the queue, cancel, resume, re-attach."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

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
from helpers import losses_by_iteration, make_run, stop_runs
from test_plan_cli import fake_machine

from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.memory.duration import estimate_duration
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.processes.supervisor import Supervisor
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system.liveness import identity, is_alive
from zyquo_tui.dashboard.run_service import RunService

COMPLETIONS = SAMPLE_DATA / "completions"
ENDLESS = dict(iters=100000, steps_per_report=1, save_every=5, steps_per_eval=100000)


def wait_state(supervisor: Supervisor, run_id: str, timeout: float = 120):
    return asyncio.run(supervisor.wait(run_id, timeout=timeout))


def wait_until_dead(pid: int, start_time: float, timeout: float = 30) -> None:
    """Wait until the process (pid plus start time) is gone."""
    deadline = time.monotonic() + timeout
    while is_alive(pid, start_time):
        assert time.monotonic() < deadline, f"process {pid} still alive after {timeout} s"
        time.sleep(0.05)


def test_start_and_follow_to_completion(tiny_model):
    store, run = make_run(tiny_model, COMPLETIONS, iters=20)
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    try:
        async def collect():
            return [e async for e in supervisor.follow(run.id)]
        followed = asyncio.run(asyncio.wait_for(collect(), 120))

        assert followed[0]["type"] == "started" and followed[-1]["type"] == "completed"
        assert followed == read_events(store.events_path(run.id))
        assert supervisor.get(run.id).state is RunState.COMPLETED
        deadline = time.monotonic() + 30  # the runner records the exit status just after
        while "returncode" not in (supervisor.get(run.id).process or {}):
            assert time.monotonic() < deadline, "the runner never recorded the trainer's exit"
            time.sleep(0.1)
        assert supervisor.get(run.id).process["returncode"] == 0
    finally:
        stop_runs(store, run.id)


def test_sigkill_gives_interrupted_and_resume_completes_exactly(tiny_model, monkeypatch):
    settings = dict(iters=30, steps_per_report=1, save_every=4, steps_per_eval=10)
    store, reference = make_run(tiny_model, COMPLETIONS, **settings)
    _, run = make_run(tiny_model, COMPLETIONS, store=store, **settings)
    supervisor = Supervisor(store)
    try:
        supervisor.start(reference.id)
        assert wait_state(supervisor, reference.id).state is RunState.COMPLETED

        hold_trainers_at(monkeypatch, 9)  # step 8's checkpoint is saved, step 9 trained
        supervisor.start(run.id)
        wait_until_held(store.run_dir(run.id))
        os.kill(supervisor.get(run.id).process["pid"], signal.SIGKILL)
        interrupted = wait_state(supervisor, run.id)
        assert interrupted.state is RunState.INTERRUPTED
        assert interrupted.failure["cause"] == "killed"

        release(store.run_dir(run.id))  # the resumed session trains step 9 again: no hold
        resumed = supervisor.resume(run.id)
        assert resumed.state is RunState.STARTING and resumed.resume_from_step == 8
        assert wait_state(supervisor, run.id).state is RunState.COMPLETED
    finally:
        stop_runs(store, reference.id, run.id)
    want = losses_by_iteration(read_events(store.events_path(reference.id)), "train", "train_loss")
    have = losses_by_iteration(read_events(store.events_path(run.id)), "train", "train_loss")
    assert sorted(have) == sorted(want)
    for step in want:
        assert have[step] == pytest.approx(want[step], abs=1e-5), step

    # plan's duration takes the resumed run's start-up from its last session, as it does a
    # run of one session's (it used to count none after a resume).
    resumed_run = store.get(run.id)
    last_start = [e for e in read_events(store.events_path(run.id)) if e["type"] == "started"][-1]
    planned = estimate_duration(store, resumed_run.model, ModelFacts.from_folder(tiny_model),
                                resumed_run.method, resumed_run.hyperparameters,
                                resumed_run.data, None)
    assert planned.basis["run_id"] == run.id
    startup = last_start["time"] - resumed_run.process["requested_at"]
    assert startup > 0
    assert planned.basis["startup_seconds"] == pytest.approx(startup, abs=0.1)

    # Elapsed adds up the sessions (the killed one to its last event), not the pause before the
    # resume: the same from the events (run screen, runs show) and from run.json (runs list).
    events = read_events(store.events_path(run.id))
    starts = [i for i, e in enumerate(events) if e["type"] == "started"]
    sessions = [events[j - 1]["time"] - events[i]["time"]
                for i, j in zip(starts, [*starts[1:], len(events)])]
    metrics = RunMetrics()
    metrics.ingest(events)
    assert len(sessions) == 2
    assert metrics.elapsed_seconds() == pytest.approx(sum(sessions), abs=1e-6)
    assert RunService(None, store).elapsed(resumed_run) == pytest.approx(sum(sessions), abs=0.5)


def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_start(tiny_model,
                                                                          monkeypatch):
    """Nothing saved, nothing to continue: resume trains it again from step 0 (as an
    uninterrupted run would), and the killed session's reports no longer stand."""
    store, run = make_run(tiny_model, COMPLETIONS, iters=12, steps_per_report=1,
                          save_every=1000, steps_per_eval=1000)
    monkeypatch.setenv("ZYQUO_HOME", str(store.home))
    hold_trainers_at(monkeypatch, 2)
    supervisor = Supervisor(store)
    try:
        supervisor.start(run.id)
        wait_until_held(store.run_dir(run.id))
        os.kill(supervisor.get(run.id).process["pid"], signal.SIGKILL)
        assert wait_state(supervisor, run.id).state is RunState.INTERRUPTED
        assert not list(store.adapters_dir(run.id).glob("*_adapters.safetensors"))
        release(store.run_dir(run.id))  # the resumed session trains step 2 again: no hold

        done = zyquo_cli("runs", "resume", run.id, "--wait")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "(from the start, having saved no checkpoint)" in done.stdout
    finally:
        stop_runs(store, run.id)
    events = read_events(store.events_path(run.id))
    starts = [i for i, e in enumerate(events) if e["type"] == "started"]
    assert len(starts) == 2 and events[starts[1]]["resumed_from_step"] is None
    assert [e["iteration"] for e in events[starts[1]:] if e["type"] == "train"] == \
        list(range(1, 13))
    shown = zyquo_cli("runs", "show", run.id, "--json")
    progress = __import__("json").loads(shown.stdout)["progress"]
    assert progress["step"] == 12 and shown.returncode == 0


FOLLOWER = textwrap.dedent("""
    import asyncio, json, sys
    from zyquo_tui.core.processes.supervisor import Supervisor
    async def main():
        with open(sys.argv[2], "a") as out:
            async for event in Supervisor().follow(sys.argv[1]):
                out.write(json.dumps(event) + "\\n"); out.flush()
    asyncio.run(main())
""")


def test_training_outlives_its_supervisors_and_a_new_one_sees_every_event_once(tiny_model,
                                                                               tmp_path,
                                                                               monkeypatch):
    store, run = make_run(tiny_model, COMPLETIONS, iters=60, steps_per_report=1,
                          steps_per_eval=10, save_every=10)
    hold_trainers_at(monkeypatch, 5)  # still training when its watchers are killed
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    first_log = tmp_path / "first.jsonl"
    follower = subprocess.Popen([sys.executable, "-c", FOLLOWER, run.id, str(first_log)],
                                stdin=subprocess.DEVNULL)
    try:
        wait_until_held(store.run_dir(run.id))
        deadline = time.monotonic() + 60
        while not (first_log.exists() and first_log.read_text().strip()):
            assert follower.poll() is None, "the follower (a dashboard) died before an event"
            assert time.monotonic() < deadline, "the follower saw no event"
            time.sleep(0.1)
        # Kill everything that watches the trainer: the follower (a dashboard) and the runner.
        follower.kill()
        follower.wait()
        process = supervisor.get(run.id).process
        os.kill(process["runner_pid"], signal.SIGKILL)
        wait_until_dead(process["runner_pid"], process["runner_start_time"])
        assert is_alive(process["pid"], process["start_time"]), "the trainer must keep going"
        assert supervisor.get(run.id).state is RunState.RUNNING
        release(store.run_dir(run.id))

        async def collect():
            return [e async for e in Supervisor(RunStore(store.home)).follow(run.id)]
        seen = asyncio.run(asyncio.wait_for(collect(), 120))
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
        stop_runs(store, run.id)

    assert seen == read_events(store.events_path(run.id))
    keys = [(e["type"], e.get("iteration"), e["time"]) for e in seen]
    assert len(keys) == len(set(keys)), "every event exactly once"
    assert [e["iteration"] for e in seen if e["type"] == "train"] == list(range(1, 61))
    assert supervisor.get(run.id).state is RunState.COMPLETED


def test_cancel_leaves_a_checkpoint_and_the_cancelled_state(tiny_model):
    # No train report before the cancel: the summary's step must come from the step reached.
    store, run = make_run(tiny_model, COMPLETIONS, **{**ENDLESS, "steps_per_report": 1000})
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    try:
        wait_for_event(store.run_dir(run.id),
                       lambda e: e["type"] == "checkpoint" and e["iteration"] >= 5)
        done = zyquo_cli("runs", "cancel", run.id, "--wait")
    finally:
        stop_runs(store, run.id)

    assert done.returncode == 0, done.stderr
    final = supervisor.get(run.id)
    assert final.state is RunState.CANCELLED
    cancelled = read_events(store.events_path(run.id))[-1]
    assert cancelled["type"] == "cancelled" and cancelled["checkpoint"] >= 5
    # What the dashboard's notification and `runs list` say: the step it stopped at.
    assert final.summary["step"] == cancelled["iteration"] == cancelled["checkpoint"]
    assert (store.adapters_dir(run.id) / f"{cancelled['checkpoint']:07d}_adapters.safetensors"
            ).is_file()


def test_three_queued_runs_complete_in_order_with_no_dashboard(tiny_model):
    store = RunStore().ensure()
    ids = [make_run(tiny_model, COMPLETIONS, store=store, iters=8, save_every=8)[1].id
           for _ in range(3)]
    supervisor = Supervisor(store)
    try:
        for run_id in ids:  # each CLI process exits at once: nothing of ours stays to watch
            done = zyquo_cli("runs", "queue", run_id)
            assert done.returncode == 0, done.stderr
        finals = [wait_state(supervisor, run_id, timeout=180) for run_id in ids]
    finally:
        stop_runs(store, *ids)
    assert [r.state for r in finals] == [RunState.COMPLETED] * 3
    starts = [read_events(store.events_path(i))[0]["time"] for i in ids]
    ends = [read_events(store.events_path(i))[-1]["time"] for i in ids]
    assert starts == sorted(starts)
    assert ends[0] <= starts[1] and ends[1] <= starts[2], "one run at a time"
    assert supervisor.queue.ids() == []


def test_the_queue_can_be_reordered_and_runs_removed(tiny_model):
    store, active = make_run(tiny_model, COMPLETIONS, **ENDLESS)
    supervisor = Supervisor(store)
    supervisor.start(active.id)
    waiting = [make_run(tiny_model, COMPLETIONS, store=store)[1].id for _ in range(3)]
    try:
        for run_id in waiting:
            assert supervisor.enqueue(run_id).state is RunState.QUEUED
        # A damaged queue.json strands no run: the order is rebuilt from the queued runs.
        (store.home / "queue.json").write_text('{"order": [')
        assert supervisor.queue.ids() == waiting
        assert supervisor.move(waiting[2], 1) == [waiting[2], waiting[0], waiting[1]]
        nowhere = zyquo_cli("runs", "queue", waiting[0], "--to", "0")
        assert nowhere.returncode == 2 and "1 (next) or more, not 0" in nowhere.stderr
        assert supervisor.queue.ids() == [waiting[2], waiting[0], waiting[1]]
        assert zyquo_cli("runs", "dequeue", waiting[0]).returncode == 0
        assert supervisor.queue.ids() == [waiting[2], waiting[1]]
        assert store.get(waiting[0]).state is RunState.CONFIGURED
        # A run the queue has started is not in it: the refusal says so, and how to stop it.
        started = zyquo_cli("runs", "dequeue", active.id)
        assert started.returncode == 2
        assert "is not in the queue: it has started" in started.stderr
        assert f"`zyquo-tui runs cancel {active.id}` stops it" in started.stderr
        again = zyquo_cli("runs", "dequeue", waiting[0])
        assert again.returncode == 2 and "is not in the queue (it is configured)" in again.stderr
        for run_id in (waiting[2], waiting[1]):  # cancel of a queued run unqueues it
            assert supervisor.cancel(run_id).state is RunState.CONFIGURED
    finally:
        stop_runs(store, active.id, *waiting)
    assert supervisor.queue.ids() == []


def test_a_store_path_that_is_a_file_is_one_sentence(tmp_path, monkeypatch):
    blocking = tmp_path / "afile"
    blocking.write_text("not a folder")
    monkeypatch.setenv("ZYQUO_HOME", str(blocking))
    for argv in (("runs", "list"), ("runs", "list", "--json")):
        done = zyquo_cli(*argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert done.stderr.strip() == (
            f"zyquo-tui: {blocking} is a file, but zyquo-tui needs a folder there for the "
            "zyquo-tui store: move the file away or set $ZYQUO_HOME to another folder.")


def pretend_running(store: RunStore, run_id: str, process: dict) -> None:
    """Record the run as running with `process` (an identity) as its trainer and runner."""
    def running(r):
        r.set_state(RunState.STARTING)
        r.set_state(RunState.RUNNING)
        r.process = {"pid": process["pid"], "start_time": process["start_time"],
                     "runner_pid": process["pid"], "runner_start_time": process["start_time"],
                     "host": process["host"], "boot_time": process["boot_time"]}
    store.update(run_id, running)


def test_a_reused_pid_is_not_mistaken_for_the_trainer(tiny_model):
    store, run = make_run(tiny_model, COMPLETIONS)
    # A live process that is not the trainer (a child that waits for its stdin to close),
    # recorded with another start time, stands in for a reused pid.
    stranger = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                stdin=subprocess.PIPE)
    try:
        them = identity(stranger.pid)
        pretend_running(store, run.id, {**them, "start_time": them["start_time"] - 1000,
                                        "boot_time": None})

        assert psutil.pid_exists(stranger.pid)
        assert not is_alive(them["pid"], them["start_time"] - 1000)
        refreshed = Supervisor(store).get(run.id)
        assert refreshed.state is RunState.INTERRUPTED
        assert stranger.poll() is None, "the stranger was not signalled"
    finally:
        stranger.stdin.close()
        stranger.wait(timeout=30)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc boot time")
def test_a_clock_adjustment_does_not_make_a_live_trainer_look_gone(tiny_model, monkeypatch):
    """On Linux a start time reads as the boot time plus ticks since boot, and /proc/stat's
    boot time moves whole seconds when NTP adjusts the clock: the run stays running."""
    import psutil._pslinux as linux

    store, run = make_run(tiny_model, COMPLETIONS)
    trainer = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    try:
        them = identity(trainer.pid)
        pretend_running(store, run.id, them)
        booted = linux.boot_time()
        monkeypatch.setattr(linux, "boot_time", lambda: booted + 1.0)
        assert psutil.Process(trainer.pid).create_time() == pytest.approx(
            them["start_time"] + 1.0)  # the clock moved: the start time reads a second later
        assert Supervisor(store).get(run.id).state is RunState.RUNNING
        # The same pid with another start is still another process.
        assert not is_alive(them["pid"], them["start_time"] - 5, None, them["boot_time"])
    finally:
        trainer.stdin.close()
        trainer.wait(timeout=30)


def test_run_control_refuses_bad_requests_with_one_sentence_and_changes_nothing(tiny_model):
    store, active = make_run(tiny_model, COMPLETIONS, **ENDLESS)
    _, other = make_run(tiny_model, COMPLETIONS, store=store)
    _, unstarted = make_run(tiny_model, COMPLETIONS, store=store)
    supervisor = Supervisor(store)
    supervisor.start(active.id)
    try:
        cases = [
            (("runs", "show", "20990101-000000-000-beef"), "There is no run"),
            (("runs", "start", active.id), "cannot be started"),
            (("runs", "start", other.id), f"Run {active.id} ({active.name}) is active"),
            (("runs", "resume", unstarted.id), "only a cancelled, failed or interrupted"),
            (("runs", "cancel", unstarted.id), "nothing to cancel"),
            (("runs", "delete", active.id), "cancel it before deleting"),
        ]
        before = {i: store.get(i).to_dict() for i in (other.id, unstarted.id)}
        for argv, phrase in cases:
            done = zyquo_cli(*argv)
            assert done.returncode == 2, (argv, done.stdout, done.stderr)
            assert phrase in done.stderr, (argv, done.stderr)
            assert "Traceback" not in done.stderr
            assert len(done.stderr.strip().splitlines()) == 1
        assert {i: store.get(i).to_dict() for i in before} == before
        assert store.get(active.id).state in (RunState.STARTING, RunState.RUNNING)
        queued = zyquo_cli("runs", "start", other.id, "--queue-if-busy")
        assert queued.returncode == 0 and store.get(other.id).state is RunState.QUEUED
        supervisor.dequeue(other.id)
        wait_for_event(store.run_dir(active.id), lambda e: e["type"] == "checkpoint")
    finally:
        stop_runs(store, active.id, other.id)
    assert supervisor.get(active.id).state is RunState.CANCELLED
    done = zyquo_cli("runs", "cancel", active.id)
    assert done.returncode == 2 and "nothing to cancel" in done.stderr

    # A cancelled run whose checkpoints kept no optimizer state cannot be resumed exactly:
    # the refusal gives the fork that warm-starts from them.
    for path in store.adapters_dir(active.id).glob("*_state.json"):
        path.unlink()
    done = zyquo_cli("runs", "resume", active.id)
    assert done.returncode == 2 and "no checkpoint to resume from exactly" in done.stderr
    assert f"`zyquo-tui runs fork {active.id} --from-step " in done.stderr


def test_cancel_still_works_when_the_runner_is_gone(tiny_model):
    store, run = make_run(tiny_model, COMPLETIONS, **ENDLESS)
    supervisor = Supervisor(store)
    supervisor.start(run.id)
    try:
        wait_for_event(store.run_dir(run.id),
                       lambda e: e["type"] == "train" and e["iteration"] >= 2)
        process = supervisor.get(run.id).process
        os.kill(process["runner_pid"], signal.SIGKILL)
        wait_until_dead(process["runner_pid"], process["runner_start_time"])

        done = zyquo_cli("runs", "cancel", run.id, "--wait")
    finally:
        stop_runs(store, run.id)

    assert done.returncode == 0, done.stderr
    cancelled = read_events(store.events_path(run.id))[-1]
    assert cancelled["type"] == "cancelled" and cancelled["checkpoint"] is not None


def test_a_run_that_wont_fit_needs_an_explicit_override_which_is_recorded(tiny_model,
                                                                          isolated_home):
    fake_machine(isolated_home, 1 << 20)  # a 1 MiB budget: not even the sample model fits
    store, run = make_run(tiny_model, COMPLETIONS, iters=4)

    refused = zyquo_cli("runs", "start", run.id)

    assert refused.returncode == 1, refused.stderr
    assert "won't fit in memory" in refused.stderr and "override" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    # 1 MiB is below what any setting needs: the refusal says so (test_memory.py checks the
    # suggestions it names when some fit).
    assert "no change of its settings fits on this machine" in refused.stderr
    # A refused start changes nothing: the verdict is saved only with the state change that
    # starts or queues the run.
    record = store.get(run.id)
    assert record.state is RunState.CONFIGURED
    assert record.memory is None

    try:
        started = zyquo_cli("runs", "start", run.id, "--override-memory", "--wait")
    finally:
        stop_runs(store, run.id)
    record = store.get(run.id)
    assert record.memory["verdict"] == "won't fit" and record.memory["override"] is True
    assert record.memory["estimate_bytes"] > record.memory["budget_bytes"]
    # The budget is this test's fiction, not the machine's: the overridden run trains.
    assert started.returncode == 0 and record.state is RunState.COMPLETED


def test_a_run_that_fits_records_its_verdict(tiny_model):
    store, run = make_run(tiny_model, COMPLETIONS, iters=4)
    try:
        Supervisor(store).start(run.id)
        memory = store.get(run.id).memory
        assert memory["verdict"] == "fits"
        assert 0 < memory["estimate_bytes"] < memory["budget_bytes"]
        assert wait_state(Supervisor(store), run.id).state is RunState.COMPLETED
    finally:
        stop_runs(store, run.id)


def test_retention_is_applied_when_a_run_completes_without_a_dashboard(tiny_model):
    from zyquo_tui.core.events.metrics import RunMetrics
    from zyquo_tui.core.store.checkpoints import list_checkpoints
    from zyquo_tui.core.store.retention import RetentionPolicy, save_policy

    store, run = make_run(tiny_model, COMPLETIONS, iters=24, save_every=4, steps_per_eval=4)
    save_policy(store.run_dir(run.id), RetentionPolicy(keep_last=1, keep_best=True))
    supervisor = Supervisor(store)
    try:
        supervisor.start(run.id)
        assert wait_state(supervisor, run.id).state is RunState.COMPLETED
    finally:
        stop_runs(store, run.id)
    metrics = RunMetrics()
    metrics.ingest(read_events(store.events_path(run.id)))
    expected = {24, metrics.best_checkpoint_step()}
    deadline = time.monotonic() + 30  # the runner prunes just after recording the end
    while {c.step for c in list_checkpoints(store.adapters_dir(run.id))} != expected:
        assert time.monotonic() < deadline, list_checkpoints(store.adapters_dir(run.id))
        time.sleep(0.2)
    assert (store.adapters_dir(run.id) / "adapters.safetensors").is_file()
