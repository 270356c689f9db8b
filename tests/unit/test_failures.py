"""Why a trainer died, from its exit status and the tail of its log."""

from __future__ import annotations

import signal

import pytest

from zyquo_tui.core.runs.failures import classify_exit

METAL_OOM = """step 120: train loss 1.2345
libc++abi: terminating due to uncaught exception of type std::runtime_error:
[METAL] Command buffer execution failed: Insufficient Memory
(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)
"""


@pytest.mark.parametrize("returncode, log, cause, phrase", [
    (-signal.SIGABRT, METAL_OOM, "oom", "ran out of memory"),
    (-signal.SIGKILL, "step 3: train loss 2.0\n", "killed", "SIGKILL"),
    (1, "Traceback ...\nModuleNotFoundError: No module named 'mlx_lm'\n", "dependency",
     "could not import"),
    (-signal.SIGSEGV, "", "killed", "SIGSEGV"),
    (3, "something odd\n", "internal", "exit status 3"),
    (None, "", "internal", "without saying why"),
])
def test_each_way_of_dying_gets_its_cause_and_a_suggestion(returncode, log, cause, phrase):
    failure = classify_exit(returncode, log)
    assert failure.cause == cause
    assert phrase in failure.message
    assert failure.suggestion
