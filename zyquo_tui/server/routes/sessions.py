"""Client setup and sessions: the SDK's configuration, health, the models offered, sessions
and their heartbeats, telemetry."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from tinker import types

from zyquo_tui.server.requests import RouteSpec, backend, json_body


async def client_config(request: Request) -> dict:
    await json_body(request, types.ClientConfigRequest)
    limits = backend(request).limits
    defaults = types.ClientConfigResponse()
    # Defaults, but: plain httpx (no pyqwest); forward_backward chunks one after another, so
    # a model's requests arrive in their order; and chunks the [serve] limits take, so the
    # SDK splits a large batch rather than sending what the server refuses (its size
    # estimate leaves out the protobuf's framing: half the body limit is the margin).
    return types.ClientConfigResponse(
        use_pyqwest_transport=False, parallel_fwdbwd_chunks=False,
        fwdbwd_max_chunk_len=min(defaults.fwdbwd_max_chunk_len, limits.max_datums),
        fwdbwd_max_chunk_bytes_count=min(defaults.fwdbwd_max_chunk_bytes_count,
                                         limits.max_body_bytes // 2)).model_dump()


async def dynamic_config(request: Request) -> dict:
    await json_body(request, types.ClientConfigRequest)
    return types.ClientDynamicConfigResponse().model_dump()


async def healthz(request: Request) -> dict:
    return {"status": "ok"}


async def server_capabilities(request: Request) -> dict:
    # Discovery reads folders: off the event loop, which other programs share.
    return {"supported_models": await asyncio.to_thread(backend(request).capabilities)}


async def create_session(request: Request) -> dict:
    await json_body(request, types.CreateSessionRequest)
    return {"type": "create_session", "session_id": backend(request).service.create_session()}


async def session_heartbeat(request: Request) -> dict:
    body = await json_body(request, types.SessionHeartbeatRequest)
    backend(request).service.heartbeat(body.session_id)
    return {"type": "session_heartbeat"}


async def finish_session(request: Request) -> dict:
    backend(request).service.finish_session(request.path_params["session_id"])
    return {}


async def telemetry(request: Request) -> dict:
    return {"status": "accepted"}


ROUTES: list[RouteSpec] = [
    ("client/config", client_config, ("POST",)),
    ("client/dynamic_config", dynamic_config, ("POST",)),
    ("healthz", healthz, ("GET",)),
    ("get_server_capabilities", server_capabilities, ("GET",)),
    ("create_session", create_session, ("POST",)),
    ("session_heartbeat", session_heartbeat, ("POST",)),
    ("sessions/{session_id}/finish", finish_session, ("POST",)),
    ("telemetry", telemetry, ("POST",)),
]
