"""The runner: a small detached process that owns the machine's one active training run.

`python -m zyquo_tui.core.processes.runner --home HOME --lock-fd N [RUN_ID]` is started by the supervisor
(from the CLI or the dashboard) with the machine's active-run lock already held on fd N. It
starts the trainer as its child, waits for it (so no zombie is left), enforces the cancel grace
period, records how the trainer ended, and then starts the next queued run, until the queue is
empty. It imports neither textual nor mlx, and it does not depend on any dashboard or SSH
session: closing those leaves it and the trainer running.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.memory.run_gate import make_exact, measure_for_record
from zyquo_tui.core.processes import distributed_launch
from zyquo_tui.core.processes.machine_hold import wanted_since
from zyquo_tui.core.processes.memory_steps import (
    SteppedDown,
    explain_failure,
    step_down_after_oom,
)
from zyquo_tui.core.runs.failures import classify_exit, failure
from zyquo_tui.core.runs.out_of_memory import memory_limit
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.store.logs import read_tail
from zyquo_tui.core.store.queue import RunQueue
from zyquo_tui.core.store.store import EVENTS_FILE, LOG_FILE, RunStore
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.core.system.entry_points import RUNNER, TRAINER, python_command, usage
from zyquo_tui.core.system.liveness import identity, signal_group
from zyquo_tui.core.system.memory_deaths import killed_for_memory, oom_kill_count, sample_memory
from zyquo_tui.core.system.machine import caffeinate_prefix

POLL_SECONDS = 0.25
SAMPLE_SECONDS = 1.0  # how often the trainer's memory is sampled (memory_deaths.py)
LOG_TAIL_BYTES = 16_384


def log_tail(path: Path, size: int = LOG_TAIL_BYTES) -> str:
    """The end of trainer.log, across a rotation (core/store/logs.py)."""
    return read_tail(path, size)


def latest_started(path: Path) -> dict | None:
    """The `started` event of the run's latest session (None: the trainer never got that far)."""
    last = None
    for event in ev.read_events(path):
        if event["type"] == ev.STARTED:
            last = event
    return last


def terminal_event(path: Path) -> dict | None:
    """The last terminal event of the run's latest session (after its last `started`)."""
    last = None
    for event in ev.read_events(path):
        if event["type"] == ev.STARTED:
            last = None
        elif event["type"] in ev.TERMINAL_TYPES:
            last = event
    return last


