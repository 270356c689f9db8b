"""Client setup and sessions: the SDK's configuration, health, the models offered, sessions
and their heartbeats, telemetry."""

from __future__ import annotations

import asyncio
import json

from starlette.requests import Request
from tinker import types

from zyquo_tui.server.requests import RouteSpec, backend, json_body, read_body
from zyquo_tui.server.service import UserFacing


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


SESSION_OUTCOMES = ("success", "errored", "interrupted")


def one_line(value, limit: int = 500) -> str:
    """A program's text as one line of at most `limit` characters (it goes into run.json)."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


async def finish_session(request: Request) -> dict:
    """`ServiceClient.close(status, detail)`: {"reason": {"type": status}, "detail": ...}; a
    body without a reason finishes it as a success (older SDKs send none)."""
    raw = await read_body(request)
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserFacing(400, "The body of a session's finish is not JSON.") from None
    reason = body.get("reason") if isinstance(body, dict) else None
    outcome = reason.get("type", "success") if isinstance(reason, dict) else "success"
    if outcome not in SESSION_OUTCOMES:
        raise UserFacing(400, f"A session finishes as {', '.join(SESSION_OUTCOMES)}, not "
                         f"{one_line(repr(outcome), 80)}.")
    detail = body.get("detail") if isinstance(body, dict) else None
    backend(request).service.finish_session(request.path_params["session_id"], outcome,
                                            one_line(detail) if detail else None)
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
