"""What every route shares: the key guard, the bounded body reader and the one-sentence error.

A route is a small async function of the request (server/routes/); `route()` wraps it: the
key checked first (401), then the handler, whose UserFacing error becomes its status and
sentence. A request the server cannot serve is the request's fault and gets a 4xx; a 500 is
left for the server's own faults (logged with the traceback; the server goes on serving).

A body is read in pieces up to `[serve] max_body_bytes` (core/store/serve_settings.py), and
a zstd body (`Content-Encoding: zstd`, as the SDK sends a forward_backward) is decompressed
in pieces under the same cap: neither a large body nor a small one that expands to gigabytes
makes the server hold more than the cap.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import pydantic
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from zyquo_tui.core.store.serve_settings import ServeSettings
from zyquo_tui.core.store.server_key import key_matches
from zyquo_tui.server.service import Service, UserFacing
from zyquo_tui.server.trained_model import ModelSpec, RequestError

log = logging.getLogger(__name__)
PROTOBUF = "application/x-protobuf"
DECOMPRESSED_PIECE = 1 << 20  # bytes a zstd body is decompressed by

Handler = Callable[[Request], Awaitable[Response | dict]]
# (path under /api/v1/, handler, methods): what each routes module lists.
RouteSpec = tuple[str, Handler, tuple[str, ...]]


@dataclass
class Backend:
    """What the routes serve from, kept on the app (`app.state.backend`): the service, the
    models offered and the limits."""

    service: Service
    key: str
    resolve: Callable[[str], ModelSpec]  # a base_model name to a ModelSpec (or UserFacing)
    capabilities: Callable[[], list[dict[str, Any]]]
    limits: ServeSettings


def backend(request: Request) -> Backend:
    return request.app.state.backend


def error(status: int, sentence: str) -> JSONResponse:
    """The one-sentence answer of a refusal. What a request sent may be echoed in it (an
    unknown id): its newlines and control characters are written escaped, so the sentence
    stays one printable line."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in sentence)
    return JSONResponse({"detail": shown, "message": shown}, status_code=status)


def future(request_id: str, **extra: Any) -> JSONResponse:
    """The answer of a request whose result comes through retrieve_future."""
    return JSONResponse({"request_id": request_id, **extra})


def route(path: str, handler: Handler, methods: tuple[str, ...] = ("POST",)) -> Route:
    """`handler` at /api/v1/`path`, behind the key, its errors answered in one sentence."""

    async def guarded(request: Request) -> Response:
        if not key_matches(request.headers.get("x-api-key"), backend(request).key):
            return error(401, "This server needs its key in X-API-Key: set TINKER_API_KEY to "
                         "the key `zyquo-tui serve --show-key` prints.")
        try:
            answer = await handler(request)
        except UserFacing as problem:
            return error(problem.status, problem.sentence)
        except RequestError as problem:  # what the program asked cannot be done (a bad
            return error(400, str(problem))  # saved state's description, found at once)
        except ClientDisconnect:
            return error(400, f"The program closed the connection before {request.url.path}'s "
                         "body arrived.")
        except Exception as problem:  # noqa: BLE001 - logged, and the server goes on
            # A fault of the server's, never of the request (tests/functional/
            # test_tinker_server_faults.py sends hundreds of malformed ones and sees none).
            log.exception("%s failed", request.url.path)
            return error(500, f"{request.url.path} failed on the server: "
                         f"{type(problem).__name__}: {problem}.")
        return answer if isinstance(answer, Response) else JSONResponse(answer)

    return Route(f"/api/v1/{path}", guarded, methods=list(methods))


def _too_large(request: Request, limit: int, size: str = "") -> UserFacing:
    return UserFacing(413, f"The body of {request.url.path}{size} is larger than this server "
                      f"takes ({limit} bytes, config.toml [serve] max_body_bytes): send fewer "
                      "datums a request, or raise the limit.")


async def read_body(request: Request) -> bytes:
    """The request's body, decompressed when it is zstd; UserFacing(413) past the limit,
    found before more than the limit is held."""
    cached = getattr(request, "_zyquo_body", None)
    if cached is not None:
        return cached
    limit = backend(request).limits.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(request, limit, f" ({int(declared)} bytes)")
    pieces, size = [], 0
    async for piece in request.stream():
        size += len(piece)
        if size > limit:
            raise _too_large(request, limit)
        pieces.append(piece)
    raw = b"".join(pieces)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding == "zstd":
        raw = decompress_zstd(raw, limit, request)
    elif encoding not in ("", "identity"):
        raise UserFacing(400, f"The body of {request.url.path} is {encoding}-encoded; this "
                         "server reads plain bodies and zstd only.")
    request._zyquo_body = raw  # a handler may read it twice (json_body, then its own use)
    return raw


def decompress_zstd(raw: bytes, limit: int, request: Request) -> bytes:
    """A zstd body decompressed a piece at a time, stopping at `limit` bytes: a small body
    that would expand to gigabytes is refused once it passes the limit."""
    import zstandard

    out, size = [], 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as reader:
            while True:
                piece = reader.read(min(DECOMPRESSED_PIECE, limit + 1 - size))
                if not piece:
                    break
                size += len(piece)
                if size > limit:
                    raise UserFacing(400, f"The zstd body of {request.url.path} decompresses "
                                     f"to more than {limit} bytes (config.toml [serve] "
                                     "max_body_bytes): send fewer datums a request, or raise "
                                     "the limit.")
                out.append(piece)
    except zstandard.ZstdError as problem:
        raise UserFacing(400, f"The body of {request.url.path} is not zstd data "
                         f"({str(problem).rstrip('.')}); send it uncompressed or compress it "
                         "with zstd.") from None
    return b"".join(out)


async def json_body(request: Request, kind: type[pydantic.BaseModel]) -> Any:
    """The body as the SDK's `kind`; UserFacing(400) with one sentence when it is not."""
    raw = await read_body(request)
    try:
        data = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as problem:
        raise UserFacing(400, f"The body of {request.url.path} is not JSON ({problem}).") \
            from None
    except RecursionError:
        raise UserFacing(400, f"The body of {request.url.path} nests too deep to read as "
                         "JSON.") from None
    try:
        return kind.model_validate(data)
    except pydantic.ValidationError as problem:
        first = problem.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        message = " ".join(str(first["msg"]).split()).rstrip(".")
        raise UserFacing(400, f"The body of {request.url.path} is not a {kind.__name__}: "
                         f"{where}: {message}.") from None
