"""A distillation run's teacher in the memory estimate: what it adds to the student's peak.

The teacher is a frozen model beside the student (trainer/teacher.py). Its forward pass runs
before the step, with no gradient, and leaves the step one array: its log-probabilities of
the batch (tokens x vocabulary, float32), or, when the loss is sliced, its last hidden states
(tokens x its hidden size), from which the loss makes those log-probabilities a slice at a
time. The KL (trainer/losses.py `distill_kl`) then works on float32 arrays as wide as the
vocabulary beyond what a cross-entropy keeps: the student's log-softmax and the teacher's
probabilities, `KL_COPIES` of them (measured: docs/memory.md, "Distillation runs"). Sliced,
those exist a slice at a time, several slices in flight (as the chunked loss's term counts
a cross-entropy's), each with `KL_SLICE_COPIES` more than a cross-entropy's.

So: teacher = its weights (exact, from its safetensors headers) + the array it hands over +
the KL's copies. Its forward pass's own working memory (one layer's, the batch's logits) comes
before the step's and is far below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zyquo_tui.core.errors import UserError

if TYPE_CHECKING:
    from zyquo_tui.core.memory.estimate import TrainingConfig
    from zyquo_tui.core.memory.facts import ModelFacts

FLOAT32 = 4
# Float32 tokens x vocabulary arrays the KL keeps beyond a cross-entropy's, unsliced; and
# sliced, float32 slice x vocabulary arrays beyond a cross-entropy's per slice in flight (the
# teacher's logits of the slice and their log-softmax). Both measured (docs/memory.md).
KL_COPIES = 2.0
KL_SLICE_COPIES = 2.0


@dataclass(frozen=True)
class TeacherFacts:
    """What the estimate needs of a teacher model."""

    weights_bytes: int
    hidden_size: int
    vocab_size: int
    compute_bytes: int

    @classmethod
    def of(cls, folder: Any) -> "TeacherFacts | None":
        """From a teacher's folder (config.json and safetensors headers, cached per folder);
        None when there is none or it cannot be read (the draft's checks say so)."""
        from zyquo_tui.core.memory.facts import ModelFacts

        if not isinstance(folder, str) or not folder:
            return None
        try:
            facts = ModelFacts.from_folder(folder)
        except (UserError, OSError, ValueError):
            return None
        return cls(facts.weights_bytes, facts.hidden_size, facts.vocab_size,
                   facts.compute_bytes)


def teacher_bytes(model: "ModelFacts", config: "TrainingConfig", slice_tokens: int | None,
                  slices_at_once: float) -> float:
    """The teacher's bytes in the step's peak (0 without a teacher). `slice_tokens`: the
    tokens of one slice when the step's loss is sliced (None: the whole batch's), of which
    `slices_at_once` are alive together (the chunked loss's term counts a cross-entropy's
    copies of each; the KL's are counted here)."""
    teacher = config.teacher
    if teacher is None:
        return 0.0
    tokens = config.batch_size * config.model_tokens
    vocab = max(model.vocab_size, teacher.vocab_size)
    if slice_tokens is not None:
        handed = tokens * teacher.hidden_size * teacher.compute_bytes
        copies = KL_SLICE_COPIES * slices_at_once * slice_tokens * vocab * FLOAT32
    else:
        handed = tokens * vocab * FLOAT32
        copies = KL_COPIES * tokens * vocab * FLOAT32
    return teacher.weights_bytes + handed + copies
