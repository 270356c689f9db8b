"""The step-level training client: your own loop over zyquo-tui's training engine.

    from zyquo_tui.client import TrainingClient, TrainingBatch

    client = TrainingClient.from_model("zyquo-tiny", method="lora", learning_rate=1e-3)
    result = client.forward_backward(TrainingBatch(["What is 2 plus 2?"], ["4."])).result()
    client.optim_step().result()

This module imports mlx (on first use of a client); neither the core nor the dashboard imports
it. docs/client.md documents every operation, loss and future.
"""

from zyquo_tui.client.batch import BatchError, TrainingBatch
from zyquo_tui.client.futures import Future
from zyquo_tui.client.training_client import (
    ForwardBackwardResult,
    LoadStateResult,
    OptimStepResult,
    SampleResult,
    SaveStateResult,
    TrainingClient,
    WeightsResult,
)

__all__ = [
    "BatchError",
    "ForwardBackwardResult",
    "Future",
    "LoadStateResult",
    "OptimStepResult",
    "SampleResult",
    "SaveStateResult",
    "TrainingBatch",
    "TrainingClient",
    "WeightsResult",
]
