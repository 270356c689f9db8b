"""A distillation run's teacher: a frozen model loaded once beside the trained one, which hands
the loss its log-probabilities of a batch, computed before the step with no gradient.

The step-level client's distill batches use the same Teacher (client/training_client.py), so a
run's distillation loss is the client's on the same rows: when the
student's loss is sliced for the batch (trainer/chunked_loss.py) and the teacher's logits are a
plain projection of its last hidden states, those hidden states and its output head (the
loss makes the full-vocabulary log-probabilities a slice at a time); else its log-softmax at
the temperature for the whole batch, float32. Either is over the narrower of the teacher's
and the student's output widths (the student's logits are cut to it in the loss).
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


def output_width(model) -> int:
    """How many next-token scores `model` gives (its output layer's rows, which may exceed
    its tokenizer's tokens: padded to a multiple, as Qwen2.5-7B's 152,064 are beside
    Qwen2.5-0.5B's 151,936 for the same tokenizer); from a one-token probe."""
    training = model.training
    model.eval()
    try:
        return int(model(mx.array([[0]])).shape[-1])
    finally:
        model.train(training)


class Teacher:
    """The teacher model of `path`, checked to share the student's tokenizer. Its output
    is compared with the student's over the narrower of their two widths (`width`): with one
    tokenizer, the rows past it are padding no token maps to, and each distribution is taken
    over the shared tokens."""

    def __init__(self, path: str, student_tokenizer, student_width: int | None = None
                 ) -> None:
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
        own_width = output_width(model)
        self.width = min(own_width, student_width or own_width)
        tokens = len(student_tokenizer.get_vocab())
        if tokens > self.width:
            raise TeacherError(f"The teacher {path} scores {own_width} tokens and the student "
                               f"{student_width or own_width}, fewer than the {tokens} of "
                               "their tokenizer, so their distributions cannot be compared "
                               "token by token.", "choose a teacher and a student whose "
                               "output layers cover their tokenizer")
        self.narrowed = self.width < own_width
        self.path = path
        self.model = model
        self._pieces: Any = False  # (backbone, head), None when not a plain head; unknown: False

    def _head(self):
        if self._pieces is False:
            pieces = output_head(self.model)
            if pieces is not None and self.narrowed:
                backbone, head = pieces
                width = self.width
                pieces = backbone, lambda hidden: head(hidden)[..., :width]
            self._pieces = pieces
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
        logits = self.model(tokens[:, :-1])[..., :self.width].astype(mx.float32) / temperature
        logprobs = mx.stop_gradient(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        mx.eval(logprobs)
        return logprobs, None
