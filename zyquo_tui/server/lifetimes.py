"""When the server's sessions, training models and samplers end, and how their memory goes.

The server is the one long-lived process of a machine that serves for days, so nothing it keeps
may pile up:
- a session ends when its program finishes it or sends no heartbeat for HEARTBEAT_TIMEOUT; its
  training models (their runs end: completed, or interrupted) and samplers are freed with it;
- a training model or sampler that is not used for `idle_seconds` (from the end of its
  last work: none waiting or under way; looking it up is no use) is freed though its session lives on (a program that
  keeps beating but stopped using them);
- each training model keeps its SNAPSHOTS_KEPT newest save_weights_and_get_sampling_client
  samplers (an RL loop makes one a step, each a copy of the weights); older ones are freed;
- a finished session is forgotten `idle_seconds` after it ended;
- a base model loaded for sampling goes once no sampler uses it.
A freed id answers 410 with the sentence of why (kept for the GONE_KEPT latest), then 404.

Freeing drops the server's references on the event loop, then the MLX thread (after the work
queued before, which may still hold them) collects the garbage, hands MLX's cached buffers
back (mx.clear_cache) and, with glibc, the heap's free pages (malloc_trim: freed small blocks
otherwise stay in the process for good), and lets the machine go once nothing is loaded
(server/ledger.py).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zyquo_tui.server.service import Service
    from zyquo_tui.server.state import Session

# A session whose program sends no heartbeat for this long is gone (the SDK sends one every
# 10 s); its runs are marked interrupted and its models freed.
HEARTBEAT_TIMEOUT = float(os.environ.get("ZYQUO_TINKER_HEARTBEAT_TIMEOUT", "120"))
SNAPSHOTS_KEPT = 8  # save_weights_and_get_sampling_client samplers kept per training model
GONE_KEPT = 10_000  # freed ids whose sentence of why is kept (about 200 bytes each)


def idle_seconds(given: float) -> float:
    """The idle time: ZYQUO_TINKER_IDLE_SECONDS (tests), else the caller's."""
    from_env = os.environ.get("ZYQUO_TINKER_IDLE_SECONDS")
    return float(from_env) if from_env else float(given)


