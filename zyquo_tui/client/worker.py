"""The one thread of a process that runs MLX for every client, in submission order.

One per process, not one per client: MLX's random state, streams and memory are the process's
anyway. It ends at interpreter exit, after the work queued before it (`shutdown`, which the
client's exit hook calls once every open client is closed), and is joined there.

Why it must end that way (mlx 0.32): a thread that still runs MLX work when the interpreter
finalizes is stopped by Python inside MLX's C++ code, and the process aborts ("terminate
called without an active exception", exit 134). And a thread that has used `mx.random` keeps a
per-thread random key that its C++ destructor releases when the thread ends by taking the GIL:
ended by a plain return during the exit hooks, that destructor can run after finalization has
begun and aborts the same way. So the thread releases its MLX streams and random key itself
(`mx.clear_streams()`, with the GIL held) before it returns.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()  # queued by shutdown(): the thread ends after the jobs before it

_jobs: queue.SimpleQueue = queue.SimpleQueue()
_thread: threading.Thread | None = None
_stopped = False
_start_lock = threading.Lock()


def _serve() -> None:
    while True:
        job = _jobs.get()
        if job is _STOP:
            import mlx.core as mx

            mx.clear_streams()
            return
        future, fn, args = job
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
        if _stopped:
            raise RuntimeError("The clients' MLX thread has stopped: the interpreter is "
                               "exiting, so no operation can run any more.")
        if _thread is None:
            _thread = threading.Thread(target=_serve, name="zyquo-client-mlx", daemon=True)
            _thread.start()
        future: concurrent.futures.Future = concurrent.futures.Future()
        _jobs.put((future, fn, args))
    return future


def shutdown() -> None:
    """Let the thread finish what was submitted, end it and join it; later submissions raise.
    Called at interpreter exit (training_client.py's exit hook)."""
    global _stopped
    with _start_lock:
        _stopped = True
        thread = _thread
        if thread is not None:
            _jobs.put(_STOP)
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def on_worker() -> bool:
    return threading.current_thread() is _thread
