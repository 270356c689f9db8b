"""Supervisor: start, queue, cancel, resume, fork and follow runs; the same for CLI and dashboard.

Trainers are never children of the caller: each is started by a detached runner process
(core/runner.py) that holds the machine's active-run lock ($ZYQUO_HOME/active.lock) for as long
as it has work. So a dashboard or SSH session can end at any time, and any later process sees
the same runs, reads the same events and can cancel them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import AsyncIterator

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.processes.distributed_launch import world_size_refusal
from zyquo_tui.core.processes.runner import record_end
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.store.checkpoints import adapter_file, list_checkpoints
from zyquo_tui.core.store.index import listing_rows
from zyquo_tui.core.store.logs import rotate_if_large
from zyquo_tui.core.store.queue import RunQueue
from zyquo_tui.core.store.store import FORK_WEIGHTS, RunStore
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.core.system.entry_points import RUNNER, python_command
from zyquo_tui.core.system.liveness import process_alive, signal_group

ACTIVE_LOCK = "active.lock"
RUNNER_LOG = "runner.log"
# A run marked starting whose runner has not yet recorded itself is given this long.
STARTING_GRACE_SECONDS = 30.0


def resume_point(run: Run) -> str:
    """Where a resumed run goes on from, in words (the CLI's line and the dashboard's notice)."""
    if run.resume_from_step is not None:
        return f"from step {run.resume_from_step}"
    return "from the start, having saved no checkpoint"


class Supervisor:
    """Operations on runs that involve processes; everything it knows is in the store."""

    def __init__(self, store: RunStore | None = None, settings: Settings | None = None) -> None:
        self.store = store or RunStore()
        self.settings = settings or Settings.load(self.store.home)
        self.queue = RunQueue(self.store.home)

    # -- the machine's one active run --------------------------------------------------------

    def _try_take_machine(self) -> int | None:
        """An fd holding the active-run lock, or None when another run holds it."""
        import fcntl

        self.store.ensure()
        fd = os.open(self.store.home / ACTIVE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def machine_busy(self) -> bool:
        fd = self._try_take_machine()
        if fd is None:
            return True
        os.close(fd)
        return False

    def hold_machine(self, words: str) -> tuple[int | None, str | None]:
        """The machine taken for a process that is not a runner (`zyquo-tui serve` while it
        has models loaded; core/processes/machine_hold.py), named `words` for queued runs to
        show: (the lock's fd, None), or (None, the sentence of why not). Runs queued while the
        machine was free (their runner died) came first: they start, and it is not taken."""
        from zyquo_tui.core.processes.machine_hold import write_holder

        self._wait_for_winding_down_runner()  # outside the queue lock: the runner needs it

        with self.queue.locked() as order:
            fd = self._try_take_machine()
            if fd is None:
                return None, (f"{self._active_run_words()} is training on this machine, whose "
                              "memory runs and served models share: try again when it ends "
                              "(`zyquo-tui runs list`), or cancel it")
            if order:
                self._spawn_runner(fd, None)
                return None, (f"{len(order)} queued run(s) were waiting for this machine and "
                              "start now, and runs and served models share its memory: try "
                              "again when they end (`zyquo-tui runs list`)")
            write_holder(self.store.home, words)
        return fd, None

    def let_machine_go(self, fd: int) -> bool:
        """Let go of the machine that hold_machine took, handing it to a new runner when runs
        are queued (under queue.lock, as a runner that finds its queue empty lets go);
        whether queued runs start."""
        from zyquo_tui.core.processes.machine_hold import clear_holder

        with self.queue.locked() as order:
            clear_holder(self.store.home)
            if order:
                self._spawn_runner(fd, None)  # closes our copy: the runner holds the lock
                return True
            os.close(fd)
        return False

    def _spawn_runner(self, lock_fd: int, run_id: str | None) -> None:
        argv = python_command(RUNNER, "--home", str(self.store.home), "--lock-fd", str(lock_fd))
        if run_id:
            argv.append(run_id)
        log_path = self.store.home / RUNNER_LOG
        rotate_if_large(log_path, self.settings.log_max_bytes, self.settings.log_backups)
        with open(log_path, "ab") as log:
            launcher = subprocess.Popen(argv, pass_fds=(lock_fd,), stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        os.close(lock_fd)  # the runner holds the lock now
        launcher.wait(timeout=30)  # it forks and exits at once

    # -- starting ----------------------------------------------------------------------------

    def start(self, run_id: str, *, queue_if_busy: bool = False,
              override_memory: bool = False, override_disk: bool = False) -> Run:
        """Start a configured run now; when another run is active, queue it or refuse.

        A run whose memory verdict is "won't fit" is refused unless `override_memory`, one
        whose checkpoints won't fit on the store's disk unless `override_disk`.
        """
        run = self.refresh(self.store.get(run_id))
        if run.state is not RunState.CONFIGURED:
            hint = {RunState.QUEUED: "it is already queued",
                    RunState.STARTING: "it is already starting",
                    RunState.RUNNING: "it is already running",
                    RunState.COMPLETED: "it has completed; fork it to train again"}.get(
                        run.state, f"use `zyquo-tui runs resume {run_id}`")
            raise UserError(f"Run {run_id} is {run.state.value} and cannot be started: {hint}.")
        self._check_settings(run)
        self.check_memory(run, override=override_memory)
        self.check_disk(run, override=override_disk)
        return self._launch(run, queue_if_busy)

    def _check_settings(self, run: Run) -> None:
        """The checks `runs new` and the new-run form make (the run's RunDraft,
        core/setup/draft.py), again: the model or the data may have changed since the run was
        made. A model folder that is gone is left to the memory gate, which says so."""
        from zyquo_tui.core.setup.draft import RunDraft

        errors = RunDraft.from_run(run).errors()
        if errors:
            raise UserError(f"Run {run.id} cannot start: {errors[0].sentence}")
        warm_start = (run.lineage or {}).get("adapter_file")
        if warm_start and not os.path.isfile(warm_start):
            raise UserError(f"Run {run.id} cannot start: the weights it starts from, "
                            f"{warm_start}, are gone; fork again from a checkpoint that exists, "
                            "or make a new run.")

    def check_memory(self, run: Run, *, override: bool = False) -> Run:
        """The memory gate: put the verdict in `run.memory`; refuse "won't fit" without override.

        The verdict is saved with the state change that starts or queues the run, so a refused
        start leaves the record as it was.

        The first estimate assumes rows as long as max_seq_length, which needs no tokenizer.
        Only when that does not fit is the data tokenized (a subprocess, seconds) to judge
        again with its real longest row, so a generous cap alone never blocks a run. A record
        by the bound is made exact when the run ends (core/memory/run_gate.py).
        """
        from zyquo_tui.core.errors import EXIT_PROBLEMS
        from zyquo_tui.core.library.token_stats import row_token_lengths
        from zyquo_tui.core.memory.run_gate import judge_run_memory

        def judge(longest_row_tokens: int | None = None, replica: bool = False) -> None:
            judge_run_memory(run, self.store.home, self.settings.memory_limit_bytes,
                             override=override, longest_row_tokens=longest_row_tokens,
                             replica=replica)

        try:
            judge()
        except UserError as error:
            if error.exit_status != EXIT_PROBLEMS:
                raise
            # Judged again by the dataset's longest row, and, if the terms still say it won't
            # fit, by its replica's measured peak (the terms over-state some configs).
            lengths = row_token_lengths(run.model, run.data, run.extra_config)
            judge(max(lengths, default=None), replica=True)
        return run

    def check_disk(self, run: Run, *, override: bool = False) -> Run:
        """The disk gate (core/memory/disk_verdict.py): put the verdict in `run.disk`; refuse
        "won't fit" without override. Saved with the state change, as the memory verdict."""
        from zyquo_tui.core.memory.disk_verdict import disk_gate

        disk_gate(run, self.store, override=override)
        return run

    def _wait_for_winding_down_runner(self, timeout: float = 10.0) -> None:
        """A runner whose last run just ended holds the machine for a moment more (it records
        the exit, measures the config for the record unless asked for the machine, and looks
        at the queue); don't call the machine busy because of that."""
        from zyquo_tui.core.processes.machine_hold import holder, want_machine

        deadline = time.monotonic() + timeout
        while self.machine_busy() and time.monotonic() < deadline:
            if holder(self.store.home) is not None:
                return  # the server holds it, for as long as it has models loaded
            if any(isinstance(r, Run) and self.refresh(r).state.is_active
                   for r in self.store.iter_runs()):
                return  # a run really is active
            # A runner measuring its completed run's config for the record stops for us
            # (core/processes/machine_hold.py).
            want_machine(self.store.home)
            time.sleep(0.1)

    def _launch(self, run: Run, queue_if_busy: bool) -> Run:
        self._wait_for_winding_down_runner()  # outside the queue lock: the runner needs it
        with self.queue.locked() as order:
            fd = self._try_take_machine()
            if fd is None:
                if not queue_if_busy:
                    raise UserError(
                        f"{self._active_run_words()} is active on this machine, so run {run.id} "
                        "was not started; try again when it ends, or add --queue-if-busy to "
                        "queue it.")
                self._mark_queued(run.id, run.memory, run.disk)
                order.append(run.id)
                return self.store.get(run.id)
            try:
                def starting(r: Run) -> None:
                    r.set_state(RunState.STARTING)
                    r.process = {"requested_at": time.time(), "host": os.uname().nodename}
                    r.memory = run.memory or r.memory
                    r.disk = run.disk or r.disk
                self.store.update(run.id, starting)
            except BaseException:
                os.close(fd)
                raise
            self._spawn_runner(fd, run.id)
        return self.store.get(run.id)

    def _active_run_words(self) -> str:
        """The run that holds the machine, as a refusal names it ("Run ID (NAME)"), or the
        server that does (core/processes/machine_hold.py)."""
        from zyquo_tui.core.processes.machine_hold import holder_words

        held_by = holder_words(self.store.home)
        if held_by is not None:
            return f"{held_by}, with models loaded,"
        for row in listing_rows(self.store):
            if row["state"] in (RunState.STARTING.value, RunState.RUNNING.value):
                return f"Run {row['id']} ({row['name']})"
        return "Another run"  # its runner is between runs, or its record is being written

    def _mark_queued(self, run_id: str, memory: dict | None = None,
                     disk: dict | None = None) -> None:
        def queued(r: Run) -> None:
            r.set_state(RunState.QUEUED)
            r.memory = memory or r.memory
            r.disk = disk or r.disk
            r.queued_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.store.update(run_id, queued)

    def enqueue(self, run_id: str, *, override_memory: bool = False,
                override_disk: bool = False) -> Run:
        """Add a configured run to the end of the queue; start the queue if the machine is free."""
        run = self.refresh(self.store.get(run_id))
        if run.state is RunState.QUEUED:
            raise UserError(f"Run {run_id} is already queued (position "
                            f"{self.queue.position(run_id)}).")
        if run.state is not RunState.CONFIGURED:
            raise UserError(f"Run {run_id} is {run.state.value}; only a configured run can be "
                            "queued (resume or fork the others).")
        self._check_settings(run)
        self.check_memory(run, override=override_memory)
        self.check_disk(run, override=override_disk)
        self._queue_and_kick(run_id, run.memory, run.disk)
        return self.store.get(run_id)

    def _queue_and_kick(self, run_id: str, memory: dict | None = None,
                        disk: dict | None = None) -> None:
        with self.queue.locked() as order:
            self._mark_queued(run_id, memory, disk)
            order.append(run_id)
            fd = self._try_take_machine()
            if fd is not None:
                self._spawn_runner(fd, None)

    def _not_queued(self, run_id: str) -> UserError:
        """A run the queue does not hold: say what it is instead (the queue may have just
        started it), and what to do."""
        run = self.get(run_id)
        if run.state.is_active:
            return UserError(f"Run {run_id} is not in the queue: it has started "
                             f"({run.state.value}); `zyquo-tui runs cancel {run_id}` stops it.")
        return UserError(f"Run {run_id} is not in the queue (it is {run.state.value}).")

    def dequeue(self, run_id: str) -> Run:
        with self.queue.locked() as order:
            if run_id not in order:
                raise self._not_queued(run_id)
            order.remove(run_id)
            def configured(r: Run) -> None:
                if r.state is RunState.QUEUED:
                    r.set_state(RunState.CONFIGURED)
                    r.queued_at = None
            return self.store.update(run_id, configured)

    def move(self, run_id: str, position: int) -> list[str]:
        """Put a queued run at `position` (1 = next; past the end, last); returns the new
        order."""
        if position < 1:
            raise UserError(f"A queue position is 1 (next) or more, not {position}.")
        with self.queue.locked() as order:
            if run_id not in order:
                raise self._not_queued(run_id)
            order.remove(run_id)
            order.insert(max(0, min(position - 1, len(order))), run_id)
            return list(order)

    # -- cancel, resume, fork ------------------------------------------------------------------

    def cancel(self, run_id: str) -> Run:
        """Ask an active run to stop (it saves a checkpoint); a queued run leaves the queue."""
        run = self.refresh(self.store.get(run_id))
        if run.state is RunState.QUEUED:
            return self.dequeue(run_id)
        if not run.state.is_active:
            raise UserError(f"Run {run_id} is {run.state.value}, not running, so there is "
                            "nothing to cancel.")
        def requested(r: Run) -> None:
            r.process = {**(r.process or {}), "cancel_requested_at": time.time()}
        run = self.store.update(run_id, requested)
        # The runner sees the request within a poll, sends the one SIGTERM (a second would stop
        # the trainer without its checkpoint) and enforces the grace period. Without a runner
        # (killed), signal the trainer from here.
        pid = (run.process or {}).get("pid")
        if not process_alive(run.process, "runner_") and pid and process_alive(run.process):
            signal_group(pid, signal.SIGTERM)
        return run

    def resume(self, run_id: str, step: int | None = None, *, queue_if_busy: bool = False) -> Run:
        """Continue a cancelled, failed or interrupted run exactly, from a saved step.

        A run stopped before its first checkpoint has nothing to continue: it trains again
        from the start (`resume_from_step` None), which is what an uninterrupted run does."""
        run = self.refresh(self.store.get(run_id))
        if not run.state.can_resume:
            raise UserError(f"Run {run_id} is {run.state.value}; only a cancelled, failed or "
                            "interrupted run can be resumed.")
        if run.served:
            raise UserError(f"Run {run_id} was trained by zyquo-tui serve for a Tinker program, "
                            "which holds its data: go on from the program, with "
                            "create_training_client_from_state_with_optimizer and a tinker:// "
                            "path it saved.")
        saved = list_checkpoints(self.store.adapters_dir(run_id))
        checkpoints = [c for c in saved if c.resumable]
        if not saved and step is None:
            self._check_settings(run)

            def afresh(r: Run) -> None:
                r.resume_from_step = None
                r.failure = None
            self.store.update(run_id, afresh)
            return self._launch(self.store.get(run_id), queue_if_busy)
        if not saved:
            raise UserError(f"Run {run_id} has no checkpoint at step {step}; it saved none, so "
                            f"resume it without a step to train it from the start.")
        if not checkpoints:
            raise UserError(f"Run {run_id} has no checkpoint to resume from exactly (none kept "
                            f"its optimizer state); fork it from one to train on from its "
                            f"weights: `zyquo-tui runs fork {run_id} --from-step "
                            f"{saved[-1].step}`.")
        steps = [c.step for c in checkpoints]
        if step is None:
            step = steps[-1]
        elif step not in steps:
            raise UserError(f"Run {run_id} has no resumable checkpoint at step {step}; "
                            f"it has {', '.join(map(str, steps))}.")
        self._check_settings(run)
        refusal = world_size_refusal(self.store, run, step)
        if refusal:
            raise UserError(refusal)

        def from_step(r: Run) -> None:
            r.resume_from_step = step
            r.failure = None
        self.store.update(run_id, from_step)
        return self._launch(self.store.get(run_id), queue_if_busy)

    def fork(self, run_id: str, step: int, name: str | None = None) -> Run:
        """A new run that starts from the weights of `step` (a warm start, as mlx-lm resumes)."""
        parent = self.store.get(run_id)
        weights = adapter_file(self.store.adapters_dir(run_id), step)
        if not weights.is_file():
            steps = [c.step for c in list_checkpoints(self.store.adapters_dir(run_id))]
            raise UserError(f"Run {run_id} has no checkpoint at step {step}"
                            + (f"; it has {', '.join(map(str, steps))}." if steps else "."))
        from zyquo_tui.core.runs.settings import Hyperparameters
        from zyquo_tui.core.setup.draft import RunDraft

        # The parent's choices as they are (a warm start trains what the parent trained),
        # through the one road to a Run.
        child = RunDraft(model_path=parent.model, data_path=parent.data,
                         chosen_method=parent.method,
                         hyperparameters=Hyperparameters.from_dict(
                             parent.hyperparameters.to_dict()),
                         extra_config=dict(parent.extra_config),
                         name=name or f"{parent.name} (fork @{step})").to_run(check=False)
        child = self.store.create(child)
        # The fork keeps its own link to the weights it starts from, so deleting the parent
        # (or pruning its checkpoints) cannot take them away: a hard link costs no space.
        start = self.store.run_dir(child.id) / FORK_WEIGHTS
        try:
            try:
                os.link(weights, start)
            except OSError:  # another filesystem, or links not allowed: a copy
                shutil.copyfile(weights, start)
        except OSError as error:
            self.store.delete(child.id)
            raise UserError(f"Run {run_id} was not forked: its step {step} weights could not "
                            f"be kept in the fork's folder ({error.strerror}).") from None

        def starts_from(r: Run) -> None:
            r.lineage = {"parent": parent.id, "step": step, "adapter_file": str(start)}
        return self.store.update(child.id, starts_from)

    # -- after a reboot ------------------------------------------------------------------------

    def recover(self) -> dict:
        """Bring the store back after the machine went down (the service runs this at boot).

        Runs marked active whose trainer and runner are gone become interrupted; those that
        no runner saw end (`lost_at`: they died with the machine) are resumed exactly from
        their latest checkpoint when config.toml's `auto_resume` allows (else left for the
        user; a run served to a Tinker program is always left, `served`); then the queue goes
        on. Idempotent: each lost run is claimed (`recovered_at`,
        under its lock) by one recover only, and a live run is never touched.
        """
        report: dict = {"interrupted": [], "resumed": [], "not_resumed": [],
                        "queue_started": False}
        lost = []
        for run in self.store.iter_runs():
            if not isinstance(run, Run):
                continue  # damaged: listed by `runs list`, never touched
            was_active = run.state.is_active
            run = self.refresh(run)
            if was_active and run.state is RunState.INTERRUPTED:
                report["interrupted"].append(run.id)
            process = run.process or {}
            if (run.state is RunState.INTERRUPTED and process.get("lost_at")
                    and not process.get("recovered_at")):
                lost.append(run.id)
        for run_id in lost:
            if not self._claim_lost(run_id):
                continue  # another recover took it
            if self.store.get(run_id).served:  # by rule, not a problem
                report["not_resumed"].append({
                    "id": run_id, "served": True,
                    "reason": "trained by zyquo-tui serve for a Tinker program, which goes on "
                              "from the state it saved"})
                continue
            if not self.settings.auto_resume:
                report["not_resumed"].append({"id": run_id, "reason": "auto_resume is off in "
                                              "config.toml"})
                continue
            try:
                run = self.resume(run_id, queue_if_busy=True)
            except UserError as error:
                report["not_resumed"].append({"id": run_id, "reason": error.message})
                continue
            report["resumed"].append({"id": run_id, "step": run.resume_from_step,
                                      "state": run.state.value})
        report["queue_started"] = self._continue_queue()
        report["queue"] = self.queue.ids()
        return report

    def _claim_lost(self, run_id: str) -> bool:
        claimed = []

        def claim(r: Run) -> None:
            process = r.process or {}
            if (r.state is RunState.INTERRUPTED and process.get("lost_at")
                    and not process.get("recovered_at")):
                r.process = {**process, "recovered_at": time.time()}
                claimed.append(True)
        self.store.update(run_id, claim)
        return bool(claimed)

    def _continue_queue(self) -> bool:
        """Start a runner for the queue when runs wait and the machine is free."""
        self._wait_for_winding_down_runner()
        with self.queue.locked() as order:
            if not order:
                return False
            fd = self._try_take_machine()
            if fd is None:
                return False  # a runner is at work: it drains the queue
            self._spawn_runner(fd, None)
            return True

    # -- reading the truth ---------------------------------------------------------------------

    def refresh(self, run: Run) -> Run:
        """The run with its lifecycle brought up to date from its processes and events.

        A run marked active whose trainer and runner are both gone did end: with the terminal
        event it wrote, or else as interrupted (crash, SIGKILL, reboot).
        """
        if not run.state.is_active:
            return run
        process = run.process or {}
        if process_alive(process) or process_alive(process, "runner_"):
            return run
        if not process.get("pid") and time.time() - process.get("requested_at", 0) < \
                STARTING_GRACE_SECONDS:
            return run  # the runner is still coming up
        run_dir = self.store.run_dir(run.id)

        def settle(r: Run) -> None:
            if r.state.is_active:
                record_end(r, run_dir, None)
                if r.state is RunState.INTERRUPTED:
                    # No runner saw the end: the machine went down (or both were killed).
                    # `recover` resumes such a run, once.
                    r.process = {**(r.process or {}), "lost_at": time.time()}
        return self.store.update(run.id, settle)

    def get(self, run_id: str) -> Run:
        return self.refresh(self.store.get(run_id))

    async def wait(self, run_id: str, poll: float = 0.25, timeout: float | None = None) -> Run:
        """Wait until the run is no longer queued or active; returns it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if not run.state.is_active and run.state is not RunState.QUEUED \
                    and not may_step_down(run):
                return run
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} is still {run.state.value}")
            await _sleep(poll)

    async def follow_batches(self, run_id: str, poll: float = 0.2,
                             from_offset: int = 0) -> AsyncIterator[list[dict]]:
        """Lists of new events as they arrive (a burst comes as one list), until the run ends.

        The same for a run this process started and one started by any other process. Idle
        cost: one stat() per poll; reading costs only the bytes appended since the last read.
        """
        path = self.store.events_path(run_id)
        reader = ev.EventReader(path, offset=from_offset)
        last_size = -1
        last_check = 0.0
        while True:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size != last_size:
                last_size = size
                batch = reader.read_new()
                if batch:
                    yield batch
                    if batch[-1]["type"] in ev.TERMINAL_TYPES and \
                            not await self._goes_on(run_id, batch[-1]):
                        return
            now = time.monotonic()
            if now - last_check > 1.0:  # liveness is dearer than a stat: once a second
                last_check = now
                run = self.get(run_id)
                if not run.state.is_active and run.state is not RunState.QUEUED:
                    # The trainer saves its final state a moment before its final event:
                    # give that event a little time to arrive, so no follower misses it.
                    grace_end = time.monotonic() + 2.0
                    goes_on = False
                    while not goes_on:
                        rest = reader.read_new()
                        if rest:
                            yield rest
                            if rest[-1]["type"] in ev.TERMINAL_TYPES:
                                if not await self._goes_on(run_id, rest[-1]):
                                    return
                                goes_on = True
                        if not goes_on and time.monotonic() > grace_end:
                            return
                        await _sleep(0.05)
                    last_size = -1
            await _sleep(poll)

    def _restarting(self, run_id: str) -> bool:
        return self.get(run_id).state in (RunState.STARTING, RunState.QUEUED)

    async def _goes_on(self, run_id: str, final: dict, timeout: float = 30.0) -> bool:
        """Whether the run goes on after this terminal event: started again, or (a death by
        memory) resumed one rung down the ladder, which its runner decides as it records the
        end (core/processes/memory_steps.py): until then, wait."""
        if self._restarting(run_id):
            return True
        if final["type"] != ev.FAILED or final.get("cause") != "oom":
            return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.get(run_id)
            if run.state in (RunState.STARTING, RunState.QUEUED, RunState.RUNNING):
                return True
            if not may_step_down(run):
                return False
            await _sleep(0.1)
        return False

    async def follow(self, run_id: str, poll: float = 0.2) -> AsyncIterator[dict]:
        """Every event of the run, from the first, as it arrives; ends with the run."""
        async for batch in self.follow_batches(run_id, poll):
            for event in batch:
                yield event


def may_step_down(run: Run) -> bool:
    """A run the trainer recorded out of memory whose runner has not recorded the end yet: it
    may resume one rung down the ladder (core/processes/memory_steps.py) in a moment."""
    process = run.process or {}
    return (run.state is RunState.FAILED and (run.failure or {}).get("cause") == "oom"
            and "ended_at" not in process and process_alive(process, "runner_"))


async def _sleep(seconds: float) -> None:
    import asyncio  # imported here: listing runs from the CLI needs no event loop

    await asyncio.sleep(seconds)