class Runner:
    """Runs the given run, then each queued run in turn, one at a time."""

    def __init__(self, home: Path, lock_fd: int) -> None:
        self.store = RunStore(home)
        self.queue = RunQueue(home)
        self.lock_fd = lock_fd
        self.settings = Settings.load(home)
        self.oom_kills_before: int | None = None  # the kernel's count as the trainer started
        self.last_sample = None  # the trainer's memory as last seen (memory_deaths.py)

    def serve(self, first: str | None) -> None:
        run_id = first
        while True:
            if run_id is None:
                run_id = self._next_queued()
                if run_id is None:
                    return
            # Out of memory: again from its last checkpoint, one rung down the ladder.
            while self._execute(run_id):
                pass
            run_id = None

    def _next_queued(self) -> str | None:
        with self.queue.locked() as order:
            while order:
                run_id = order.pop(0)
                try:
                    run = self.store.get(run_id)
                except Exception:
                    continue  # deleted or damaged while waiting: skip it
                if run.state is RunState.QUEUED:
                    return run_id
            # Release the machine while the queue is locked, so a run queued now either was
            # seen above or will find the machine free and start its own runner.
            os.close(self.lock_fd)
            self.lock_fd = -1
            return None

    def _execute(self, run_id: str) -> bool:
        """Train the run once; True when it ran out of memory and was made ready to resume
        one rung down the ladder (core/processes/memory_steps.py)."""
        me = identity(os.getpid())

        def starting(run):
            if run.state is not RunState.STARTING:
                run.set_state(RunState.STARTING)
            run.process = {"runner_pid": me["pid"], "runner_start_time": me["start_time"],
                           "host": me["host"], "boot_time": me["boot_time"],
                           "requested_at": time.time()}
        try:
            self.store.update(run_id, starting)
        except Exception as error:
            print(f"runner: cannot start {run_id}: {error}", flush=True)
            return False
        run_dir = self.store.run_dir(run_id)
        argv = python_command(TRAINER, str(run_dir))
        distribution = preexec = None
        try:  # one run on several processes: mlx.launch starts a trainer per rank
            run = self.store.get(run_id)
            distribution = distributed_launch.distribution_for(run)
            if distribution is not None:
                argv = distributed_launch.distributed_command(self.store, run, distribution, argv)
                preexec = distributed_launch.ignore_stop_signals
                distributed_launch.trainer_log_note(
                    run_dir / LOG_FILE, f"{distributed_launch.LAUNCHER_MARKER} "
                    f"{distribution.world_size} processes: {shlex.join(argv)}")
        except distributed_launch.LaunchError as error:
            self._fail_before_start(run_id, str(error))
            return False
        self.oom_kills_before = oom_kill_count()
        self.last_sample = None
        with open(run_dir / LOG_FILE, "ab") as log:
            trainer = subprocess.Popen(
                [*caffeinate_prefix(), *argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(self.lock_fd,), preexec_fn=preexec,
            )
        started = identity(trainer.pid)

        def record(run):
            run.process = {**(run.process or {}), "pid": started["pid"],
                           "start_time": started["start_time"]}
        self.store.update(run_id, record)
        returncode = self._wait(run_id, trainer, distributed=distribution is not None)
        return self._settle(run_id, returncode)

    def _fail_before_start(self, run_id: str, message: str) -> None:
        """A run that could not be launched: failed, with the sentence that says why."""
        cause = failure("config", message)
        writer = ev.EventWriter(self.store.events_path(run_id))
        writer.write(ev.FAILED, iteration=0, **cause.to_dict(), traceback=[])
        writer.close()

        def failed(run):
            run.failure = cause.to_dict()
            run.set_state(RunState.FAILED)
        self.store.update(run_id, failed)
        print(f"runner: {run_id} not started: {message}", flush=True)

    def _wait(self, run_id: str, trainer: subprocess.Popen, distributed: bool = False) -> int:
        """Wait for the trainer; carry out a cancel request, killing it after the grace period."""
        grace = self.settings.cancel_grace_seconds
        terminated = killed = False
        rank_zero_gone_at = None
        sampled_at = 0.0
        while True:
            try:
                return trainer.wait(timeout=POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() - sampled_at >= SAMPLE_SECONDS:
                # The memory a SIGKILL would have been the answer to (memory_deaths.py).
                self.last_sample = sample_memory(trainer.pid) or self.last_sample
                sampled_at = time.monotonic()
            if killed:
                continue
            try:
                process = self.store.get(run_id).process or {}
            except Exception:
                process = {}
            asked = process.get("cancel_requested_at")
            if distributed and rank_zero_gone_at is None and \
                    distributed_launch.rank_zero_gone(process):
                rank_zero_gone_at = time.time()
            if rank_zero_gone_at and time.time() - rank_zero_gone_at > \
                    distributed_launch.RANK_GRACE_SECONDS:
                # Rank 0 has ended and the launcher still waits on a rank: nothing is left
                # for them to do, and a rank stuck in a collective would wait forever.
                print(f"runner: {run_id}: rank 0 ended and other ranks remain; stopping them",
                      flush=True)
                signal_group(trainer.pid, signal.SIGKILL)
                killed = True
                continue
            if not asked:
                continue
            if not terminated:
                # The canceller signals too, but it may have asked before the pid was known.
                signal_group(trainer.pid, signal.SIGTERM)
                terminated = True
            if time.time() - asked > grace:
                print(f"runner: {run_id} did not stop within {grace:.0f} s; killing it", flush=True)
                signal_group(trainer.pid, signal.SIGKILL)
                killed = True

    def _settle(self, run_id: str, returncode: int) -> bool:
        run_dir = self.store.run_dir(run_id)
        stepped: list[SteppedDown] = []

        started = latest_started(run_dir / EVENTS_FILE) or {}
        if ((terminal_event(run_dir / EVENTS_FILE) or {}).get("type") == ev.COMPLETED
                and not self.queue.ids()):
            # A completed run nobody planned: its config measured now (whole or on a
            # replica), outside the store's lock, so that make_exact records that figure
            # (core/memory/run_gate.py). Only in idle time: not while runs wait in the queue,
            # and stopped at once when a run is queued or a start or the server asks for the
            # machine.
            since = time.time()
            try:
                measure_for_record(self.store.get(run_id), self.store.home,
                                   self.settings.memory_limit_bytes,
                                   started.get("longest_row_tokens"),
                                   cancelled=lambda: (wanted_since(self.store.home, since)
                                                      or bool(self.queue.ids())))
            except Exception as error:  # a figure, never worth a failure of the runner
                print(f"runner: {run_id}'s config not measured: {error}", flush=True)

        def settle(run):
            run.process = {**(run.process or {}), "returncode": returncode,
                           "ended_at": time.time()}
            # The start judged memory by max_seq_length; the trainer has since tokenized the
            # rows (core/memory/run_gate.py). Before a step down changes the settings.
            try:
                make_exact(run, self.store.home, self.settings.memory_limit_bytes,
                           started.get("longest_row_tokens"))
            except Exception as error:  # a figure, never worth a failure of the runner
                print(f"runner: memory record of {run_id} not made exact: {error}", flush=True)
            limit, _ = memory_limit(run.hyperparameters, self.settings.memory_limit_bytes)
            record_end(run, run_dir, returncode, killed_for_memory(
                self.last_sample, limit, self.oom_kills_before, oom_kill_count()))
            # In the same update: a follower sees a death by memory and its resume at once.
            down = step_down_after_oom(run, self.store.adapters_dir(run_id))
            if down is not None:
                stepped.append(down)
                return
            try:
                explain_failure(self.store, run, self.settings.memory_limit_bytes)
            except Exception as error:  # a suggestion, never worth a failure of the runner
                print(f"runner: no memory suggestion for {run_id}: {error}", flush=True)
        try:
            run = self.store.update(run_id, settle)
        except Exception as error:
            print(f"runner: cannot record the end of {run_id}: {error}", flush=True)
            return False
        if stepped:
            stepped[0].write_event(run_dir / EVENTS_FILE)
            print(f"runner: {run_id}: {stepped[0].message}", flush=True)
            return True
        try:
            from zyquo_tui.core.store.retention import apply_retention

            apply_retention(self.store, run_id)  # keep-best-and-last-N, when the run chose it
        except Exception as error:
            print(f"runner: retention not applied to {run_id}: {error}", flush=True)
        try:
            # The measured peak beside the gate's estimate: the memory advisor learns from it.
            from zyquo_tui.core.memory.history import MemoryHistory

            MemoryHistory.load(self.store.home).record_run(run)
        except Exception as error:  # a figure for later estimates, never worth a failure
            print(f"runner: memory history not updated for {run_id}: {error}", flush=True)
        try:
            # The run's metrics folded once more, kept beside its events: its first opening
            # in a dashboard is then as quick as the next.
            from zyquo_tui.core.events.history import keep_cache

            keep_cache(run_dir / EVENTS_FILE)
        except Exception as error:  # a cache, never worth a failure
            print(f"runner: metrics cache not kept for {run_id}: {error}", flush=True)
        return False


def record_end(run: Run, run_dir: Path, returncode: int | None,
               memory_death: str | None = None) -> None:
    """Make the record tell how the trainer ended, also when it could not say so itself.

    Called under the run's lock by the runner (which knows the exit status) and by any reader
    that finds the trainer and the runner gone (which does not).
    """
    if run.state.is_terminal:
        return  # the trainer recorded its own end
    final = terminal_event(run_dir / EVENTS_FILE)
    if final is not None:
        run.set_state(RunState(final["type"]))
        if final["type"] == ev.FAILED:
            run.failure = {k: final.get(k) for k in ("cause", "message", "suggestion")}
        return
    if (run.process or {}).get("cancel_requested_at"):
        # Killed after the grace period: the cancel happened, without a final checkpoint.
        writer = ev.EventWriter(run_dir / EVENTS_FILE)
        writer.write(ev.CANCELLED, iteration=run.summary.get("step", 0), checkpoint=None,
                     forced=True)
        writer.close()
        run.set_state(RunState.CANCELLED)
        return
    run.failure = classify_exit(returncode, log_tail(run_dir / LOG_FILE),
                                memory_death).to_dict()
    run.set_state(RunState.INTERRUPTED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=usage(RUNNER))
    parser.add_argument("--home", required=True)
    parser.add_argument("--lock-fd", type=int, required=True)
    parser.add_argument("--no-detach", action="store_true")
    parser.add_argument("run_id", nargs="?")
    args = parser.parse_args(argv)
    if not args.no_detach and os.fork() > 0:
        # The parent returns at once, so whoever started us reaps it and never sees a zombie;
        # the child goes on, adopted by init (or the nearest subreaper).
        os._exit(0)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # an SSH session ending must not stop us
    Runner(Path(args.home), args.lock_fd).serve(args.run_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
