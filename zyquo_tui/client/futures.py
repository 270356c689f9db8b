"""Futures of the client's operations: `.result(timeout)`, `.done()`, `.then(fn)`, `await`.

Operations run on the client's one MLX worker in submission order. A continuation (`then`) runs
on a thread of its own, never on that worker: it may submit more operations and wait for them
without the deadlock of waiting on a nested task in a one-worker pool.

A forward_backward may wait on the worker for the next operation (training_client.py): its
future carries `start`, which has the worker run it now. Looking at that future (`result`,
`exception`, `done`, `await`), or at any future derived from it through `then`, calls `start`:
a continuation's wait is a wait on the forward_backward, so it must not wait for an optim_step
that may never come.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")


class Future(Generic[T]):
    """The result of one client operation, when it is done. An operation that fails raises its
    error from `result()` (never a result that says it failed)."""

    def __init__(self, inner: concurrent.futures.Future,
                 start: Callable[[], None] | None = None) -> None:
        self._inner = inner
        self._start = start

    def _started(self) -> None:
        """Have whatever this future waits for run now, once (see the module's docstring)."""
        start, self._start = self._start, None
        if start is not None and not self._inner.done():
            start()

    def result(self, timeout: float | None = None) -> T:
        """Wait (at most `timeout` seconds: TimeoutError) and return the result, or raise the
        operation's error."""
        self._started()
        return self._inner.result(timeout)

    def done(self) -> bool:
        self._started()
        return self._inner.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._started()
        return self._inner.exception(timeout)

    def __await__(self) -> Generator[Any, None, T]:
        """`await future` in a coroutine: the result, without blocking the event loop.
        Cancelling the awaiting task leaves the operation to run (it is not withdrawn)."""
        import asyncio  # here: a script that never awaits does not pay for its import

        self._started()
        return asyncio.shield(asyncio.wrap_future(self._inner)).__await__()

    def then(self, fn: Callable[[T], U]) -> Future[U]:
        """A future of `fn(result)`, run once this one is done; an error of this operation (or
        of `fn`) is the new future's error. Making it starts nothing; waiting on it (or on a
        continuation of it) is waiting on this one."""
        chained: concurrent.futures.Future = concurrent.futures.Future()

        def run(done: concurrent.futures.Future) -> None:
            try:
                chained.set_result(fn(done.result()))
            except BaseException as error:  # noqa: BLE001 - handed to whoever waits
                chained.set_exception(error)

        def start(done: concurrent.futures.Future) -> None:
            threading.Thread(target=run, args=(done,), name="zyquo-client-then",
                             daemon=True).start()

        self._inner.add_done_callback(start)
        return Future(chained, start=self._started if self._start is not None else None)

    def __repr__(self) -> str:
        # Not done(): printing a waiting forward_backward must not make it run alone.
        return f"<Future {'done' if self._inner.done() else 'pending'}>"


def completed(value: Any) -> Future:
    inner: concurrent.futures.Future = concurrent.futures.Future()
    inner.set_result(value)
    return Future(inner)
