"""Sampling: sampling sessions (of a base model, saved weights or a snapshot) and asample.
A request's size is bounded by config.toml [serve] (answers, tokens an answer, prompt
tokens) before any work is queued."""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import Response
from tinker import types

from zyquo_tui.core.store.serve_settings import ServeSettings
from zyquo_tui.server.requests import RouteSpec, backend, future, json_body
from zyquo_tui.server.service import UserFacing
from zyquo_tui.server.wire import WireError, sample_options


async def create_sampling_session(request: Request) -> dict:
    body = await json_body(request, types.CreateSamplingSessionRequest)
    served = backend(request)
    served.service.session(body.session_id)
    sampler_id = served.service.create_sampler(body.base_model, body.model_path, served.resolve,
                                                session_id=body.session_id)
    return {"type": "create_sampling_session", "sampling_session_id": sampler_id}


async def get_sampler(request: Request) -> dict:
    sampler = backend(request).service.sampler(request.path_params["sampler_id"])
    return {"sampler_id": sampler.id, "base_model": sampler.base_model,
            "model_path": sampler.model_path}


TOKEN_IDS = 1 << 31  # token ids and top_k are int32 where sampling uses them


def checked_sample(body: types.SampleRequest, limits: ServeSettings) -> list[int]:
    """The prompt's tokens, once the request is within the limits and its sampling
    parameters are numbers sampling can use; UserFacing(400) with one sentence otherwise."""
    if body.num_samples < 1:
        raise UserFacing(400, f"num_samples must be at least 1, not {body.num_samples}.")
    if body.num_samples > limits.max_num_samples:
        raise UserFacing(400, f"num_samples is {body.num_samples}, more than this server "
                         f"samples in one request ({limits.max_num_samples}, config.toml "
                         "[serve] max_num_samples): send several requests, or raise the limit.")
    params = body.sampling_params
    if params.max_tokens is not None and not 0 <= params.max_tokens <= limits.max_tokens:
        raise UserFacing(400, f"max_tokens must be between 0 and {limits.max_tokens} "
                         f"(config.toml [serve] max_tokens), not {params.max_tokens}: ask for "
                         "shorter answers, or raise the limit.")
    if not math.isfinite(params.temperature) or params.temperature < 0:
        raise UserFacing(400, f"temperature must be a finite number of 0 or more, not "
                         f"{params.temperature}.")
    if not (math.isfinite(params.top_p) and 0 <= params.top_p <= 1):
        raise UserFacing(400, f"top_p must be between 0 and 1, not {params.top_p}.")
    if not -1 <= params.top_k < TOKEN_IDS:
        raise UserFacing(400, f"top_k must be -1 (no limit) or a whole number from 0 to "
                         f"{TOKEN_IDS - 1}, not {params.top_k}.")
    stop = params.stop if isinstance(params.stop, (list, tuple)) else []
    for token in stop:
        if isinstance(token, int) and not 0 <= token < TOKEN_IDS:
            raise UserFacing(400, f"A stop token must be a token id from 0 to "
                             f"{TOKEN_IDS - 1}, not {token}.")
    try:
        prompt = body.prompt.to_ints()
    except ValueError as problem:
        raise UserFacing(400, f"The prompt must be tokens only: {problem}.") from None
    if len(prompt) > limits.max_sequence_tokens:
        raise UserFacing(400, f"The prompt has {len(prompt)} tokens, more than this server "
                         f"takes ({limits.max_sequence_tokens}, config.toml [serve] "
                         "max_sequence_tokens): shorten it, or raise the limit.")
    return prompt


async def asample(request: Request) -> Response:
    body = await json_body(request, types.SampleRequest)
    served = backend(request)
    prompt = checked_sample(body, served.limits)
    try:
        topk_prompt_logprobs = sample_options(body)
    except WireError as problem:
        raise UserFacing(400, str(problem)) from None
    if topk_prompt_logprobs * len(prompt) > served.limits.max_tensor_elements:
        raise UserFacing(400, f"topk_prompt_logprobs {topk_prompt_logprobs} over a prompt of "
                         f"{len(prompt)} tokens makes more values than this server answers "
                         f"({served.limits.max_tensor_elements}, config.toml [serve] "
                         "max_tensor_elements): ask for fewer, or raise the limit.")
    if body.sampling_session_id is None:
        if body.base_model is None and body.model_path is None:
            raise UserFacing(400, "asample needs a sampling_session_id, base_model or "
                             "model_path.")
        sampler_id = served.service.create_sampler(body.base_model, body.model_path,
                                                   served.resolve)
    else:
        sampler_id = body.sampling_session_id
    params = body.sampling_params
    stop = params.stop
    if isinstance(stop, str):
        stop = [stop]
    request_id = served.service.sample(sampler_id, prompt, body.num_samples, {
        "max_tokens": params.max_tokens, "seed": params.seed,
        "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
        "stop": None if stop is None else list(stop)}, bool(body.prompt_logprobs),
        topk_prompt_logprobs)
    return future(request_id, sample_sequence_ids=[f"{request_id}-{i}" for i in
                                                   range(body.num_samples)])


ROUTES: list[RouteSpec] = [
    ("create_sampling_session", create_sampling_session, ("POST",)),
    ("samplers/{sampler_id}", get_sampler, ("GET",)),
    ("asample", asample, ("POST",)),
]
