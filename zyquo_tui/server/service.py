"""The server's operations on its sessions, training models and samplers (server/state.py).

Every request that trains, saves, loads or samples becomes a future (server/futures.py): its
work is queued on the process's one MLX thread in the order the requests came. A training
model's requests arrive in its own order because the SDK sends each one only once the one
before was accepted. When things end and how their memory goes: server/lifetimes.py; the
memory they share with the machine's runs: server/ledger.py.

This module runs on the server's event loop; whatever touches MLX is a function handed to
`self.futures.submit`, run on the MLX thread.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from zyquo_tui.core.store.serve_settings import ServeSettings
from zyquo_tui.server.futures import Futures
from zyquo_tui.server.ledger import MemoryLedger
from zyquo_tui.server.lifetimes import HEARTBEAT_TIMEOUT, Lifetimes
from zyquo_tui.server.lifetimes import idle_seconds as idle_seconds_from
from zyquo_tui.server.state import Sampler, Session, TrainingModel, UserFacing, tinker_path
from zyquo_tui.server.trained_model import (ModelSpec, RequestError, TrainedModel,
                                            read_description, read_weights)

__all__ = ["HEARTBEAT_TIMEOUT", "Service", "UserFacing"]


class Service:
    def __init__(self, home: Path, models_home: Path | None = None,
                 limits: ServeSettings | None = None) -> None:
        """`limits`: config.toml's [serve], among them idle_seconds, how long a training model
        or sampler may go unused before it is freed (ZYQUO_TINKER_IDLE_SECONDS overrides it)."""
        self.home = home
        self.limits = limits or ServeSettings()  # config.toml [serve]
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, TrainingModel] = {}
        self.samplers: dict[str, Sampler] = {}
        self.futures = Futures()
        # Base models loaded for samplers no live training model serves, by spec, with the
        # bytes the ledger counts for each (the MLX thread's alone).
        self._standalone: dict[tuple, tuple[TrainedModel, int]] = {}
        self.lifetimes = Lifetimes(self, idle_seconds_from(self.limits.idle_seconds))
        self.ledger = MemoryLedger(home, self.loaded_bytes)

    async def result(self, request_id: str) -> tuple[str, Any]:
        """("pending", None), ("ok", payload) or ("failed", (sentence, category))."""
        return await self.futures.result(request_id)

    # -- sessions --------------------------------------------------------------------------------

    def create_session(self) -> str:
        session = Session(uuid.uuid4().hex[:16])
        self.sessions[session.id] = session
        return session.id

    def session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            gone = self.lifetimes.why_gone(session_id)
            if gone is not None:
                raise UserFacing(410, gone)
            raise UserFacing(404, f"No session {session_id} is known to this server (it may "
                             "have restarted, or the program went quiet too long): make a new "
                             "ServiceClient.")
        return session

    def heartbeat(self, session_id: str) -> None:
        session = self.session(session_id)
        if session.finished:
            raise UserFacing(410, f"Session {session_id} has finished.")
        session.last_heartbeat = time.monotonic()

    def finish_session(self, session_id: str, outcome: str = "success",
                       detail: str | None = None) -> None:
        """The program closed its session (`ServiceClient.close(status, detail)`): its runs
        end completed, failed (cause `program`, the detail its message) or interrupted."""
        from zyquo_tui.core.runs.failures import failure
        from zyquo_tui.core.runs.run import RunState

        session = self.session(session_id)
        if session.finished:
            return
        said = f": {detail}" if detail else ""
        if outcome == "errored":
            self.lifetimes.end_session(
                session, RunState.FAILED, "the program closed its session as errored",
                failure("program", f"The program closed its session as errored{said}."))
        elif outcome == "interrupted":
            self.lifetimes.end_session(session, RunState.INTERRUPTED,
                                       f"the program closed its session as interrupted{said}")
        else:
            self.lifetimes.end_session(session, RunState.COMPLETED,
                                       "the program finished its session")

    # -- training models -------------------------------------------------------------------------

    def model(self, model_id: str, use: bool = True) -> TrainingModel:
        """The live training model; with `use`, the request uses it (not idle, and as good as
        a heartbeat); a lookup (get_info) does not."""
        model = self.models.get(model_id)
        if model is None:
            gone = self.lifetimes.why_gone(model_id)
            if gone is not None:
                raise UserFacing(410, gone)
            raise UserFacing(404, f"No training model {model_id} is known to this server: "
                             "make one with create_lora_training_client.")
        if model.error is not None and not model.cancelled:
            raise UserFacing(410, model.error)
        if use:
            model.last_used = time.monotonic()
            session = self.sessions.get(model.session_id)
            if session is not None:  # a request is as good as a heartbeat
                session.last_heartbeat = model.last_used
        return model

    def create_model(self, session_id: str, model_seq_id: int, spec: ModelSpec,
                     loaded_from: tuple[Path, bool] | None = None,
                     user_metadata: dict[str, Any] | None = None) -> tuple[str, str]:
        """(model id, request id); the model loads on the MLX thread. `user_metadata` is the
        program's, kept with its run for get_training_run."""
        session = self.session(session_id)
        if session.finished:
            raise UserFacing(410, f"Session {session_id} has finished.")
        model_id = f"{session_id}:train:{model_seq_id}"
        if model_id in self.models:
            raise UserFacing(409, f"Training model {model_id} exists already.")
        model = TrainingModel(model_id, session_id, spec)
        self.models[model_id] = model
        session.models.append(model_id)

        def load() -> dict[str, Any]:
            from zyquo_tui.core.store.store import RunStore
            from zyquo_tui.server.run_record import RunRecord

            try:
                model.judged = self._memory_gate(spec)
                memory = model.judged.memory
                model.estimate_bytes = int(memory["estimate_bytes"])
                trained = TrainedModel.load(spec)
                if loaded_from is not None:
                    trained.run_as_own(trained.load_state, *loaded_from)
                trained.run.memory = memory  # the verdict, with what was loaded beside it
                model.record = RunRecord(RunStore(self.home), trained.run,
                                         f"tinker {spec.base_model} ({session_id})",
                                         spec.to_json(), user_metadata)
            except BaseException as error:
                model.error = f"Training model {model_id} could not be made: {error}"
                self.ledger.let_go_if_empty()
                raise
            if model.error is None:  # not closed while it loaded (then its run's end and
                model.trained = trained  # the freeing are queued after this)
            if loaded_from is not None:  # answers the load_weights that made it
                return {"model_id": model_id, "path": None, "type": "load_weights"}
            return {"model_id": model_id, "type": "create_model"}

        return model_id, self.futures.submit(load, user=model)

    def _memory_gate(self, spec: ModelSpec):
        """The memory verdict runs get before they start, before a model is loaded, judged
        together with the models already loaded (server/ledger.py): one that won't fit is
        refused with the verdict's sentence. Takes the machine's active-run place."""
        return self.ledger.admit_training(spec)

    def loaded_bytes(self) -> list[int]:
        """The ledger's figure of each model loaded now (on the MLX thread)."""
        held = [m.estimate_bytes for m in list(self.models.values()) if m.trained is not None]
        return held + [size for _, size in list(self._standalone.values())]

    def trained(self, model: TrainingModel) -> TrainedModel:
        """The loaded model, checked on the MLX thread (where its creation finished): a run
        cancelled in the store ends it here, with the sentence the program gets."""
        from zyquo_tui.core.runs.run import RunState

        if model.error is None and model.record is not None and \
                model.record.cancel_requested():
            model.error = (f"Run {model.record.run_id} was cancelled (zyquo-tui runs cancel, or "
                           "the dashboard): this training client takes no more requests; make "
                           "a new one, from a saved state to go on.")
            model.cancelled = True
            model.record.end(RunState.CANCELLED, model.record.step)
            model.trained = None
        if model.error is not None:
            raise RequestError(model.error)
        assert model.trained is not None
        return model.trained

    def end_run(self, model: TrainingModel, state, failure=None) -> None:
        """On the MLX thread, after the model's queued work: its run ends in `state`."""
        from zyquo_tui.client import worker

        worker.submit(self.end_run_now, model, state, failure)

    def end_run_now(self, model: TrainingModel, state, failure=None) -> None:
        """Its run ends in `state`, or cancelled when a cancel was asked for (a run cancelled
        while its program sat idle is never later marked completed). On the MLX thread."""
        from zyquo_tui.core.runs.run import RunState

        record = model.record  # read now: the model's loading may have finished since
        if record is None:
            return
        if state is not RunState.CANCELLED and record.cancel_requested():
            state, failure = RunState.CANCELLED, None
        record.end(state, record.step, failure)

    def forward_backward(self, model_id: str, loss_fn: str, config: dict, data: list,
                         forward_only: bool) -> str:
        """Runs on the MLX thread as soon as the work before it is done, not held for the
        optim_step the program sends next: that request's round trip then overlaps this
        computation instead of delaying it (compiled with its update it would wait for the
        optim_step, and was no faster here: docs/tinker-server.md, "Throughput")."""
        model = self.model(model_id)
        if model.judged is not None:  # loaded: its rows judged before they are queued
            try:
                self.ledger.check_step(model.judged, model.estimate_bytes, data)
            except RequestError as refused:
                raise UserFacing(400, str(refused)) from None
        call = (loss_fn, config, data, forward_only)

        def run() -> bytes:
            trained = self.trained(model)
            return self._forward_backward(model, trained, call)

        return self.futures.submit(run, user=model)

    def _forward_backward(self, model: TrainingModel, trained: TrainedModel, call: tuple
                          ) -> bytes:
        from zyquo_tui.server.wire import forward_backward_output

        loss_fn, config, data, forward_only = call
        outputs, metrics = trained.run_as_own(trained.forward_backward, loss_fn, config, data,
                                              forward_only)
        if not forward_only and model.record is not None:
            model.record.forward_backward(metrics["loss:sum"], trained.last_tokens)
        return forward_backward_output(outputs, metrics)

    def optim_step(self, model_id: str, params: dict[str, float]) -> str:
        model = self.model(model_id)

        def run() -> dict[str, Any]:
            trained = self.trained(model)
            metrics = trained.run_as_own(trained.optim_step, **params)
            if model.record is not None:
                model.record.optim_step(trained.engine.step, metrics["learning_rate:mean"])
            return {"metrics": metrics, "type": "optim_step"}

        return self.futures.submit(run, user=model)

    def info(self, model_id: str) -> dict[str, Any]:
        model = self.model(model_id, use=False)
        return {"type": "get_info", "model_id": model_id, "is_lora": True,
                "lora_rank": model.spec.rank, "model_name": model.spec.base_model,
                "model_data": {"arch": None, "model_name": model.spec.base_model,
                               "tokenizer_id": model.spec.folder}}

    # -- weights ---------------------------------------------------------------------------------

    def run_id_of(self, model: TrainingModel) -> str:
        """The name a model's tinker:// paths start with: its run's id."""
        return model.record.run_id

    def folder_of(self, path: str) -> Path:
        """The folder a tinker:// path names in the store."""
        if not path.startswith("tinker://"):
            raise UserFacing(400, f"{path!r} is not a tinker:// path; give the path "
                             "save_state or save_weights_for_sampler returned.")
        parts = path[len("tinker://"):].split("/")
        if (len(parts) != 3 or parts[1] not in ("weights", "sampler_weights")
                or not all(p and p not in (".", "..") for p in parts)):
            raise UserFacing(400, f"{path!r} is not a path of this server; its paths look "
                             "like tinker://RUN/weights/NAME or tinker://RUN/sampler_weights/"
                             "NAME.")
        folder = self.checkpoint_folder(parts[0], parts[1], parts[2])
        try:
            found = folder.is_dir()
        except OSError:  # a name too long for the file system: nothing can be saved there
            found = False
        if not found:
            raise UserFacing(404, f"Nothing is saved at {path} (no folder {folder}).")
        return folder

    def checkpoint_folder(self, run_id: str, kind: str, name: str) -> Path:
        """Where a tinker:// path's files are: in its run's folder."""
        return self.home / "runs" / run_id / "tinker" / kind / name

    def save_state(self, model_id: str, name: str | None, kind: str) -> str:
        model = self.model(model_id)
        name = name or f"{kind}-{next(model.name_counter):06d}"
        if "/" in name or name in (".", ".."):
            raise UserFacing(400, f"The name {name!r} has a slash or is a dot; give a plain "
                             "name.")
        path = tinker_path(self.run_id_of(model), kind, name)
        folder = self.checkpoint_folder(self.run_id_of(model), kind, name)

        def run() -> dict[str, Any]:
            trained = self.trained(model)
            if kind == "weights":
                written = trained.run_as_own(trained.save_state, folder)
                if model.record is not None:
                    model.record.checkpoint(trained.engine.step, written)
                return {"path": path, "type": "save_weights"}
            trained.run_as_own(trained.save_weights, folder)
            return {"path": path, "type": "save_weights_for_sampler"}

        return self.futures.submit(run, user=model)

    def snapshot_sampler(self, model_id: str) -> str:
        """save_weights_and_get_sampling_client: a sampler of the weights as they are now."""
        model = self.model(model_id)
        sampler = Sampler(uuid.uuid4().hex[:16], model.spec.base_model, None, owner=model_id,
                          spec=model.spec, session_id=model.session_id)
        self.samplers[sampler.id] = sampler
        session = self.sessions.get(model.session_id)
        if session is not None:
            session.samplers.append(sampler.id)
        self.lifetimes.snapshot_made(model_id, sampler.id)

        def run() -> dict[str, Any]:
            trained = self.trained(model)
            if sampler.id in self.samplers:  # not freed while this waited
                sampler.weights = trained.snapshot()
            return {"sampling_session_id": sampler.id, "type": "save_weights_for_sampler"}

        return self.futures.submit(run, user=model)

    def load_state(self, model_id: str, path: str, with_optimizer: bool) -> str:
        model = self.model(model_id)
        folder = self.folder_of(path)

        def run() -> dict[str, Any]:
            trained = self.trained(model)
            trained.run_as_own(trained.load_state, folder, with_optimizer)
            return {"path": path, "type": "load_weights"}

        return self.futures.submit(run, user=model)

    def create_model_from_state(self, session_id: str, model_seq_id: int, path: str,
                                with_optimizer: bool,
                                user_metadata: dict[str, Any] | None = None) -> str:
        folder = self.folder_of(path)
        spec = read_description(folder)
        _, request_id = self.create_model(session_id, model_seq_id, spec,
                                          loaded_from=(folder, with_optimizer),
                                          user_metadata=user_metadata)
        return request_id

    # -- sampling --------------------------------------------------------------------------------

    def create_sampler(self, base_model: str | None, model_path: str | None,
                       resolve: Callable[[str], ModelSpec], session_id: str | None = None
                       ) -> str:
        """A sampler of saved weights or of a base model; it ends with `session_id`'s
        session (or when idle: server/lifetimes.py)."""
        if model_path is not None:
            folder = self.folder_of(model_path)
            spec = read_description(folder)
            sampler = Sampler(uuid.uuid4().hex[:16], spec.base_model, model_path, spec=spec)
        elif base_model is not None:
            spec = resolve(base_model)
            sampler = Sampler(uuid.uuid4().hex[:16], base_model, None, spec=spec)
        else:
            raise UserFacing(400, "A sampling session needs base_model or model_path.")
        session = self.sessions.get(session_id or "")
        if session is not None and session.finished:
            raise UserFacing(410, f"Session {session.id} has finished.")
        if session is not None:
            sampler.session_id = session.id
            session.samplers.append(sampler.id)
        self.samplers[sampler.id] = sampler
        return sampler.id

    def sampler(self, sampler_id: str) -> Sampler:
        sampler = self.samplers.get(sampler_id)
        if sampler is None:
            gone = self.lifetimes.why_gone(sampler_id)
            if gone is not None:
                raise UserFacing(410, gone)
            raise UserFacing(404, f"No sampling session {sampler_id} is known to this server: "
                             "make a new sampling client.")
        return sampler

    def sample(self, sampler_id: str, prompt: list[int], num_samples: int,
               params: dict[str, Any], prompt_logprobs: bool, topk_prompt_logprobs: int = 0
               ) -> str:
        from zyquo_tui.server.wire import sample_response

        sampler = self.sampler(sampler_id)
        sampler.last_used = time.monotonic()  # sampling uses it; a lookup does not
        session = self.sessions.get(sampler.session_id or "")
        if session is not None:  # a request is as good as a heartbeat
            session.last_heartbeat = sampler.last_used
        owner = self.models.get(sampler.owner) if sampler.owner else None

        def run() -> bytes:
            if owner is not None and owner.error is None and owner.trained is not None:
                trained = owner.trained
                weights = sampler.weights
            else:
                trained = self._standalone_model(sampler)
                weights = sampler.weights
            sequences, scored, top = trained.run_as_own(
                trained.sample, weights, prompt, num_samples, params, prompt_logprobs,
                topk_prompt_logprobs)
            return sample_response(sequences, scored,
                                   None if top is None else (top.token_ids, top.logprobs))

        return self.futures.submit(run, user=sampler)

    def _standalone_model(self, sampler: Sampler) -> TrainedModel:
        """A model of its own for a sampler no live training model serves (on the MLX
        thread): the base with untrained adapters (which change nothing), and the saved
        weights when the sampler has a path."""
        spec = sampler.spec
        key = sampler.standalone_key
        if key not in self._standalone:
            size = self.ledger.admit_sampler(spec)  # the machine taken, the memory judged
            try:
                self._standalone[key] = (TrainedModel.load(spec), size)
            except BaseException:
                self.ledger.let_go_if_empty()
                raise
        if sampler.weights is None and sampler.model_path is not None:
            folder = self.folder_of(sampler.model_path)
            from zyquo_tui.core.store.checkpoints import latest_resumable
            from zyquo_tui.trainer.checkpoints import adapter_file

            file = folder / "adapters.safetensors"
            if not file.is_file():
                latest = latest_resumable(folder)
                if latest is None:
                    raise RequestError(f"{sampler.model_path} holds no weights.")
                file = adapter_file(folder, latest.step)
            sampler.weights = read_weights(file)
        return self._standalone[key][0]

    def prune_standalone(self) -> None:
        """Base models no sampler uses go (on the MLX thread, before its freeing)."""
        used = {s.standalone_key for s in list(self.samplers.values())}
        for key in [k for k in self._standalone if k not in used]:
            del self._standalone[key]

    # -- the watchdog and the end ----------------------------------------------------------------

    def sweep(self) -> list[str]:
        """A watchdog round (server/lifetimes.py): what ended and was freed, for the log; and
        runs cancelled while their programs sit idle end (on the MLX thread)."""
        from zyquo_tui.client import worker

        said = self.lifetimes.sweep()
        worker.submit(self.lifetimes.check_cancels)
        return said

    async def shut_down(self, timeout: float = 30.0) -> None:
        """The server stops (SIGTERM, ctrl+c): each live model's run is marked interrupted
        (cancelled when a cancel was asked for) after the work queued before, and the machine
        is let go. Waits for the MLX thread up to `timeout`: a step under way finishes first."""
        from zyquo_tui.client import worker
        from zyquo_tui.core.runs.run import RunState

        for session in list(self.sessions.values()):
            if not session.finished:
                self.lifetimes.end_session(session, RunState.INTERRUPTED,
                                           "the server was stopped")
        done = worker.submit(self.ledger.let_go_if_empty)
        try:
            await asyncio.wait_for(asyncio.wrap_future(done), timeout)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - the process ends anyway
            pass
