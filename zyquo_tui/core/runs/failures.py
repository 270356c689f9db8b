"""Why a run failed, told as a cause, one sentence and what to try.

Used by the trainer (for its own exceptions) and by the supervisor (for a trainer that died:
its exit status and the tail of trainer.log).
"""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass

# Text that Metal or MLX print when unified memory runs out (macOS has no MemoryError for it).
_OOM_MARKERS = (
    "kIOGPUCommandBufferCallbackErrorOutOfMemory",
    "Insufficient Memory",
    "[metal::malloc]",
    "std::bad_alloc",
    "MemoryError",
    "out of memory",
)

SUGGESTIONS = {
    "oom": "lower batch_size or max_seq_length, turn on grad_checkpoint, train fewer layers, "
           "or use a quantized base model (run `zyquo-tui plan` for a configuration that fits)",
    "nan": "lower the learning rate (or add warmup), then resume from the last good checkpoint",
    "data": "fix the dataset (`zyquo-tui data check PATH` lists every problem with file:line)",
    "config": "change the run's settings as the message says, then start it again",
    "dependency": "reinstall zyquo-tui in its virtual environment (pip install -U zyquo-tui)",
    "internal": "read trainer.log (`zyquo-tui runs logs ID`) and report it with that log",
    "killed": "something outside zyquo-tui stopped the trainer; resume the run from its latest "
              "checkpoint",
}


@dataclass
class Failure:
    """A failure cause, a sentence saying what happened, and what to try."""

    cause: str
    message: str
    suggestion: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def failure(cause: str, message: str, suggestion: str | None = None) -> Failure:
    return Failure(cause, message, suggestion or SUGGESTIONS[cause])


# Text of MLX's errors when another rank of a distributed run is gone.
_LOST_RANK_MARKERS = ("[ring]", "[jaccl]", "[mpi]", "connection to a peer was lost")


def looks_like_lost_rank(text: str) -> bool:
    return any(marker in text for marker in _LOST_RANK_MARKERS)


def looks_like_oom(text: str) -> bool:
    return any(marker in text for marker in _OOM_MARKERS)


def classify_exit(returncode: int | None, log_tail: str) -> Failure:
    """The cause of a trainer that ended without a terminal event, from its exit and its log."""
    if looks_like_oom(log_tail):
        return failure("oom", "The trainer ran out of memory.")
    if returncode is not None and returncode < 0:
        signum = -returncode
        if signum == signal.SIGKILL:
            # On macOS the kernel's memory killer (jetsam) sends SIGKILL without a word.
            return failure(
                "killed",
                "The trainer was killed (SIGKILL), most likely by the system running out of "
                "memory or by a user.",
                "if memory was short, " + SUGGESTIONS["oom"] + "; otherwise resume the run",
            )
        name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else signum
        return failure("killed", f"The trainer was stopped by signal {name}.")
    if "ModuleNotFoundError" in log_tail or "ImportError" in log_tail:
        return failure("dependency", "The trainer could not import a package it needs.")
    return failure(
        "internal",
        "The trainer stopped without saying why"
        + (f" (exit status {returncode})." if returncode is not None else "."),
    )
