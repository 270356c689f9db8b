"""RunService: the dashboard's link to the run store, owned by the App so it outlives screens.

- Every `poll_interval` seconds a worker thread re-reads the store: a stat() per run, and
  run.json only for runs whose file changed, so 1,000 runs cost about 1,000 stats a second.
  Active runs are reconciled with their processes (Supervisor.refresh).
- Events are followed only for active runs and for the runs the user has open: an App-level
  worker per run around Supervisor.follow_batches, folding each burst into the run's RunFeed
  and posting one MetricsReceived per burst (coalesced further by `can_replace`).
- A run that leaves an active state while the dashboard watches posts RunEnded (notifications,
  checkpoint retention), as does one that starts and ends between two reads of the store.
- Actions that start processes or may wait (start, cancel, resume, fork, building the sample)
  run in worker threads; their errors become notifications, never tracebacks.

It imports Textual only through the App it is given (workers, messages, notifications).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.history import complete_size
from zyquo_tui.core.library.sample import (
    SAMPLE_RUN_SETTINGS,
    build_sample,
    sample_dataset,
    sample_exists,
    sample_model_path,
)
from zyquo_tui.core.processes.supervisor import Supervisor, may_step_down, resume_point
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.stopping import DIVERGED
from zyquo_tui.core.setup.draft import RunDraft
from zyquo_tui.core.processes.machine_hold import holder_words
from zyquo_tui.core.store.queue import RunQueue
from zyquo_tui.core.store.retention import apply_retention, delete_checkpoint
from zyquo_tui.core.store.store import RUN_FILE, DamagedRun, RunStore
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.dashboard.messages import (
    MetricsReceived,
    RunEnded,
    RunsRefreshed,
    RunSteppedDown,
    RunWarned,
    SampleChanged,
)
from zyquo_tui.dashboard.run_feed import RunFeed, load_history

if TYPE_CHECKING:
    from textual.app import App

log = logging.getLogger(__name__)

FOLLOW_POLL_SECONDS = 0.2
# Feeds of runs that are neither active nor open, kept for a quick reopen.
KEEP_CLOSED_FEEDS = 2


@dataclass
class RunRow:
    """One line of the runs table: the figures of a run, from run.json or its live feed."""

    id: str
    state: str
    name: str
    method: str = ""
    objective: str = "sft"  # a preference run's (dpo, orpo) is tagged in the table
    model: str = ""
    data: str = ""
    step: int | None = None
    iters: int | None = None
    train_loss: float | None = None
    # A grpo run's mean reward: the runs table shows it where a loss would be (`r 0.62`).
    reward_mean: float | None = None
    val_loss: float | None = None
    tokens_per_second: float | None = None
    elapsed: float | None = None
    eta: float | None = None
    queue_position: int | None = None
    damaged: str | None = None
    group: str | None = None  # the grid it was made in (`runs grid`)

    @property
    def fraction(self) -> float | None:
        if self.step is None or not self.iters:
            return None
        return min(1.0, self.step / self.iters)


class StoreSnapshot:
    """What one poll of the store found."""

    def __init__(self, runs: dict[str, Run | DamagedRun], queue: list[str],
                 waiting_for: str | None = None) -> None:
        self.runs = runs
        self.queue = queue
        self.waiting_for = waiting_for  # what holds the machine when no run does (the server)


class RunService:
    """Run records, live feeds and run actions for every screen of the dashboard."""

    def __init__(self, app: "App", store: RunStore, clock: Callable[[], float] = time.time,
                 poll_interval: float = 1.0) -> None:
        self.app = app
        self.store = store
        self.clock = clock
        self.poll_interval = poll_interval
        # config.toml, read once for the whole dashboard (its notifications and keys too); a
        # file the commands refuse leaves every setting at its default and is said at start.
        try:
            self.settings = Settings.load(store.home)
        except UserError as error:
            self.settings_problem: str | None = error.message
            self.settings = Settings()
        else:
            self.settings_problem = None
        self.supervisor = Supervisor(store, self.settings)
        self.runs: dict[str, Run | DamagedRun] = {}
        self.queue: list[str] = []
        self.waiting_for: str | None = None  # what queued runs wait for when no run holds it
        self.loaded = False
        self.feeds: dict[str, RunFeed] = {}
        self._open_counts: dict[str, int] = {}
        self._closed_order: list[str] = []
        self._loading: set[str] = set()
        self._states: dict[str, RunState] = {}
        self._memory_steps: dict[str, int] = {}  # each run's out-of-memory steps, last seen
        self._record_cache: dict[str, tuple[tuple[int, int, int], Run | DamagedRun]] = {}
        self._polling = False
        self._poll_again = False
        self.sample_building = False
        self.sample_ready = False
        # The first read of the store starts now, while Textual is still starting up, so
        # the runs table can fill as soon as the screen is there.
        self._first_read: Future | None = _background(self._read_everything)

    # -- polling the store ----------------------------------------------------------------------

    def begin_polling(self) -> None:
        self.poll_now()
        self.app.set_interval(self.poll_interval, self.poll_now, name="store poll")

    def poll_now(self) -> None:
        if self._polling:
            self._poll_again = True
            return
        self._polling = True
        self.app.run_worker(self._read_store, thread=True, group="store-poll",
                            name="read the run store", exit_on_error=False)

    def _read_everything(self) -> tuple[StoreSnapshot, bool]:
        return self.read_snapshot(), sample_exists(self.store.home)

    def _read_store(self) -> None:
        try:
            first, self._first_read = self._first_read, None
            snapshot, ready = first.result() if first is not None else self._read_everything()
        except Exception as error:  # keep polling whatever one read met
            log.exception("reading the store failed")
            self.app.call_from_thread(self._poll_failed, error)
            return
        self.app.call_from_thread(self._apply, snapshot, ready)

    def read_snapshot(self) -> StoreSnapshot:
        """Records of every run (run.json re-read only when it changed), active ones refreshed."""
        runs: dict[str, Run | DamagedRun] = {}
        root = str(self.store.runs_root)
        names = self.store.iter_run_names()
        for name in names:
            path = os.path.join(root, name, RUN_FILE)
            try:
                stat = os.stat(path)
                key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            except OSError:
                key = None
            cached = self._record_cache.get(name)
            if key is not None and cached is not None and cached[0] == key:
                record = cached[1]
            else:
                record = self.store.read_named(name, path)
                if key is not None:
                    self._record_cache[name] = (key, record)
            if isinstance(record, Run) and record.state.is_active:
                record = self.supervisor.refresh(record)
            runs[name] = record
        seen = set(names)
        for gone in set(self._record_cache) - seen:
            del self._record_cache[gone]
        queue = RunQueue(self.store.home).ids()
        return StoreSnapshot(runs, queue, holder_words(self.store.home) if queue else None)

    def _poll_failed(self, error: Exception) -> None:
        self._polling = False
        self.app.notify(f"Reading the run store failed: {error}", severity="error",
                        title="Run store")

    def _apply(self, snapshot: StoreSnapshot, sample_ready: bool) -> None:
        self._polling = False
        ended: list[Run] = []
        stepped: list[Run] = []  # resumed one rung down the out-of-memory ladder
        for run_id, record in snapshot.runs.items():
            if not isinstance(record, Run):
                continue
            before = self._states.get(run_id)
            if may_step_down(record):
                continue  # out of memory, and its runner about to resume it: not ended yet
            # A run first seen already ended, after the first read of the store, started and
            # ended between two polls (a short run): it ended while the dashboard watched.
            if record.state.is_terminal and (before is not None and not before.is_terminal
                                             or before is None and self.loaded):
                ended.append(record)
            self._states[run_id] = record.state
            steps = len(record.memory_steps)
            if steps > self._memory_steps.get(run_id, steps if not self.loaded else 0):
                stepped.append(record)
            self._memory_steps[run_id] = steps
        for gone in set(self._states) - set(snapshot.runs):
            del self._states[gone]
        self.runs = snapshot.runs
        self.queue = snapshot.queue
        self.waiting_for = snapshot.waiting_for
        self.loaded = True
        self.sample_ready = sample_ready
        for run_id, record in self.runs.items():
            if isinstance(record, Run) and record.state.is_active:
                self._ensure_followed(run_id)
        for run in ended:  # keep their figures for the notification and a quick look
            if run.id in self.feeds and run.id not in self._open_counts:
                self._closed_order.append(run.id)
        self._trim_feeds()
        self.app.post_message(RunsRefreshed())
        for run in ended:
            self.app.post_message(RunEnded(run.id, run.state.value))
        for run in stepped:
            self.app.post_message(RunSteppedDown(run.id, run.memory_steps[-1].get("change", "")))
        if self._poll_again:
            self._poll_again = False
            self.poll_now()

    # -- reading ----------------------------------------------------------------------------------

    def run(self, run_id: str | None) -> Run | None:
        record = self.runs.get(run_id) if run_id else None
        return record if isinstance(record, Run) else None

    def active_runs(self) -> list[Run]:
        return [r for r in self.runs.values() if isinstance(r, Run) and r.state.is_active]

    def queue_position(self, run_id: str) -> int | None:
        return self.queue.index(run_id) + 1 if run_id in self.queue else None

    def elapsed(self, run: Run) -> float | None:
        """The time the run has trained, its sessions added up: from the events when followed,
        else from the summary the trainer keeps in run.json (the earlier sessions' time and
        the latest session's start; a run from before those keys: first start to last end)."""
        feed = self.feeds.get(run.id)
        if feed is not None and feed.loaded and feed.metrics.session_started_time is not None:
            return feed.metrics.elapsed_seconds(now=self.clock())
        summary = run.summary or {}
        process = run.process or {}
        before = summary.get("elapsed_before") or 0.0
        start = summary.get("session_started_at",
                            summary.get("started_at", process.get("requested_at")))
        if start is None:
            return None
        end = summary.get("ended_at") or process.get("ended_at")
        if end is None:
            if not run.state.is_active:
                return None
            end = self.clock()
        return before + max(0.0, end - start)

    def row(self, record: Run | DamagedRun) -> RunRow:
        if isinstance(record, DamagedRun):
            return RunRow(id=record.id, state="damaged", name=record.reason,
                          damaged=record.reason)
        run = record
        summary = run.summary or {}
        row = RunRow(
            id=run.id, state=run.state.value, name=run.name, method=run.method.value,
            objective=run.objective, model=run.model, data=run.data, step=summary.get("step"),
            iters=run.planned_steps, train_loss=summary.get("last_train_loss"),
            reward_mean=summary.get("reward_mean"), val_loss=summary.get("last_val_loss"),
            tokens_per_second=summary.get("tokens_per_second"),
            elapsed=self.elapsed(run), queue_position=self.queue_position(run.id),
            group=run.group,
        )
        feed = self.feeds.get(run.id)
        if feed is not None and feed.loaded and feed.metrics.started is not None:
            metrics = feed.metrics
            row.step = metrics.step
            row.train_loss = metrics.series["train_loss"].last
            row.reward_mean = metrics.series["reward_mean"].last
            row.val_loss = metrics.series["val_loss"].last
            row.tokens_per_second = metrics.series["tokens_per_second"].last
            if run.state.is_active:
                row.eta = metrics.eta_seconds()
        return row

    def rows(self) -> list[RunRow]:
        return [self.row(record) for record in self.runs.values()]

    # -- feeds ------------------------------------------------------------------------------------

    def feed(self, run_id: str) -> RunFeed | None:
        return self.feeds.get(run_id)

    def open_feed(self, run_id: str) -> RunFeed:
        """The run's feed, loading its history if needed; hold it until `close_feed`."""
        self._open_counts[run_id] = self._open_counts.get(run_id, 0) + 1
        if run_id in self._closed_order:
            self._closed_order.remove(run_id)
        return self._feed_loaded(run_id)

    def close_feed(self, run_id: str) -> None:
        count = self._open_counts.get(run_id, 0) - 1
        if count > 0:
            self._open_counts[run_id] = count
            return
        self._open_counts.pop(run_id, None)
        if run_id in self.feeds:
            self._closed_order.append(run_id)
        self._trim_feeds()

    def _feed_loaded(self, run_id: str) -> RunFeed:
        feed = self.feeds.get(run_id)
        if feed is None:
            feed = self.feeds[run_id] = RunFeed(run_id)
        if not feed.loaded and run_id not in self._loading:
            self._loading.add(run_id)
            path = self.store.events_path(run_id)

            def load() -> None:
                try:
                    history = load_history(path, parallel=True)
                except Exception as error:
                    log.exception("loading %s failed", path)
                    self.app.call_from_thread(self._load_failed, feed, error)
                    return
                self.app.call_from_thread(self._history_loaded, feed, history)
            self.app.run_worker(load, thread=True, group="load-history",
                                name=f"load events of {run_id}", exit_on_error=False)
        return feed

    def _load_failed(self, feed: RunFeed, error: Exception) -> None:
        self._loading.discard(feed.run_id)
        self.app.notify(f"Cannot read the events of run {feed.run_id}: {error}",
                        severity="error", title="Run")

    def _history_loaded(self, feed: RunFeed, history) -> None:
        self._loading.discard(feed.run_id)
        if self.feeds.get(feed.run_id) is not feed:
            return  # dropped while loading
        feed.adopt(history)
        self.app.post_message(MetricsReceived(feed.run_id))
        run = self.run(feed.run_id)
        if run is not None and (run.state.is_active or run.state is RunState.QUEUED):
            self._follow(feed)

    def _ensure_followed(self, run_id: str) -> None:
        feed = self._feed_loaded(run_id)
        if feed.loaded and not feed.following:
            self._follow(feed)

    def _follow(self, feed: RunFeed) -> None:
        feed.following = True
        self.app.run_worker(self._follow_events(feed), group="follow",
                            name=f"follow {feed.run_id}", exit_on_error=False)

    async def _follow_events(self, feed: RunFeed) -> None:
        run_id = feed.run_id
        try:
            async for batch in self.supervisor.follow_batches(
                    run_id, poll=FOLLOW_POLL_SECONDS, from_offset=feed.offset):
                feed.ingest(batch)
                self.app.post_message(MetricsReceived(run_id))
                for event in batch:
                    if event.get("type") == ev.WARNING and event.get("code") == DIVERGED:
                        self.app.post_message(RunWarned(run_id, str(event.get("message"))))
        except asyncio.CancelledError:  # the dashboard is closing
            feed.following = False
            raise
        except UserError as error:  # the run was deleted while followed
            log.info("stopped following %s: %s", run_id, error)
        feed.following = False
        # follow_batches keeps its offset to itself; it ends when the run has ended, when
        # nothing is appended any more, so the complete part of the file is what it read.
        feed.offset = complete_size(self.store.events_path(run_id))
        self.poll_now()

    def _trim_feeds(self) -> None:
        keep = set(self._open_counts) | set(self._closed_order[-KEEP_CLOSED_FEEDS:])
        keep |= {run_id for run_id, feed in self.feeds.items() if feed.following}
        keep |= {r.id for r in self.active_runs()}
        for run_id in list(self.feeds):
            if run_id not in keep:
                del self.feeds[run_id]
        self._closed_order = [r for r in self._closed_order if r in self.feeds]

    # -- actions ----------------------------------------------------------------------------------

    def act(self, title: str, operation: Callable[[], Any],
            done: Callable[[Any], None] | None = None) -> None:
        """Run `operation` in a worker thread; its UserError becomes a notification."""
        def work() -> None:
            try:
                result = operation()
            except UserError as error:
                self.app.call_from_thread(self.app.notify, error.message, title=title,
                                          severity="error", timeout=10)
            except Exception as error:
                log.exception("%s failed", title)
                self.app.call_from_thread(
                    self.app.notify, f"{type(error).__name__}: {error}",
                    title=f"{title} failed unexpectedly", severity="error", timeout=10)
            else:
                if done is not None:
                    self.app.call_from_thread(done, result)
            finally:
                self.app.call_from_thread(self.poll_now)
        self.app.run_worker(work, thread=True, group="actions", name=title,
                            exit_on_error=False)

    def start(self, run_id: str) -> None:
        def started(run: Run) -> None:
            position = self.supervisor.queue.position(run.id)
            self.app.notify(f"{run.name} is {run.state.value}"
                            + (f" (queue position {position})" if position else "") + ".",
                            title="Start")
        self.act("Start", lambda: self.supervisor.start(run_id, queue_if_busy=True), started)

    def cancel(self, run_id: str) -> None:
        def cancelled(run: Run) -> None:
            if run.state is RunState.CONFIGURED:
                self.app.notify(f"{run.name} left the queue.", title="Cancel")
            else:
                self.app.notify(f"Cancelling {run.name}: it saves a checkpoint and stops.",
                                title="Cancel")
        self.act("Cancel", lambda: self.supervisor.cancel(run_id), cancelled)

    def resume(self, run_id: str, step: int | None = None) -> None:
        def resumed(run: Run) -> None:
            self.app.notify(f"{run.name} resumes {resume_point(run)} ({run.state.value}).",
                            title="Resume")
        self.act("Resume", lambda: self.supervisor.resume(run_id, step, queue_if_busy=True),
                 resumed)

    def fork(self, run_id: str, step: int, done: Callable[[Run], None] | None = None) -> None:
        def forked(run: Run) -> None:
            self.app.notify(f"New run {run.name} ({run.id}), configured; start it with s on the "
                            "Runs screen.", title="Fork")
            if done is not None:
                done(run)
        self.act("Fork", lambda: self.supervisor.fork(run_id, step), forked)

    def delete_checkpoint(self, run_id: str, checkpoint, done: Callable[[], None]) -> None:
        def delete() -> int:
            delete_checkpoint(checkpoint)
            return checkpoint.step

        def deleted(step: int) -> None:
            self.app.notify(f"Deleted the checkpoint of step {step}.", title="Checkpoints")
            done()
        self.act("Delete checkpoint", delete, deleted)

    def apply_retention(self, run_id: str, done: Callable[[], None] | None = None) -> None:
        """Prune a completed run's checkpoints by its policy (nothing for another state)."""
        feed = self.feeds.get(run_id)
        best = feed.metrics.best_checkpoint_step() if feed is not None and feed.loaded else None

        def pruned(steps: list[int]) -> None:
            if steps:
                self.app.notify(f"Retention removed {len(steps)} checkpoint(s) of run {run_id} "
                                f"(steps {', '.join(map(str, steps))}).", title="Checkpoints")
            if done is not None:
                done()
        self.act("Retention", lambda: apply_retention(self.store, run_id, best), pruned)

    # -- the sample -------------------------------------------------------------------------------

    def build_sample(self) -> None:
        if self.sample_building:
            return
        self.sample_building = True
        self.app.post_message(SampleChanged())
        home = self.store.home

        def built(result: dict) -> None:
            self.sample_ready = True
            self.app.notify("The sample model is ready: t on the runs list trains it, and "
                            "it is in the new-run form's models (n).", title="Sample")

        def build() -> dict:
            try:
                return build_sample(home)
            finally:
                self.app.call_from_thread(self._sample_build_over)
        self.act("Build the sample model", build, built)

    def _sample_build_over(self) -> None:
        self.sample_building = False
        self.sample_ready = sample_exists(self.store.home)
        self.app.post_message(SampleChanged())

    def train_sample(self, done: Callable[[Run], None] | None = None) -> None:
        home = self.store.home

        def create_and_start() -> Run:
            if not sample_exists(home):
                raise UserError("The sample model is not built yet: press b to build it.")
            run = RunDraft.from_choices(
                model=str(sample_model_path(home)), data=str(sample_dataset("completions")),
                settings=dict(SAMPLE_RUN_SETTINGS), name="sample completions").to_run()
            self.store.ensure()
            self.store.create(run)
            return self.supervisor.start(run.id, queue_if_busy=True)

        def started(run: Run) -> None:
            self.app.notify(f"Training {run.name} ({run.hyperparameters.iters} steps).",
                            title="Sample")
            if done is not None:
                done(run)
        self.act("Train the sample", create_and_start, started)


def _background(function: Callable[[], Any]) -> Future:
    """Run `function` in a thread of its own now; its result (or exception) in the Future."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(function())
        except BaseException as error:  # handed to whoever waits on the future
            future.set_exception(error)
    threading.Thread(target=run, name="zyquo first store read", daemon=True).start()
    return future
