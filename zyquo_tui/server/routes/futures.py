"""Futures: every operation's result, polled by the SDK through retrieve_future."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from tinker import types

from zyquo_tui.server.requests import PROTOBUF, RouteSpec, backend, json_body


class ResultResponse(JSONResponse):
    """A result's JSON, NaN and infinity written as Python's json (which the SDK reads) does:
    a metric that overflowed is the program's to see, not a reason to fail the poll."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


async def retrieve_future(request: Request) -> Response:
    body = await json_body(request, types.FutureRetrieveRequest)
    state, payload = await backend(request).service.result(body.request_id)
    if state == "pending":
        return JSONResponse({"type": "try_again", "request_id": body.request_id,
                             "queue_state": "active"})
    if state == "failed":
        sentence, category = payload
        return JSONResponse({"error": sentence, "category": category})
    if isinstance(payload, bytes):
        return Response(payload, media_type=PROTOBUF)
    return ResultResponse(payload)


async def cancel_future(request: Request) -> dict:
    return {}


ROUTES: list[RouteSpec] = [
    ("retrieve_future", retrieve_future, ("POST",)),
    ("cancel_future", cancel_future, ("POST",)),
]
