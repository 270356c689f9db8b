"""The Tinker SDK's protobuf messages in and out, with the SDK's own generated classes.

The SDK sends a forward_backward as a `ForwardBackwardRequest` protobuf (its
`tinker/proto/request_conv.py` writes it) and reads `ForwardBackwardOutput` and
`SampleResponse` results as protobufs only (`tinker/proto/response_conv.py` reads them), so
these are read and written here with `tinker.proto.tinker_public_pb2`, the SDK's own
definitions: never a hand-written parser. Everything else on the wire is JSON, validated with
the SDK's pydantic request types (server/app.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError
from tinker.proto import tinker_public_pb2 as pb

from zyquo_tui.core.store.serve_settings import ServeSettings


class WireError(ValueError):
    """A request body that cannot be read: its message is the one sentence the 400 carries."""


@dataclass
class WireDatum:
    tokens: np.ndarray  # (N,) int32: the model's input
    inputs: dict[str, np.ndarray] = field(default_factory=dict)  # loss_fn_inputs, dense


@dataclass
class ForwardBackwardCall:
    model_id: str
    seq_id: int
    loss_fn: str
    config: dict[str, float | str]
    forward_only: bool
    data: list[WireDatum]


_DTYPES = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}


def _elements(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _tensor(message: pb.Tensor, where: str, max_elements: int) -> np.ndarray:
    dtype = _DTYPES.get(message.dtype)
    if dtype is None:
        raise WireError(f"{where} has a tensor dtype this server does not read "
                        f"({message.dtype}); send float32 or int64.")
    shape = [int(s) for s in message.shape]
    if any(size < 0 for size in shape):
        raise WireError(f"{where} has a negative size in its shape {shape}.")
    # By the shape it declares, before anything of that size is made: a sparse tensor's few
    # bytes can declare billions of elements.
    if _elements(shape) > max_elements:
        raise WireError(f"{where} declares {_elements(shape)} elements (shape {shape}), more "
                        f"than this server takes in one tensor ({max_elements}, config.toml "
                        "[serve] max_tensor_elements): send shorter datums, or raise the "
                        "limit.")
    try:
        if message.HasField("sparse_csr"):
            if len(shape) != 2:
                raise WireError(f"{where} is a sparse tensor of shape {shape}; a sparse "
                                "(CSR) tensor has two dimensions.")
            csr = message.sparse_csr
            values = np.frombuffer(csr.values, dtype=dtype)
            rows = np.frombuffer(csr.crow_indices, dtype=np.int64)
            cols = np.frombuffer(csr.col_indices, dtype=np.int64)
            if len(rows) != shape[0] + 1 or len(cols) != len(values) or \
                    (len(rows) and (rows[0] != 0 or rows[-1] != len(values)
                                    or np.any(np.diff(rows) < 0))) or \
                    (len(cols) and (cols.min() < 0 or cols.max() >= shape[1])):
                raise WireError(f"{where} is not a sparse (CSR) tensor of shape {shape}: its "
                                "row offsets, columns and values do not agree.")
            dense = np.zeros(shape, dtype=dtype)
            for row in range(len(rows) - 1):
                dense[row, cols[rows[row]:rows[row + 1]]] = values[rows[row]:rows[row + 1]]
            return dense
        values = np.frombuffer(message.dense, dtype=dtype)
        return values.reshape(shape) if shape else values
    except WireError:
        raise
    except (ValueError, IndexError) as error:
        raise WireError(f"{where} does not match its shape {shape}: "
                        f"{str(error).rstrip('.')}.") from None


def _tokens(chunk, index: int) -> np.ndarray:
    data = chunk.encoded_text.tokens
    if len(data) % 4:
        raise WireError(f"Datum {index} has a token chunk of {len(data)} bytes; tokens are "
                        "int32, 4 bytes each (ModelInput.from_ints writes them so).")
    return np.frombuffer(data, dtype=np.int32)


def read_forward_backward(body: bytes, *, max_datums: int = ServeSettings.max_datums,
                          max_sequence_tokens: int = ServeSettings.max_sequence_tokens,
                          max_tensor_elements: int = ServeSettings.max_tensor_elements
                          ) -> ForwardBackwardCall:
    """A forward_backward request's datums as arrays; WireError when it cannot be read or a
    datum is over a limit (config.toml [serve]: its defaults here)."""
    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except (DecodeError, RecursionError):
        raise WireError("The forward_backward body is not a ForwardBackwardRequest protobuf "
                        "(tinker/proto): send it with the tinker SDK.") from None
    if not message.model_id:
        raise WireError("The forward_backward request names no model_id.")
    if len(message.data) > max_datums:  # counted before any datum is read
        raise WireError(f"The forward_backward request has {len(message.data)} datums, more "
                        f"than this server takes in one request ({max_datums}, config.toml "
                        "[serve] max_datums): send them in several requests, as the tinker "
                        "SDK does, or raise the limit.")
    config: dict[str, float | str] = {}
    for key, value in message.loss_fn_config.items():
        config[key] = float(value)
    for key, value in message.loss_fn_config_v2.items():  # preferred when both are set
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    data = []
    for index, datum in enumerate(message.data):
        pieces = []
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise WireError(f"Datum {index} has a {chunk.WhichOneof('chunk')} chunk; this "
                                "server reads token chunks (ModelInput.from_ints) only.")
            pieces.append(_tokens(chunk, index))
        length = sum(len(piece) for piece in pieces)
        if length > max_sequence_tokens:
            raise WireError(f"Datum {index} has {length} tokens, more than this server takes "
                            f"in one datum ({max_sequence_tokens}, config.toml [serve] "
                            "max_sequence_tokens): shorten it, or raise the limit.")
        tokens = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
        inputs = {name: _tensor(tensor, f"Datum {index}'s {name}", max_tensor_elements)
                  for name, tensor in datum.loss_fn_inputs.items()}
        data.append(WireDatum(tokens, inputs))
    return ForwardBackwardCall(message.model_id, int(message.seq_id), message.loss_fn, config,
                               bool(message.forward_only), data)


def _batched(arrays: list[np.ndarray], dtype, proto_dtype) -> pb.BatchedTensor:
    flat = [np.ascontiguousarray(a, dtype=dtype).reshape(-1) for a in arrays]
    offsets = np.zeros(len(flat) + 1, dtype=np.int64)
    np.cumsum([a.nbytes for a in flat], out=offsets[1:])
    # Each datum's array is (N, *trailing); the SDK reshapes it by trailing_shape.
    trailing = list(arrays[0].shape[1:]) if arrays else []
    return pb.BatchedTensor(data=b"".join(a.tobytes() for a in flat), offsets=offsets.tobytes(),
                            dtype=proto_dtype, trailing_shape=trailing)


def forward_backward_output(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]
                            ) -> bytes:
    """ForwardBackwardOutput protobuf bytes: one float32 array per datum and field."""
    record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(outputs))
    for name in (outputs[0] if outputs else {}):
        record.fields[name].CopyFrom(_batched([o[name] for o in outputs], np.float32,
                                              pb.DTYPE_FLOAT32))
    message = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord",
                                       loss_fn_outputs=[record], metrics=metrics)
    return message.SerializeToString()


# SampleRequest's options this server does not compute: asked for, they get a 400 rather
# than an answer that silently lacks them.
UNSERVED_SAMPLE_OPTIONS = ("topk_sample_logprobs", "target_prompt_logprobs",
                           "prompt_alt_tokens_k", "prompt_logprobs_last_n")


def sample_options(request) -> int:
    """The top-k of prompt log-probabilities an asample request (tinker's SampleRequest) asks
    for (0: none); WireError when it asks for an option this server does not serve."""
    for name in UNSERVED_SAMPLE_OPTIONS:
        if getattr(request, name, None):
            raise WireError(f"This server does not serve {name} in asample; leave it unset.")
    if request.topk_prompt_logprobs < 0:
        raise WireError(f"topk_prompt_logprobs must be 0 or more, not "
                        f"{request.topk_prompt_logprobs}.")
    return int(request.topk_prompt_logprobs)


@dataclass
class Sequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" or "length"


def sample_response(sequences: list[Sequence], prompt_logprobs: np.ndarray | None,
                    topk_prompt: tuple[np.ndarray, np.ndarray] | None = None) -> bytes:
    """SampleResponse protobuf bytes; prompt log-probabilities NaN where there is none;
    `topk_prompt` (token ids, log-probabilities), each (prompt length, k), as Tinker's
    `TopkLogprobs`: row-major, filler cells already in place."""
    message = pb.SampleResponse()
    for sequence in sequences:
        item = message.sequences.add()
        item.stop_reason = (pb.STOP_REASON_STOP if sequence.stop_reason == "stop"
                            else pb.STOP_REASON_LENGTH)
        item.tokens = np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        item.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
    if prompt_logprobs is not None:
        message.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    if topk_prompt is not None:
        token_ids, logprobs = topk_prompt
        message.topk_prompt_logprobs.CopyFrom(pb.TopkLogprobs(
            token_ids=np.ascontiguousarray(token_ids, dtype=np.int32).tobytes(),
            logprobs=np.ascontiguousarray(logprobs, dtype=np.float32).tobytes(),
            k=int(token_ids.shape[1]), length=int(token_ids.shape[0])))
    return message.SerializeToString()