class Lifetimes:
    """Ends sessions, training models and samplers, frees their memory, and remembers why."""

    def __init__(self, service: Service, idle: float) -> None:
        self.service = service
        self.idle = idle
        self.heartbeat_timeout = HEARTBEAT_TIMEOUT
        self.gone: OrderedDict[str, str] = OrderedDict()  # freed id: why, in one sentence

    # -- what was freed ---------------------------------------------------------------------

    def bury(self, thing_id: str, sentence: str) -> None:
        self.gone[thing_id] = sentence
        self.gone.move_to_end(thing_id)
        while len(self.gone) > GONE_KEPT:
            self.gone.popitem(last=False)

    def why_gone(self, thing_id: str) -> str | None:
        return self.gone.get(thing_id)

    # -- ending (on the event loop) -----------------------------------------------------------

    def end_session(self, session: Session, state, why: str, failure=None) -> None:
        """Its runs end in `state` (a cancel asked for wins; a FAILED one with `failure`), its
        models and samplers go."""
        session.finished = True
        session.finished_at = time.monotonic()
        for model_id in list(session.models):
            self.end_model(model_id, state, why, failure)
        for sampler_id in list(session.samplers):
            self.drop_sampler(sampler_id, f"Sampling session {sampler_id} was freed: {why}.")
        self.free()

    def end_model(self, model_id: str, state, why: str, failure=None) -> None:
        service = self.service
        model = service.models.pop(model_id, None)
        if model is None:
            return
        if model.error is None:
            model.error = f"Training model {model_id} is closed: {why}."
            service.end_run(model, state, failure)
        model.trained = None  # its memory goes once no queued work refers to it
        session = service.sessions.get(model.session_id)
        if session is not None and model_id in session.models:
            session.models.remove(model_id)
        self.bury(model_id, model.error)

    def drop_sampler(self, sampler_id: str, sentence: str) -> None:
        sampler = self.service.samplers.pop(sampler_id, None)
        if sampler is None:
            return
        sampler.weights = None
        session = self.service.sessions.get(sampler.session_id or "")
        if session is not None and sampler_id in session.samplers:
            session.samplers.remove(sampler_id)
        owner = self.service.models.get(sampler.owner or "")
        if owner is not None and sampler_id in owner.snapshots:
            owner.snapshots.remove(sampler_id)
        self.bury(sampler_id, sentence)

    def snapshot_made(self, owner_id: str, sampler_id: str) -> None:
        """A training model's newest snapshot sampler; the oldest beyond SNAPSHOTS_KEPT go."""
        owner = self.service.models.get(owner_id)
        if owner is None:
            return
        owner.snapshots.append(sampler_id)
        freed = False
        while len(owner.snapshots) > SNAPSHOTS_KEPT:
            oldest = owner.snapshots[0]
            self.drop_sampler(oldest, (
                f"Sampling session {oldest} was freed: training model {owner_id} made "
                f"{SNAPSHOTS_KEPT} newer ones with save_weights_and_get_sampling_client, and "
                f"the server keeps the {SNAPSHOTS_KEPT} newest (save_weights_for_sampler "
                "keeps weights for good)."))
            if oldest in owner.snapshots:  # not a sampler any more: forget it all the same
                owner.snapshots.remove(oldest)
            freed = True
        if freed:
            self.free()

    def sweep(self) -> list[str]:
        """The watchdog's round: quiet sessions, idle models and samplers, closed models and
        long-finished sessions go; what happened, for the log."""
        from zyquo_tui.core.runs.run import RunState

        service, now, said = self.service, time.monotonic(), []
        for session in list(service.sessions.values()):
            if not session.finished and self._quiet(session, now):
                self.end_session(session, RunState.INTERRUPTED, "its program sent no heartbeat "
                                 f"for {self.heartbeat_timeout:.0f} s")
                said.append(f"session {session.id} sent no heartbeat: closed")
            elif session.finished and now - (session.finished_at or now) > self.idle:
                del service.sessions[session.id]
                self.bury(session.id, f"Session {session.id} has finished.")
        for model in list(service.models.values()):
            idle = model.submitted == model.finished and now - model.last_used > self.idle
            if model.error is not None and model.trained is None and (
                    not model.cancelled or idle):
                # Closed by a failed load, or cancelled and idle since (a cancelled model's
                # requests fail as requests until then): its sentence stays.
                self.end_model(model.id, RunState.INTERRUPTED, "")
                said.append(f"training model {model.id} freed: {model.error}")
            elif idle and model.error is None:
                self.end_model(model.id, RunState.INTERRUPTED,
                               f"it was not used for {self.idle:.0f} s, so its memory was "
                               "freed (make a new one from a saved state to go on)")
                said.append(f"training model {model.id} idle: freed")
        for sampler in list(service.samplers.values()):
            if sampler.submitted == sampler.finished and now - sampler.last_used > self.idle:
                self.drop_sampler(sampler.id, (
                    f"Sampling session {sampler.id} was freed: it was not used for "
                    f"{self.idle:.0f} s; make a new sampling client."))
                said.append(f"sampler {sampler.id} idle: freed")
        if said:
            self.free()
        return said

    def _quiet(self, session: Session, now: float) -> bool:
        """No heartbeat, no request and no work waiting or under way for the session for
        HEARTBEAT_TIMEOUT: a program that waits on a long load is not gone. (A new sampler
        alone is no sign of life: its sampling is.)"""
        service, last = self.service, session.last_heartbeat
        for model in [service.models.get(i) for i in session.models]:
            if model is not None:
                if model.submitted != model.finished:
                    return False
                last = max(last, model.last_used)
        for sampler in [service.samplers.get(i) for i in session.samplers]:
            if sampler is not None and sampler.submitted != sampler.finished:
                return False
        return now - last > self.heartbeat_timeout

    # -- freeing (on the MLX thread) ----------------------------------------------------------

    def free(self) -> None:
        """Queue the freeing on the MLX thread, after the work queued before it."""
        from zyquo_tui.client import worker

        worker.submit(self._free_now)

    def _free_now(self) -> None:
        import gc

        import mlx.core as mx

        self.service.prune_standalone()
        gc.collect()
        mx.clear_cache()
        _trim_heap()
        self.service.ledger.let_go_if_empty()

    def check_cancels(self) -> None:
        """On the MLX thread: a run cancelled in the store (`runs cancel`, the dashboard)
        whose program sends nothing more ends now, not at the program's next request; the
        next sweep frees its model."""
        from zyquo_tui.server.trained_model import RequestError

        for model in list(self.service.models.values()):
            if model.error is None and model.trained is not None:
                try:
                    self.service.trained(model)
                except RequestError:
                    pass


def _trim_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc only; elsewhere nothing)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
