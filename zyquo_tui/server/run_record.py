"""Each Tinker training client is a run in the store: listed by `runs list` and the dashboard
while the program trains, with its events (docs/EVENTS.md).

The server stands where a run's runner stands: run.json's `process` names the server as the
run's runner (`runner_pid`, `runner_start_time`), so readers take the run as alive while the
server lives and as interrupted once it is gone, and a cancel (`runs cancel`, the dashboard)
is a request the server sees before the model's next operation, as a runner sees it. There is
no trainer pid, so a cancel never signals the server itself.

Events: `started` when the model is made; at each optim_step a `train` event (the loss summed
over the step's forward_backward calls, Tinker's sum, and the learning rate the step applied);
a `checkpoint` at each save_state; `completed` when the program finishes its session,
`cancelled` on a cancel. A program that goes quiet leaves its run `interrupted`.

run.json's summary (what `runs list` shows: the step, the last loss) follows the steps, written
at most every SUMMARY_PERIOD seconds and at each checkpoint: each write locks, reads and
fsyncs the record, which a step every few milliseconds should not pay for.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from pathlib import Path

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.store.store import RunStore

SUMMARY_PERIOD = 2.0  # seconds between two writes of run.json's summary as the program trains
TINKER_DIR = "tinker"  # runs/RUN/tinker/: the program's checkpoints, and what it asked for
TRAINING_RUN_FILE = "training_run.json"


class RunRecord:
    def __init__(self, store: RunStore, run: Run, name: str, spec: dict | None = None,
                 user_metadata: dict | None = None) -> None:
        from zyquo_tui.core.system.liveness import identity

        me = identity(os.getpid())
        run.name = name
        run.data = ""
        run.state = RunState.RUNNING
        run.process = {"runner_pid": me["pid"], "runner_start_time": me["start_time"],
                       "host": me["host"], "served_by": "zyquo-tui serve"}
        self.store, self.run_id = store, run.id
        store.create(run)
        if spec is not None:
            self.describe(spec, user_metadata)
        self.events = ev.EventWriter(store.events_path(run.id))
        self.loss_since_step = 0.0
        self.tokens_since_step = 0
        self.trained_tokens = 0
        self.step = 0  # optimizer steps applied
        self.last_step_time = time.monotonic()
        self.summary: dict = {}
        self.summary_written = float("-inf")  # time.monotonic() of the last summary write
        self.events.write(ev.STARTED, pid=os.getpid(), host=socket.gethostname(),
                          versions={"python": platform.python_version()}, device="mlx",
                          parameters={}, dataset={"train": 0, "valid": 0}, iters=None,
                          resumed_from_step=None, config={}, world_size=1)

    def describe(self, spec: dict, user_metadata: dict | None) -> None:
        """What the program asked for (its base model by the name it gave, the LoRA settings,
        its user_metadata), kept for the RestClient's get_training_run
        (server/training_runs.py)."""
        from zyquo_tui.core.store.atomic import write_atomic

        folder = self.store.run_dir(self.run_id) / TINKER_DIR
        folder.mkdir(mode=0o700, exist_ok=True)
        about = {"base_model": spec["base_model"], "lora_rank": spec["rank"],
                 **{key: spec.get(key) for key in ("train_mlp", "train_attn", "train_unembed")},
                 "user_metadata": {str(k): str(v) for k, v in (user_metadata or {}).items()}
                 or None}
        write_atomic(folder / TRAINING_RUN_FILE, json.dumps(about, indent=2) + "\n")

    @property
    def adapters(self) -> Path:
        return self.store.adapters_dir(self.run_id)

    def forward_backward(self, loss: float, tokens: int) -> None:
        self.loss_since_step += loss
        self.tokens_since_step += tokens

    def optim_step(self, step: int, learning_rate: float) -> None:
        import mlx.core as mx

        self.step = step
        now = time.monotonic()
        seconds = max(now - self.last_step_time, 1e-9)
        self.trained_tokens += self.tokens_since_step
        self.events.write(ev.TRAIN, iteration=step, train_loss=self.loss_since_step,
                          learning_rate=learning_rate, iterations_per_second=1 / seconds,
                          tokens_per_second=self.tokens_since_step / seconds,
                          trained_tokens=self.trained_tokens,
                          peak_memory_bytes=int(mx.get_peak_memory()))
        self.summary.update(step=step, last_train_loss=self.loss_since_step,
                            tokens_per_second=self.tokens_since_step / seconds)
        self.loss_since_step, self.tokens_since_step, self.last_step_time = 0.0, 0, now
        if now - self.summary_written >= SUMMARY_PERIOD:
            self.write_summary()

    def write_summary(self) -> None:
        """run.json's summary as of the last step (what `runs list` and the runs table show)."""
        self.summary_written = time.monotonic()
        summary = dict(self.summary)

        def change(run: Run) -> None:
            run.summary = {**run.summary, **summary}
        try:
            self.store.update(self.run_id, change)
        except Exception:  # noqa: BLE001 - deleted meanwhile: nothing to show it in
            pass

    def checkpoint(self, step: int, written: dict) -> None:
        self.events.write(ev.CHECKPOINT, iteration=step,
                          adapter_file=Path(written["adapter_file"]).name,
                          latest=Path(written["latest"]).name,
                          state_files=[Path(p).name for p in written["state_files"]],
                          bytes=written["bytes"])
        if self.summary:
            self.write_summary()

    def cancel_requested(self) -> bool:
        """Whether a cancel was asked for (read again only when run.json changed: this is
        asked before every operation)."""
        try:
            seen = self.store.run_dir(self.run_id).joinpath("run.json").stat()
        except OSError:  # a run deleted meanwhile: nothing asked
            return False
        key = (seen.st_mtime_ns, seen.st_size, seen.st_ino)
        if key != getattr(self, "_seen", None):
            try:
                run = self.store.get(self.run_id)
            except Exception:  # noqa: BLE001 - unreadable meanwhile: asked next time
                return False
            self._seen = key
            self._cancelled = bool((run.process or {}).get("cancel_requested_at"))
        return self._cancelled

    def end(self, state: RunState, step: int, failure=None) -> None:
        """The run's terminal event and state, once (a later call changes nothing); a FAILED
        run's `failure` (core/runs/failures.py) says why."""
        if getattr(self, "ended", False):
            return
        self.ended = True
        if state is RunState.COMPLETED:
            self.events.write(ev.COMPLETED, iteration=step, summary={"step": step})
        elif state is RunState.CANCELLED:
            self.events.write(ev.CANCELLED, iteration=step, checkpoint=None)
        elif state is RunState.FAILED and failure is not None:
            self.events.write(ev.FAILED, iteration=step, **failure.to_dict(), traceback=[])
        self.events.close()

        def settle(run: Run) -> None:
            if not run.state.is_terminal:
                run.set_state(state)
                run.summary = {**run.summary, **self.summary, "step": step}
                if failure is not None:
                    run.failure = failure.to_dict()
        try:
            self.store.update(self.run_id, settle)
        except Exception:  # noqa: BLE001 - deleted meanwhile
            pass
