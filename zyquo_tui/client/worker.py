"""The one thread of a process that runs MLX for every client, in submission order.

One per process, not one per client: MLX's random state, streams and memory are the process's
anyway, and a thread that has run mlx-lm must outlive the interpreter (mlx 0.32 aborts at exit,
"terminate called without an active exception", once such a thread has ended). It is a daemon
thread that waits on a queue for as long as the process lives.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

_jobs: queue.SimpleQueue = queue.SimpleQueue()
_thread: threading.Thread | None = None
_start_lock = threading.Lock()


def _serve() -> None:
    while True:
        future, fn, args = _jobs.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            result = fn(*args)
        except BaseException as error:  # noqa: BLE001 - raised again by future.result()
            future.set_exception(error)
        else:
            future.set_result(result)


def submit(fn: Callable, *args: Any) -> concurrent.futures.Future:
    """Run fn(*args) on the MLX thread after everything submitted before it."""
    global _thread
    with _start_lock:
        if _thread is None:
            _thread = threading.Thread(target=_serve, name="zyquo-client-mlx", daemon=True)
            _thread.start()
    future: concurrent.futures.Future = concurrent.futures.Future()
    _jobs.put((future, fn, args))
    return future


def on_worker() -> bool:
    return threading.current_thread() is _thread
