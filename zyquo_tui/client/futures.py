"""Futures of the client's operations: `.result(timeout)`, `.done()`, `.then(fn)`.

Operations run on the client's one MLX worker in submission order. A continuation (`then`) runs
on a thread of its own, never on that worker: it may submit more operations and wait for them
without the deadlock of waiting on a nested task in a one-worker pool.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")


class Future(Generic[T]):
    """The result of one client operation, when it is done. An operation that fails raises its
    error from `result()` (never a result that says it failed)."""

    def __init__(self, inner: concurrent.futures.Future) -> None:
        self._inner = inner

    def result(self, timeout: float | None = None) -> T:
        """Wait (at most `timeout` seconds: TimeoutError) and return the result, or raise the
        operation's error."""
        return self._inner.result(timeout)

    def done(self) -> bool:
        return self._inner.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._inner.exception(timeout)

    def then(self, fn: Callable[[T], U]) -> Future[U]:
        """A future of `fn(result)`, run once this one is done; an error of this operation (or
        of `fn`) is the new future's error."""
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
        return Future(chained)

    def __repr__(self) -> str:
        # Not done(): printing a waiting forward_backward must not make it run alone.
        return f"<Future {'done' if self._inner.done() else 'pending'}>"


class DeferredFuture(Future[T]):
    """A future whose operation may wait on the worker for the next one (forward_backward
    waits to see whether an optim_step follows): looking at it (`result`, `exception`,
    `done`) has the worker run it now. `then` does not: it waits for whatever runs it."""

    def __init__(self, inner: concurrent.futures.Future, start: Callable[[], None]) -> None:
        super().__init__(inner)
        self._start: Callable[[], None] | None = start

    def _started(self) -> None:
        if self._start is not None and not self._inner.done():
            self._start()
        self._start = None

    def result(self, timeout: float | None = None) -> T:
        self._started()
        return super().result(timeout)

    def done(self) -> bool:
        self._started()
        return super().done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._started()
        return super().exception(timeout)


def completed(value: Any) -> Future:
    inner: concurrent.futures.Future = concurrent.futures.Future()
    inner.set_result(value)
    return Future(inner)
