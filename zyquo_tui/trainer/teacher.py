"""A distillation run's teacher: a frozen model loaded once beside the trained one, which hands
the loss its log-probabilities of a batch, computed before the step with no gradient.

The step-level client's distill batches use the same Teacher (client/training_client.py), so a
run's distillation loss is the client's on the same rows: when the
student's loss is sliced for the batch (trainer/chunked_loss.py) and the teacher's logits are a
plain projection of its last hidden states, those hidden states and its output head (the
loss makes the full-vocabulary log-probabilities a slice at a time); else its log-softmax at
the temperature for the whole batch, float32.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from zyquo_tui.trainer.chunked_loss import output_head


class TeacherError(ValueError):
    """A teacher that cannot be used: the sentence, and what to do (`suggestion`)."""

    def __init__(self, message: str, suggestion: str) -> None:
        super().__init__(message)
        self.suggestion = suggestion


class Teacher:
    """The teacher model of `path`, checked to share the student's tokenizer."""

    def __init__(self, path: str, student_tokenizer) -> None:
        from mlx_lm import load

        try:
            model, tokenizer = load(path)
        except (ValueError, FileNotFoundError) as error:
            raise TeacherError(f"The teacher in {path} could not be loaded: {error}.",
                               "give the folder of an MLX model as the teacher") from None
        # The draft refuses another tokenizer before the run starts (core/library/
        # tokenizer_identity.py, from the files); this is the check of what mlx-lm loaded.
        if tokenizer.get_vocab() != student_tokenizer.get_vocab():
            raise TeacherError(f"The teacher {path} has another tokenizer than the student; "
                               "distillation needs the same tokenizer.",
                               "choose a teacher of the student's family (the same "
                               "vocabulary)")
        model.freeze()
        model.eval()
        self.path = path
        self.model = model
        self._pieces: Any = False  # (backbone, head), None when not a plain head; unknown: False

    def _head(self):
        if self._pieces is False:
            self._pieces = output_head(self.model)
        return self._pieces

    def side(self, tokens: mx.array, temperature: float, sliced: bool
             ) -> tuple[mx.array, Any]:
        """(its last hidden states, its output head) when `sliced` and the head allows, else
        (its log-probabilities at `temperature`, None); of the inputs tokens[:, :-1],
        evaluated, with no gradient."""
        pieces = self._head() if sliced else None
        if pieces is not None:
            backbone, head = pieces
            hidden = mx.stop_gradient(backbone(tokens[:, :-1]))
            mx.eval(hidden)
            return hidden, head
        logits = self.model(tokens[:, :-1]).astype(mx.float32) / temperature
        logprobs = mx.stop_gradient(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        mx.eval(logprobs)
        return logprobs, None
