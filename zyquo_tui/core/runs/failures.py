"""Why a run failed, told as a cause, one sentence and what to try.

Used by the trainer (for its own exceptions) and by the supervisor (for a trainer that died:
its exit status and the tail of trainer.log).
"""

from __future__ import annotations

import re
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
    "disk": "free space on the store's disk (or lower config.toml [disk] floor_bytes), then "
            "resume the run: it continues exactly from its last checkpoint",
    "killed": "something outside zyquo-tui stopped the trainer; resume the run from its latest "
              "checkpoint",
    "reward": "fix the reward function (its traceback is in trainer.log: `zyquo-tui runs logs "
              "ID`), then resume the run: it continues exactly from its latest checkpoint",
    "program": "read the program's own output: it closed its Tinker session as errored; a new "
               "training client from its last saved state goes on from there",
    "rank_lost": "check that host (memory, network, `zyquo-tui hosts check`), then resume the "
                 "run from its latest checkpoint with the same hosts",
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


# What mlx.launch prints for a rank that ended badly (the others follow it: the first counts).
_LAUNCHER_RANK_LINE = re.compile(
    r"Node with rank (\d+) (?:exited with code (-?\d+)|was killed)")
# The line the runner writes before each distributed launch (core/system/cluster.py).
LAUNCH_MARKER = "runner: launching"


def lost_rank(log_tail: str) -> Failure | None:
    """The rank of a distributed run that ended first, as mlx.launch told it in the log of
    the latest launch; None when no rank did."""
    latest = log_tail[log_tail.rfind(LAUNCH_MARKER):] if LAUNCH_MARKER in log_tail else ""
    found = _LAUNCHER_RANK_LINE.search(latest)
    if found is None:
        return None
    rank, code = found.group(1), found.group(2)
    how = "was killed" if code is None else f"ended with exit status {code}"
    if code is not None and int(code) < 0 and -int(code) in signal.Signals._value2member_map_:
        how = f"was stopped by {signal.Signals(-int(code)).name}"
    return failure("rank_lost", f"Rank {rank} of the distributed run {how}, so the other "
                   "ranks were stopped.")


def looks_like_oom(text: str) -> bool:
    return any(marker in text for marker in _OOM_MARKERS)


def classify_exit(returncode: int | None, log_tail: str,
                  memory_death: str | None = None) -> Failure:
    """The cause of a trainer that ended without a terminal event, from its exit and its log;
    `memory_death` says why a SIGKILL looks like the system's answer to memory running out
    (core/system/memory_deaths.py), when the runner saw a sign of it."""
    if looks_like_oom(log_tail):
        return failure("oom", "The trainer ran out of memory.")
    rank = lost_rank(log_tail)
    if rank is not None:
        return rank
    if returncode is not None and returncode < 0:
        signum = -returncode
        if signum == signal.SIGKILL and memory_death:
            return failure("oom", f"The trainer was killed (SIGKILL) as memory ran out: "
                                  f"{memory_death}.")
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
