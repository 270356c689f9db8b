"""The HTTP routes the official `tinker` SDK calls (all under /api/v1/), on Starlette.

The routes live by area in server/routes/ (sessions, training, sampling, futures; the
RestClient's runs and checkpoints in server/training_runs.py), each a small function of the
request; what they share (the key guard, the bounded body reader, the one-sentence error) is
server/requests.py. This module assembles them. Request bodies are read with the SDK's own
types: JSON with its pydantic request classes, forward_backward's protobuf with its generated
messages (server/wire.py). A body that cannot be read, or asks for more than config.toml
[serve] allows, gets a 4xx with one sentence and the server goes on serving. Every route needs
the server's key in the `X-API-Key` header (401 otherwise). The routes and shapes are those of
tinker 0.38 (`tinker/resources/*.py`, `tinker/lib/public_interfaces/*.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from zyquo_tui.core.store.serve_settings import ServeSettings
from zyquo_tui.server.requests import Backend, error, json_body, route
from zyquo_tui.server.routes import futures, sampling, sessions, training
from zyquo_tui.server.service import HEARTBEAT_TIMEOUT, Service
from zyquo_tui.server.trained_model import ModelSpec
from zyquo_tui.server.training_runs import rest_routes

log = logging.getLogger(__name__)
# Seconds between the watchdog's rounds (server/lifetimes.py): at most a fifth of the heartbeat
# timeout, so tests that shorten it see a quiet session closed soon after.
WATCHDOG_PERIOD = min(5.0, HEARTBEAT_TIMEOUT / 5)


async def no_such_route(request: Request, problem: HTTPException) -> Response:
    """Starlette's own 404 and 405, as one sentence like every other refusal."""
    if problem.status_code == 405:
        return error(405, f"{request.url.path} does not take {request.method}; the tinker SDK "
                     "sends each route with its own method.")
    if problem.status_code == 404:
        return error(404, f"This server has no route {request.url.path} (it serves tinker "
                     "0.38's routes under /api/v1/).")
    return error(problem.status_code, str(problem.detail).rstrip(".") + ".")


def make_app(service: Service, key: str, resolve: Callable[[str], ModelSpec],
             capabilities: Callable[[], list[dict[str, Any]]],
             limits: ServeSettings | None = None) -> Starlette:
    """The server's ASGI app over `service`; `resolve` turns a base_model name into a
    ModelSpec (UserFacing when there is no such model), `capabilities` lists the models,
    `limits` bound each request (config.toml [serve]; its defaults when None)."""
    routes = [route(path, handler, methods)
              for area in (sessions, training, sampling, futures)
              for path, handler, methods in area.ROUTES]
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

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={404: no_such_route, 405: no_such_route})
    app.state.backend = Backend(service, key, resolve, capabilities, limits or ServeSettings())
    return app
