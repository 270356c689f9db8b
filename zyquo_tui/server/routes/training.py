"""Training: a LoRA model made (from a base or a saved state), its forward_backward and
optim_step, its weights saved and loaded. Each answers with a future (routes/futures.py)."""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import Response
from tinker import types

from zyquo_tui.server.requests import RouteSpec, backend, future, json_body, read_body
from zyquo_tui.server.service import UserFacing
from zyquo_tui.server.wire import WireError, read_forward_backward


SEEDS = 2 ** 32  # numpy's and MLX's seeds both take a seed below this
NAME_BYTES = 255  # the longest file name the file systems here take


async def create_model(request: Request) -> Response:
    body = await json_body(request, types.CreateModelRequest)
    lora = body.lora_config or types.LoraConfig(rank=32)
    if lora.rank < 1:
        raise UserFacing(400, f"LoRA rank must be at least 1, not {lora.rank}.")
    if lora.seed is not None and not 0 <= lora.seed < SEEDS:
        raise UserFacing(400, f"The LoRA seed must be a whole number from 0 to {SEEDS - 1}, "
                         f"not {lora.seed}.")
    if body.optimizer_config.type != "adamw":
        raise UserFacing(400, f"This server trains with Adam only, not "
                         f"{body.optimizer_config.type}.")
    served = backend(request)
    spec = served.resolve(body.base_model)
    spec.rank, spec.seed = lora.rank, lora.seed
    spec.train_mlp, spec.train_attn = lora.train_mlp, lora.train_attn
    spec.train_unembed = lora.train_unembed
    model_id, request_id = served.service.create_model(body.session_id, body.model_seq_id, spec,
                                                       user_metadata=body.user_metadata)
    return future(request_id, model_id=model_id)


async def get_info(request: Request) -> dict:
    body = await json_body(request, types.GetInfoRequest)
    return backend(request).service.info(body.model_id)


async def forward_backward(request: Request) -> Response:
    limits = backend(request).limits
    raw = await read_body(request)  # zstd, as the SDK may send it, decompressed under the cap
    try:
        call = read_forward_backward(raw, max_datums=limits.max_datums,
                                     max_sequence_tokens=limits.max_sequence_tokens,
                                     max_tensor_elements=limits.max_tensor_elements)
    except WireError as problem:
        raise UserFacing(400, str(problem)) from None
    request_id = backend(request).service.forward_backward(
        call.model_id, call.loss_fn, call.config, call.data, call.forward_only)
    return future(request_id, model_id=call.model_id)


def adam_constants(params: types.AdamParams) -> dict[str, float]:
    """AdamParams as the engine takes them; UserFacing(400) for a value Adam cannot use
    (JSON may carry NaN or infinity, and a step with them would spoil the weights)."""
    constants = {"learning_rate": params.learning_rate, "beta1": params.beta1,
                 "beta2": params.beta2, "eps": params.eps,
                 "weight_decay": params.weight_decay, "grad_clip_norm": params.grad_clip_norm}
    for name, value in constants.items():
        if not math.isfinite(value) or value < 0:
            raise UserFacing(400, f"AdamParams.{name} must be a finite number of 0 or more, "
                             f"not {value}.")
    for name in ("beta1", "beta2"):
        if constants[name] >= 1:
            raise UserFacing(400, f"AdamParams.{name} must be below 1, not {constants[name]}.")
    return constants


async def optim_step(request: Request) -> Response:
    body = await json_body(request, types.OptimStepRequest)
    params = body.optim_params
    if not isinstance(params, types.AdamParams):
        raise UserFacing(400, "This server's optimizer is Adam: send AdamParams.")
    request_id = backend(request).service.optim_step(body.model_id, adam_constants(params))
    return future(request_id, model_id=body.model_id)


def check_save_name(name: str | None) -> None:
    """A name save_state or save_weights_for_sampler gives a folder: one a file system can
    hold (the service refuses slashes and dots)."""
    if name is None:
        return
    if not name.isprintable():
        raise UserFacing(400, f"The name {name!r} holds a control character; give a plain "
                         "name.")
    if len(name.encode("utf-8")) > NAME_BYTES:
        raise UserFacing(400, f"The name given is {len(name.encode('utf-8'))} bytes long; a "
                         f"saved state's name takes at most {NAME_BYTES}.")


async def save_weights(request: Request) -> Response:
    body = await json_body(request, types.SaveWeightsRequest)
    check_save_name(body.path)
    return future(backend(request).service.save_state(body.model_id, body.path, "weights"),
                  model_id=body.model_id)


async def save_weights_for_sampler(request: Request) -> Response:
    body = await json_body(request, types.SaveWeightsForSamplerRequest)
    check_save_name(body.path)
    service = backend(request).service
    if body.path is None:
        request_id = service.snapshot_sampler(body.model_id)
    else:
        request_id = service.save_state(body.model_id, body.path, "sampler_weights")
    return future(request_id, model_id=body.model_id)


async def load_weights(request: Request) -> Response:
    body = await json_body(request, types.LoadWeightsRequest)
    service = backend(request).service
    if body.session_id is not None:  # a new training client made from the state
        if body.model_seq_id is None:
            raise UserFacing(400, "load_weights with a session_id needs model_seq_id.")
        request_id = service.create_model_from_state(body.session_id, body.model_seq_id,
                                                     body.path, body.optimizer,
                                                     user_metadata=body.user_metadata)
        return future(request_id)
    if body.model_id is None:
        raise UserFacing(400, "load_weights needs model_id, or session_id and model_seq_id.")
    return future(service.load_state(body.model_id, body.path, body.optimizer),
                  model_id=body.model_id)


ROUTES: list[RouteSpec] = [
    ("create_model", create_model, ("POST",)),
    ("get_info", get_info, ("POST",)),
    ("forward_backward", forward_backward, ("POST",)),
    ("optim_step", optim_step, ("POST",)),
    ("save_weights", save_weights, ("POST",)),
    ("save_weights_for_sampler", save_weights_for_sampler, ("POST",)),
    ("load_weights", load_weights, ("POST",)),
]
