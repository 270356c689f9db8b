"""What the server keeps between requests: sessions, training models, samplers and futures.

Every request that trains, saves, loads or samples becomes a future: its work is queued on the
process's one MLX thread (client/worker.py, shared with the step-level client) in the order
the requests came, and the program polls `retrieve_future` for its result, which waits here
for up to LONG_POLL seconds before answering `try_again` (so the SDK's poll loop does not
spin). A training model's requests arrive in its own order because the SDK sends each one
only once the one before was accepted.

This module runs on the server's event loop; whatever touches MLX is a function handed to
`_on_mlx`, run on the MLX thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from zyquo_tui.core.store.serve_settings import ServeSettings
from zyquo_tui.server.trained_model import (ModelSpec, RequestError, TrainedModel,
                                            read_description, read_weights)

LONG_POLL = 20.0  # seconds a retrieve_future waits for its result before "try_again"
KEPT_RESULTS = 4096  # finished results kept for a late or repeated retrieve
# A session whose program sends no heartbeat for this long is gone (the SDK sends one every
# 10 s); its runs are marked interrupted and its models freed.
HEARTBEAT_TIMEOUT = float(os.environ.get("ZYQUO_TINKER_HEARTBEAT_TIMEOUT", "120"))


class UserFacing(Exception):
    """An error a request answers with at once: HTTP status and one sentence."""

    def __init__(self, status: int, sentence: str) -> None:
        super().__init__(sentence)
        self.status = status
        self.sentence = sentence


@dataclass
class Session:
    id: str
    last_heartbeat: float = field(default_factory=time.monotonic)
    models: list[str] = field(default_factory=list)
    finished: bool = False


@dataclass
class TrainingModel:
    id: str
    session_id: str
    spec: ModelSpec
    trained: TrainedModel | None = None  # set once loaded (create_model's future)
    error: str | None = None  # why it can take no more requests
    record: Any = None  # its run in the store (server/run_record.py), once loaded
    name_counter: itertools.count = field(default_factory=itertools.count)


@dataclass
class Sampler:
    id: str
    base_model: str
    model_path: str | None
    owner: str | None = None  # the training model whose weights it samples
    weights: Any = None  # a snapshot of the owner's weights, or the saved ones (MLX arrays)
    spec: ModelSpec | None = None


def tinker_path(run_id: str, kind: str, name: str) -> str:
    return f"tinker://{run_id}/{kind}/{name}"


class Service:
    def __init__(self, home: Path, models_home: Path | None = None,
                 limits: ServeSettings | None = None) -> None:
        self.home = home
        self.limits = limits or ServeSettings()  # config.toml [serve]
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, TrainingModel] = {}
        self.samplers: dict[str, Sampler] = {}
        self.results: OrderedDict[str, asyncio.Future] = OrderedDict()
        self._standalone: dict[tuple, TrainedModel] = {}  # sampler models by spec

    # -- futures ---------------------------------------------------------------------------------

    def _on_mlx(self, fn: Callable, *args: Any) -> str:
        """Queue fn(*args) on the MLX thread; the id of its future."""
        from zyquo_tui.client import worker

        return self._register(worker.submit(fn, *args))

    def _register(self, outcome: concurrent.futures.Future) -> str:
        request_id = uuid.uuid4().hex
        self.results[request_id] = asyncio.wrap_future(outcome)
        while len(self.results) > KEPT_RESULTS:
            self.results.popitem(last=False)
        return request_id

    async def result(self, request_id: str) -> tuple[str, Any]:
        """("pending", None), ("ok", payload) or ("failed", (sentence, category))."""
        future = self.results.get(request_id)
        if future is None:
            raise UserFacing(404, f"No request {request_id} is known to this server (it may "
                             "have restarted since): submit the request again.")
        try:
            payload = await asyncio.wait_for(asyncio.shield(future), LONG_POLL)
        except asyncio.TimeoutError:
            return "pending", None
        except RequestError as error:
            return "failed", (str(error), "user")
        except Exception as error:  # noqa: BLE001 - the program gets the reason, not a hang
            return "failed", (f"{type(error).__name__}: {error}", "server")
        return "ok", payload

    # -- sessions --------------------------------------------------------------------------------

    def create_session(self) -> str:
        session = Session(uuid.uuid4().hex[:16])
        self.sessions[session.id] = session
        return session.id

    def session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise UserFacing(404, f"No session {session_id} is known to this server (it may "
                             "have restarted, or the program went quiet too long): make a new "
                             "ServiceClient.")
        return session

    def heartbeat(self, session_id: str) -> None:
        session = self.session(session_id)
        if session.finished:
            raise UserFacing(410, f"Session {session_id} has finished.")
        session.last_heartbeat = time.monotonic()

    def finish_session(self, session_id: str) -> None:
        session = self.session(session_id)
        session.finished = True
        from zyquo_tui.core.runs.run import RunState

        for model_id in session.models:
            if model_id in self.models and self.models[model_id].error is None:
                self._end_run(self.models[model_id], RunState.COMPLETED)
            self._release(model_id, "the program finished its session")

    def _release(self, model_id: str, why: str) -> None:
        model = self.models.get(model_id)
        if model is not None and model.error is None:
            model.error = f"Training model {model_id} is closed: {why}."
            model.trained = None  # its memory goes once no queued work refers to it

    # -- training models -------------------------------------------------------------------------

    def model(self, model_id: str) -> TrainingModel:
        model = self.models.get(model_id)
        if model is None:
            raise UserFacing(404, f"No training model {model_id} is known to this server: "
                             "make one with create_lora_training_client.")
        if model.error is not None:
            raise UserFacing(410, model.error)
        session = self.sessions.get(model.session_id)
        if session is not None:  # a request is as good as a heartbeat
            session.last_heartbeat = time.monotonic()
        return model

    def create_model(self, session_id: str, model_seq_id: int, spec: ModelSpec,
                     loaded_from: tuple[Path, bool] | None = None,
                     user_metadata: dict[str, Any] | None = None) -> tuple[str, str]:
        """(model id, request id); the model loads on the MLX thread. `user_metadata` is the
        program's, kept with its run for get_training_run."""
        session = self.session(session_id)
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
                self._memory_gate(spec)
                trained = TrainedModel.load(spec)
                if loaded_from is not None:
                    trained.run_as_own(trained.load_state, *loaded_from)
                model.record = RunRecord(RunStore(self.home), trained.run,
                                         f"tinker {spec.base_model} ({session_id})",
                                         spec.to_json(), user_metadata)
            except BaseException as error:
                model.error = f"Training model {model_id} could not be made: {error}"
                raise
            if model.error is None:  # not closed while it loaded
                model.trained = trained
            if loaded_from is not None:  # answers the load_weights that made it
                return {"model_id": model_id, "path": None, "type": "load_weights"}
            return {"model_id": model_id, "type": "create_model"}

        return model_id, self._on_mlx(load)

    def _memory_gate(self, spec: ModelSpec) -> None:
        """The memory verdict runs get before they start, before a model is loaded: one that
        won't fit this machine is refused with the verdict's sentence."""
        from zyquo_tui.core.errors import UserError
        from zyquo_tui.core.memory.advisor import MemoryAdvisor, gate
        from zyquo_tui.server.trained_model import checked_run

        try:
            gate(checked_run(spec, None), MemoryAdvisor.for_machine(self.home))
        except UserError as error:
            raise RequestError(error.message) from None

    def _trained(self, model: TrainingModel) -> TrainedModel:
        """The loaded model, checked on the MLX thread (where its creation finished): a run
        cancelled in the store ends it here, with the sentence the program gets."""
        from zyquo_tui.core.runs.run import RunState

        if model.error is None and model.record is not None and \
                model.record.cancel_requested():
            model.error = (f"Run {model.record.run_id} was cancelled (zyquo-tui runs cancel, or "
                           "the dashboard): this training client takes no more requests; make "
                           "a new one, from a saved state to go on.")
            model.record.end(RunState.CANCELLED, model.record.step)
            model.trained = None
        if model.error is not None:
            raise RequestError(model.error)
        assert model.trained is not None
        return model.trained

    def _end_run(self, model: TrainingModel, state) -> None:
        """On the MLX thread, after the model's queued work: its run ends in `state`."""
        def end() -> None:  # read now: the model's loading may have finished since
            if model.record is not None:
                model.record.end(state, model.record.step)

        self._on_mlx(end)

    def forward_backward(self, model_id: str, loss_fn: str, config: dict, data: list,
                         forward_only: bool) -> str:
        """Runs on the MLX thread as soon as the work before it is done, not held for the
        optim_step the program sends next: that request's round trip then overlaps this
        computation instead of delaying it (compiled with its update it would wait for the
        optim_step, and was no faster here: docs/tinker-server.md, "Throughput")."""
        model = self.model(model_id)
        call = (loss_fn, config, data, forward_only)

        def run() -> bytes:
            trained = self._trained(model)
            return self._forward_backward(model, trained, call)

        return self._on_mlx(run)

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
            trained = self._trained(model)
            metrics = trained.run_as_own(trained.optim_step, **params)
            if model.record is not None:
                model.record.optim_step(trained.engine.step, metrics["learning_rate:mean"])
            return {"metrics": metrics, "type": "optim_step"}

        return self._on_mlx(run)

    def info(self, model_id: str) -> dict[str, Any]:
        model = self.model(model_id)
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
            trained = self._trained(model)
            if kind == "weights":
                written = trained.run_as_own(trained.save_state, folder)
                if model.record is not None:
                    model.record.checkpoint(trained.engine.step, written)
                return {"path": path, "type": "save_weights"}
            trained.run_as_own(trained.save_weights, folder)
            return {"path": path, "type": "save_weights_for_sampler"}

        return self._on_mlx(run)

    def snapshot_sampler(self, model_id: str) -> str:
        """save_weights_and_get_sampling_client: a sampler of the weights as they are now."""
        model = self.model(model_id)
        sampler = Sampler(uuid.uuid4().hex[:16], model.spec.base_model, None, owner=model_id,
                          spec=model.spec)
        self.samplers[sampler.id] = sampler

        def run() -> dict[str, Any]:
            trained = self._trained(model)
            sampler.weights = trained.snapshot()
            return {"sampling_session_id": sampler.id, "type": "save_weights_for_sampler"}

        return self._on_mlx(run)

    def load_state(self, model_id: str, path: str, with_optimizer: bool) -> str:
        model = self.model(model_id)
        folder = self.folder_of(path)

        def run() -> dict[str, Any]:
            trained = self._trained(model)
            trained.run_as_own(trained.load_state, folder, with_optimizer)
            return {"path": path, "type": "load_weights"}

        return self._on_mlx(run)

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
                       resolve: Callable[[str], ModelSpec]) -> str:
        if model_path is not None:
            folder = self.folder_of(model_path)
            spec = read_description(folder)
            sampler = Sampler(uuid.uuid4().hex[:16], spec.base_model, model_path, spec=spec)
        elif base_model is not None:
            spec = resolve(base_model)
            sampler = Sampler(uuid.uuid4().hex[:16], base_model, None, spec=spec)
        else:
            raise UserFacing(400, "A sampling session needs base_model or model_path.")
        self.samplers[sampler.id] = sampler
        return sampler.id

    def sampler(self, sampler_id: str) -> Sampler:
        sampler = self.samplers.get(sampler_id)
        if sampler is None:
            raise UserFacing(404, f"No sampling session {sampler_id} is known to this server: "
                             "make a new sampling client.")
        return sampler

    def sample(self, sampler_id: str, prompt: list[int], num_samples: int,
               params: dict[str, Any], prompt_logprobs: bool, topk_prompt_logprobs: int = 0
               ) -> str:
        from zyquo_tui.server.wire import sample_response

        sampler = self.sampler(sampler_id)
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

        return self._on_mlx(run)

    def _standalone_model(self, sampler: Sampler) -> TrainedModel:
        """A model of its own for a sampler no live training model serves (on the MLX
        thread): the base with untrained adapters (which change nothing), and the saved
        weights when the sampler has a path."""
        spec = sampler.spec
        key = (spec.folder, spec.rank, spec.train_attn, spec.train_mlp)
        if key not in self._standalone:
            self._standalone[key] = TrainedModel.load(spec)
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
        return self._standalone[key]

    # -- the watchdog ------------------------------------------------------------------------------

    def quiet_sessions(self) -> list[Session]:
        """Sessions whose program sent nothing for HEARTBEAT_TIMEOUT: they are closed."""
        now = time.monotonic()
        gone = [s for s in self.sessions.values()
                if not s.finished and now - s.last_heartbeat > HEARTBEAT_TIMEOUT]
        from zyquo_tui.core.runs.run import RunState

        for session in gone:
            session.finished = True
            for model_id in session.models:
                if model_id in self.models and self.models[model_id].error is None:
                    self._end_run(self.models[model_id], RunState.INTERRUPTED)
                self._release(model_id, "its program sent no heartbeat for "
                              f"{HEARTBEAT_TIMEOUT:.0f} s")
        return gone
