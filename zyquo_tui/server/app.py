"""The HTTP routes the official `tinker` SDK calls (all under /api/v1/), on Starlette.

Request bodies are read with the SDK's own types: JSON with its pydantic request classes,
forward_backward's protobuf with its generated messages (server/wire.py). A body that cannot
be read gets a 400 with one sentence and the server goes on serving. Every route needs the
server's key in the `X-API-Key` header (401 otherwise). The routes and shapes are those of
tinker 0.38 (`tinker/resources/*.py`, `tinker/lib/public_interfaces/*.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Awaitable, Callable

import pydantic
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tinker import types

from zyquo_tui.core.store.server_key import key_matches
from zyquo_tui.server.service import HEARTBEAT_TIMEOUT, Service, UserFacing
from zyquo_tui.server.trained_model import ModelSpec
from zyquo_tui.server.training_runs import rest_routes
from zyquo_tui.server.wire import WireError, read_forward_backward

log = logging.getLogger(__name__)
PROTOBUF = "application/x-protobuf"
# Seconds between the watchdog's rounds (server/lifetimes.py): at most a fifth of the heartbeat
# timeout, so tests that shorten it see a quiet session closed soon after.
WATCHDOG_PERIOD = min(5.0, HEARTBEAT_TIMEOUT / 5)


def error(status: int, sentence: str) -> JSONResponse:
    return JSONResponse({"detail": sentence, "message": sentence}, status_code=status)


async def json_body(request: Request, kind: type[pydantic.BaseModel]) -> Any:
    """The body as the SDK's `kind`; UserFacing(400) with one sentence when it is not."""
    raw = await request.body()
    try:
        data = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as problem:
        raise UserFacing(400, f"The body of {request.url.path} is not JSON ({problem}).") from None
    try:
        return kind.model_validate(data)
    except pydantic.ValidationError as problem:
        first = problem.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        raise UserFacing(400, f"The body of {request.url.path} is not a {kind.__name__}: "
                         f"{where}: {first['msg']}.") from None


def future(request_id: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"request_id": request_id, **extra})


