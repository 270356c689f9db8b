"""The server's futures: each request that trains, saves, loads or samples is work queued on the
process's one MLX thread (client/worker.py, shared with the step-level client) in the order
the requests came, known to the program by a request id that it polls with `retrieve_future`.
A poll waits here for up to LONG_POLL seconds before answering `try_again`, so the SDK's poll
loop does not spin, and answers the moment the result exists.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
import uuid
from collections import OrderedDict
from typing import Any, Callable

from zyquo_tui.server.state import UserFacing
from zyquo_tui.server.trained_model import RequestError

log = logging.getLogger(__name__)
LONG_POLL = 20.0  # seconds a retrieve_future waits for its result before "try_again"
# Finished results kept for a late or repeated retrieve: the oldest go first, so however long
# the server serves, they hold at most this many answers.
KEPT_RESULTS = 4096


def _bare(error: BaseException) -> BaseException:
    """The error without its traceback and chained errors: a failed result is kept for the
    program's retrieve (KEPT_RESULTS), and their frames would keep the models they ran on
    alive after those were freed. Only its sentence goes to the program."""
    error.__traceback__ = None
    error.__context__ = error.__cause__ = None
    return error


class Futures:
    """Work on the MLX thread by request id, and its results."""

    def __init__(self) -> None:
        self.results: OrderedDict[str, asyncio.Future] = OrderedDict()

    def submit(self, fn: Callable, *args: Any, user: Any = None) -> str:
        """Queue fn(*args) on the MLX thread; the id of its future. `user`: the training
        model or sampler it works for, which is not idle while work for it waits or runs
        (server/lifetimes.py)."""
        from zyquo_tui.client import worker

        if user is not None:
            user.submitted += 1  # on the event loop only; `finished` on the MLX thread only

        def counted(*args: Any) -> Any:
            try:
                return fn(*args)
            except RequestError as error:
                raise _bare(error) from None
            except BaseException as error:
                log.exception("work on the MLX thread failed")
                raise _bare(error) from None
            finally:
                if user is not None:
                    user.last_used = time.monotonic()
                    user.finished += 1

        return self._register(worker.submit(counted, *args))

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