def make_app(service: Service, key: str, resolve: Callable[[str], ModelSpec],
             capabilities: Callable[[], list[dict[str, Any]]]) -> Starlette:
    """The server's ASGI app over `service`; `resolve` turns a base_model name into a
    ModelSpec (UserFacing when there is no such model), `capabilities` lists the models."""

    def route(path: str, handler: Callable[[Request], Awaitable[Response | dict]],
              methods: tuple[str, ...] = ("POST",)) -> Route:
        async def guarded(request: Request) -> Response:
            if not key_matches(request.headers.get("x-api-key"), key):
                return error(401, "This server needs its key in X-API-Key (set TINKER_API_KEY "
                             "to the key `zyquo-tui serve` printed).")
            try:
                answer = await handler(request)
            except UserFacing as problem:
                return error(problem.status, problem.sentence)
            except Exception as problem:  # noqa: BLE001 - logged, and the server goes on
                log.exception("%s failed", request.url.path)
                return error(500, f"{request.url.path} failed on the server: "
                             f"{type(problem).__name__}: {problem}.")
            return answer if isinstance(answer, Response) else JSONResponse(answer)

        return Route(f"/api/v1/{path}", guarded, methods=list(methods))

    # -- client setup and sessions -----------------------------------------------------------

    async def client_config(request: Request) -> dict:
        await json_body(request, types.ClientConfigRequest)
        # Defaults, but: plain httpx (no pyqwest), and forward_backward chunks one after
        # another, so a model's requests arrive in their order.
        return types.ClientConfigResponse(use_pyqwest_transport=False,
                                          parallel_fwdbwd_chunks=False).model_dump()

    async def dynamic_config(request: Request) -> dict:
        await json_body(request, types.ClientConfigRequest)
        return types.ClientDynamicConfigResponse().model_dump()

    async def healthz(request: Request) -> dict:
        return {"status": "ok"}

    async def server_capabilities(request: Request) -> dict:
        # Discovery reads folders: off the event loop, which other programs share.
        return {"supported_models": await asyncio.to_thread(capabilities)}

    async def create_session(request: Request) -> dict:
        await json_body(request, types.CreateSessionRequest)
        return {"type": "create_session", "session_id": service.create_session()}

    async def session_heartbeat(request: Request) -> dict:
        body = await json_body(request, types.SessionHeartbeatRequest)
        service.heartbeat(body.session_id)
        return {"type": "session_heartbeat"}

    async def finish_session(request: Request) -> dict:
        service.finish_session(request.path_params["session_id"])
        return {}

    async def telemetry(request: Request) -> dict:
        return {"status": "accepted"}

    # -- training ------------------------------------------------------------------------------

    async def create_model(request: Request) -> Response:
        body = await json_body(request, types.CreateModelRequest)
        lora = body.lora_config or types.LoraConfig(rank=32)
        if lora.rank < 1:
            raise UserFacing(400, f"LoRA rank must be at least 1, not {lora.rank}.")
        if body.optimizer_config.type != "adamw":
            raise UserFacing(400, f"This server trains with Adam only, not "
                             f"{body.optimizer_config.type}.")
        spec = resolve(body.base_model)
        spec.rank, spec.seed = lora.rank, lora.seed
        spec.train_mlp, spec.train_attn = lora.train_mlp, lora.train_attn
        spec.train_unembed = lora.train_unembed
        model_id, request_id = service.create_model(body.session_id, body.model_seq_id, spec,
                                                    user_metadata=body.user_metadata)
        return future(request_id, model_id=model_id)

    async def get_info(request: Request) -> dict:
        body = await json_body(request, types.GetInfoRequest)
        return service.info(body.model_id)

    async def forward_backward(request: Request) -> Response:
        raw = await request.body()
        if request.headers.get("content-encoding") == "zstd":
            import zstandard

            try:
                raw = zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 30)
            except zstandard.ZstdError as problem:
                raise UserFacing(400, f"The forward_backward body is not zstd ({problem}).")
        try:
            call = read_forward_backward(raw)
        except WireError as problem:
            raise UserFacing(400, str(problem)) from None
        request_id = service.forward_backward(call.model_id, call.loss_fn, call.config,
                                              call.data, call.forward_only)
        return future(request_id, model_id=call.model_id)

    async def optim_step(request: Request) -> Response:
        body = await json_body(request, types.OptimStepRequest)
        params = body.optim_params
        if not isinstance(params, types.AdamParams):
            raise UserFacing(400, "This server's optimizer is Adam: send AdamParams.")
        request_id = service.optim_step(body.model_id, {
            "learning_rate": params.learning_rate, "beta1": params.beta1,
            "beta2": params.beta2, "eps": params.eps, "weight_decay": params.weight_decay,
            "grad_clip_norm": params.grad_clip_norm})
        return future(request_id, model_id=body.model_id)

    async def save_weights(request: Request) -> Response:
        body = await json_body(request, types.SaveWeightsRequest)
        return future(service.save_state(body.model_id, body.path, "weights"),
                      model_id=body.model_id)

    async def save_weights_for_sampler(request: Request) -> Response:
        body = await json_body(request, types.SaveWeightsForSamplerRequest)
        if body.path is None:
            request_id = service.snapshot_sampler(body.model_id)
        else:
            request_id = service.save_state(body.model_id, body.path, "sampler_weights")
        return future(request_id, model_id=body.model_id)

    async def load_weights(request: Request) -> Response:
        body = await json_body(request, types.LoadWeightsRequest)
        if body.session_id is not None:  # a new training client made from the state
            if body.model_seq_id is None:
                raise UserFacing(400, "load_weights with a session_id needs model_seq_id.")
            request_id = service.create_model_from_state(body.session_id, body.model_seq_id,
                                                         body.path, body.optimizer,
                                                         user_metadata=body.user_metadata)
            return future(request_id)
        if body.model_id is None:
            raise UserFacing(400, "load_weights needs model_id, or session_id and "
                             "model_seq_id.")
        return future(service.load_state(body.model_id, body.path, body.optimizer),
                      model_id=body.model_id)

    # -- sampling ------------------------------------------------------------------------------

    async def create_sampling_session(request: Request) -> dict:
        body = await json_body(request, types.CreateSamplingSessionRequest)
        service.session(body.session_id)
        sampler_id = service.create_sampler(body.base_model, body.model_path, resolve,
                                            session_id=body.session_id)
        return {"type": "create_sampling_session", "sampling_session_id": sampler_id}

    async def get_sampler(request: Request) -> dict:
        sampler = service.sampler(request.path_params["sampler_id"])
        return {"sampler_id": sampler.id, "base_model": sampler.base_model,
                "model_path": sampler.model_path}

    async def asample(request: Request) -> Response:
        body = await json_body(request, types.SampleRequest)
        if body.sampling_session_id is None:
            if body.base_model is None and body.model_path is None:
                raise UserFacing(400, "asample needs a sampling_session_id, base_model or "
                                 "model_path.")
            sampler_id = service.create_sampler(body.base_model, body.model_path, resolve)
        else:
            sampler_id = body.sampling_session_id
        if body.num_samples < 1:
            raise UserFacing(400, f"num_samples must be at least 1, not {body.num_samples}.")
        try:
            prompt = body.prompt.to_ints()
        except ValueError as problem:
            raise UserFacing(400, f"The prompt must be tokens only: {problem}.") from None
        params = body.sampling_params
        stop = params.stop
        if isinstance(stop, str):
            stop = [stop]
        request_id = service.sample(sampler_id, prompt, body.num_samples, {
            "max_tokens": params.max_tokens, "seed": params.seed,
            "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
            "stop": None if stop is None else list(stop)}, bool(body.prompt_logprobs))
        return future(request_id, sample_sequence_ids=[f"{request_id}-{i}" for i in
                                                       range(body.num_samples)])

    # -- futures -------------------------------------------------------------------------------

    async def retrieve_future(request: Request) -> Response:
        body = await json_body(request, types.FutureRetrieveRequest)
        state, payload = await service.result(body.request_id)
        if state == "pending":
            return JSONResponse({"type": "try_again", "request_id": body.request_id,
                                 "queue_state": "active"})
        if state == "failed":
            sentence, category = payload
            return JSONResponse({"error": sentence, "category": category})
        if isinstance(payload, bytes):
            return Response(payload, media_type=PROTOBUF)
        return JSONResponse(payload)

    async def cancel_future(request: Request) -> dict:
        return {}

    routes = [
        route("client/config", client_config),
        route("client/dynamic_config", dynamic_config),
        route("healthz", healthz, ("GET",)),
        route("get_server_capabilities", server_capabilities, ("GET",)),
        route("create_session", create_session),
        route("session_heartbeat", session_heartbeat),
        route("sessions/{session_id}/finish", finish_session),
        route("telemetry", telemetry),
        route("create_model", create_model),
        route("get_info", get_info),
        route("forward_backward", forward_backward),
        route("optim_step", optim_step),
        route("save_weights", save_weights),
        route("save_weights_for_sampler", save_weights_for_sampler),
        route("load_weights", load_weights),
        route("create_sampling_session", create_sampling_session),
        route("samplers/{sampler_id}", get_sampler, ("GET",)),
        route("asample", asample),
        route("retrieve_future", retrieve_future),
        route("cancel_future", cancel_future),
    ]
    # The RestClient's training runs and checkpoints, from the run store.
    routes += [route(path, handler, methods)
               for path, handler, methods in rest_routes(service.home, json_body)]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        period = min(WATCHDOG_PERIOD, service.lifetimes.idle / 5)

        async def watch() -> None:
            while True:
                await asyncio.sleep(period)
                try:
                    for line in service.sweep():
                        log.warning("%s", line)
                except Exception:  # noqa: BLE001 - a round that fails must not end the rounds
                    log.exception("the watchdog's round failed")

        task = asyncio.create_task(watch())
        try:
            yield
        finally:  # SIGTERM or ctrl+c: uvicorn stopped serving; the served runs end here
            task.cancel()
            await service.shut_down()

    return Starlette(routes=routes, lifespan=lifespan)
