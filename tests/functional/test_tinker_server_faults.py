"""No request of any shape breaks `zyquo-tui serve`: hundreds of generated malformed requests
(junk bytes, wrong JSON types, huge and negative numbers, unknown ids, wrong content types,
a body over the limit, zstd bombs, truncated and lying protobufs, bad tinker:// paths, saved
states damaged on disk) across every route, none answered with a 5xx: a refusal is a 4xx
with one sentence, and a request accepted as a future fails, when it fails, as the program's
own mistake (category `user`). Then a program on the official tinker SDK trains on the same
server as if nothing happened.

The generator is seeded: a failure names the request (its label and number), and the same
seed sends the same requests again.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
zstandard = pytest.importorskip("zstandard")
from tinker.proto import tinker_public_pb2 as pb  # noqa: E402

from test_tinker_server import start_server, stop  # noqa: E402

SEED = 20261205
MIB = 1 << 20


@dataclass
class Fault:
    """One malformed request: what it is (for the failure message) and how it is sent."""

    label: str
    method: str
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class Known:
    """Real ids and paths of the served store, so faults reach past the first check."""

    session: str
    model: str
    sampler: str
    run: str
    state: str  # tinker://RUN/weights/NAME of a real saved state
    damaged: list[str]  # tinker:// paths of saved states damaged on disk


# Values that are wrong for almost any field: wrong types, huge and negative numbers,
# non-finite numbers (JSON as Python writes it), long and odd text.
BAD_VALUES = [None, True, -1, 0, -(2 ** 63) - 1, 2 ** 64, 10 ** 30, -10 ** 30, 1.5, "NaN",
              "Infinity", "-Infinity", "", "x" * 5000, "\u0000", "\ud7ff\u202e", [], [1, 2],
              {}, {"a": {"b": [None]}}, "tinker://", "../../etc/passwd"]
SPECIAL_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def dumps(value) -> bytes:
    """JSON, with the strings NaN/Infinity sent as the bare literals Python's json writes."""
    def special(item):
        if isinstance(item, str) and item in SPECIAL_FLOATS:
            return SPECIAL_FLOATS[item]
        if isinstance(item, dict):
            return {k: special(v) for k, v in item.items()}
        if isinstance(item, list):
            return [special(v) for v in item]
        return item
    return json.dumps(special(value)).encode()


def bad_paths(known: Known) -> list[str]:
    run = known.run
    return ["", "tinker://", "tinker:///weights/x", f"tinker://{run}/weights/",
            f"tinker://{run}/weights/no-such-state", f"tinker://{run}/optimizer/x",
            f"tinker://{run}/weights/../../../etc", "tinker://../weights/x",
            f"tinker://{run}/weights/a/b", "http://example.com/weights/x", "weights/x",
            f"tinker://{run}/weights/" + "n" * 400, "tinker://" + "r" * 400 + "/weights/x",
            f"tinker://{run}/weights/nul\u0000name", "tinker://no-such-run/weights/x",
            f"tinker://{run}/sampler_weights/.", "tinker://%2e%2e/weights/x",
            *known.damaged]


def json_templates(known: Known, rng: random.Random) -> dict[str, dict]:
    """A valid body of each JSON route (with real ids), which the faults break one field at
    a time. Valid values are cheap ones: a fault that is accepted costs the server little."""
    prompt = {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]}
    return {
        "client/config": {"sdk_version": "0.38.0"},
        "client/dynamic_config": {"sdk_version": "0.38.0"},
        "create_session": {"tags": [], "user_metadata": None, "sdk_version": "0.38.0"},
        "session_heartbeat": {"session_id": known.session},
        "create_model": {"session_id": known.session, "model_seq_id": rng.randrange(1000, 10 ** 6),
                         "base_model": "zyquo-tiny", "lora_config": {"rank": 2}},
        "get_info": {"model_id": known.model},
        "optim_step": {"model_id": known.model, "adam_params": {"learning_rate": 0.0}},
        "save_weights": {"model_id": known.model, "path": f"fault-{rng.randrange(10 ** 6)}"},
        "save_weights_for_sampler": {"model_id": known.model, "path": None},
        "load_weights": {"model_id": known.model, "path": known.state, "optimizer": False},
        "create_sampling_session": {"session_id": known.session, "sampling_session_seq_id": 1,
                                    "base_model": "zyquo-tiny"},
        "asample": {"sampling_session_id": known.sampler, "num_samples": 1, "prompt": prompt,
                    "sampling_params": {"max_tokens": 1, "temperature": 1.0}},
        "retrieve_future": {"request_id": "0" * 32},
        "cancel_future": {"request_id": "0" * 32},
        "weights_info": {"tinker_path": known.state},
        "telemetry": {"events": []},
    }


def field_paths(value, prefix=()) -> list[tuple]:
    """Every field of a JSON body, nested ones too, as key paths."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append(prefix + (key,))
            found += field_paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.append(prefix + (index,))
            found += field_paths(item, prefix + (index,))
    return found


def with_field(body, path: tuple, value):
    body = json.loads(json.dumps(body))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


def fb_message(model: str, tokens: list[int], **tensors) -> pb.ForwardBackwardRequest:
    message = pb.ForwardBackwardRequest(model_id=model, loss_fn="cross_entropy", seq_id=1)
    datum = message.data.add()
    datum.model_input.add().encoded_text.tokens = np.asarray(tokens, np.int32).tobytes()
    for name, tensor in tensors.items():
        datum.loss_fn_inputs[name].CopyFrom(tensor)
    return message


def dense(values, dtype=pb.DTYPE_FLOAT32, shape=None) -> pb.Tensor:
    array = np.asarray(values, np.float32 if dtype == pb.DTYPE_FLOAT32 else np.int64)
    return pb.Tensor(dtype=dtype, shape=list(array.shape) if shape is None else shape,
                     dense=array.tobytes())


def protobuf_faults(known: Known, rng: random.Random) -> list[tuple[str, bytes]]:
    """forward_backward bodies: truncated, lying and over-limit protobufs."""
    targets = dense([2, 3, 4], pb.DTYPE_INT64)
    weights = dense([1.0, 1.0, 1.0])
    whole = fb_message(known.model, [1, 2, 3], target_tokens=targets,
                       weights=weights).SerializeToString()
    faults = [(f"truncated at {cut}", whole[:cut])
              for cut in sorted(rng.sample(range(1, len(whole)), min(12, len(whole) - 1)))]
    three_bytes = fb_message(known.model, [1], target_tokens=targets, weights=weights)
    three_bytes.data[0].model_input[0].encoded_text.tokens = b"\x01\x02\x03"
    faults.append(("a 3-byte token buffer", three_bytes.SerializeToString()))
    sparse_huge = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[1 << 24, 1 << 24])
    sparse_huge.sparse_csr.crow_indices = np.zeros(2, np.int64).tobytes()
    faults.append(("a sparse tensor declaring 2^48 elements",
                   fb_message(known.model, [1, 2, 3], target_tokens=targets,
                              weights=sparse_huge).SerializeToString()))
    sparse_lying = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[2, 3])
    sparse_lying.sparse_csr.crow_indices = np.asarray([0, 5, -3], np.int64).tobytes()
    sparse_lying.sparse_csr.col_indices = np.asarray([99, -7], np.int64).tobytes()
    sparse_lying.sparse_csr.values = np.asarray([1.0], np.float32).tobytes()
    faults.append(("a sparse tensor whose offsets lie",
                   fb_message(known.model, [1, 2, 3], target_tokens=targets,
                              weights=sparse_lying).SerializeToString()))
    for label, tensor in [
            ("a negative shape", dense([1.0, 1.0, 1.0], shape=[-3])),
            ("a shape that does not match", dense([1.0, 1.0, 1.0], shape=[7, 7])),
            ("a shape of 2^62 elements", dense([1.0], shape=[1 << 31, 1 << 31])),
            ("an unknown dtype", pb.Tensor(dtype=77, shape=[3], dense=b"\0" * 12)),
            ("a dense buffer of 5 bytes", pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[1],
                                                    dense=b"\0" * 5))]:
        faults.append((label, fb_message(known.model, [1, 2, 3], target_tokens=targets,
                                         weights=tensor).SerializeToString()))
    faults.append(("32769 tokens in a datum",
                   fb_message(known.model, [1] * 32769).SerializeToString()))
    many = pb.ForwardBackwardRequest(model_id=known.model, loss_fn="cross_entropy")
    for _ in range(200_000):  # 400 kB of empty datums: far more memory once read
        many.data.add()
    faults.append(("200000 empty datums", many.SerializeToString()))
    faults.append(("no model_id", fb_message("", [1, 2, 3]).SerializeToString()))
    faults.append(("an unknown model", fb_message("nobody:train:0", [1, 2, 3],
                                                  target_tokens=targets).SerializeToString()))
    image = pb.ForwardBackwardRequest(model_id=known.model, loss_fn="cross_entropy")
    chunk = image.data.add().model_input.add()
    chunk.image.data = b"\x89PNG"
    faults.append(("an image chunk", image.SerializeToString()))
    deep = b"\x0a\x02" * 30000  # nested length-delimited fields, far deeper than any message
    faults.append(("deeply nested fields", deep))
    return faults


def zstd_bomb(size: int) -> bytes:
    """A few kilobytes of zstd that decompress to `size` bytes of zeros."""
    compressor = zstandard.ZstdCompressor(level=3)
    writer = compressor.chunker(chunk_size=1 << 16)
    out = []
    zeros = bytes(MIB)
    for _ in range(size // MIB):
        out += list(writer.compress(zeros))
    out += list(writer.finish())
    return b"".join(out)


def generate(known: Known, drawn: int) -> list[Fault]:
    """Every fixed fault (limits, bombs, protobufs, paths, damaged states, methods, query
    strings), then `drawn` faults drawn at random: a route and a way to break it."""
    rng = random.Random(SEED)
    templates = json_templates(known, rng)
    json_routes = sorted(templates)
    faults: list[Fault] = []
    plain_json = {"Content-Type": "application/json"}

    # Fixed faults, every one of its kind: limits, bombs, paths, damaged saved states.
    bomb = zstd_bomb(64 * MIB)
    for route in ("forward_backward", "asample", "create_model", "optim_step"):
        faults.append(Fault(f"zstd bomb (64 MiB of zeros in {len(bomb)} bytes) to {route}",
                            "POST", route, bomb, {"Content-Encoding": "zstd"}))
        faults.append(Fault(f"junk said to be zstd to {route}", "POST", route,
                            bytes(rng.randrange(256) for _ in range(300)),
                            {"Content-Encoding": "zstd"}))
        faults.append(Fault(f"a gzip body to {route}", "POST", route, b"\x1f\x8b" + b"\0" * 20,
                            {"Content-Encoding": "gzip"}))
    big = bytes(20 * MIB)
    faults.append(Fault("a 20 MB body to forward_backward", "POST", "forward_backward", big,
                        {"Content-Type": "application/x-protobuf"}))
    faults.append(Fault("a 20 MB JSON body to asample", "POST", "asample",
                        b'{"x": "' + b"a" * (20 * MIB) + b'"}', plain_json))
    for label, body in protobuf_faults(known, rng):
        faults.append(Fault(f"forward_backward: {label}", "POST", "forward_backward", body,
                            {"Content-Type": "application/x-protobuf"}))
    sample = templates["asample"]
    for label, path, value in [
            ("129 samples", ("num_samples",), 129), ("10^12 samples", ("num_samples",), 10 ** 12),
            ("no samples", ("num_samples",), 0), ("max_tokens 16385",
                                                   ("sampling_params", "max_tokens"), 16385),
            ("max_tokens -4", ("sampling_params", "max_tokens"), -4),
            ("temperature NaN", ("sampling_params", "temperature"), "NaN"),
            ("temperature -1", ("sampling_params", "temperature"), -1.0),
            ("top_p Infinity", ("sampling_params", "top_p"), "Infinity"),
            ("top_k -9", ("sampling_params", "top_k"), -9),
            ("top_k 10^20", ("sampling_params", "top_k"), 10 ** 20),
            ("a stop token of 10^20", ("sampling_params", "stop"), [10 ** 20]),
            ("a stop token of -5", ("sampling_params", "stop"), [-5]),
            ("seed 10^30", ("sampling_params", "seed"), 10 ** 30),
            ("a 32769-token prompt", ("prompt", "chunks", 0, "tokens"), [1] * 32769),
            ("a token past the vocabulary", ("prompt", "chunks", 0, "tokens"), [10 ** 12]),
            ("an image prompt", ("prompt", "chunks", 0), {"type": "image", "data": "AAAA",
                                                          "format": "png"})]:
        faults.append(Fault(f"asample: {label}", "POST", "asample",
                            dumps(with_field(sample, path, value)), plain_json))
    for name in ["x" * 300, "a\u0000b", "line\nbreak", "é" * 200, "a/b", "..", "."]:
        for route in ("save_weights", "save_weights_for_sampler"):
            faults.append(Fault(f"{route} named {name[:40]!r}", "POST", route, dumps(
                {**templates[route], "path": name}), plain_json))
    for seed in (-1, 2 ** 32, 10 ** 30):
        faults.append(Fault(f"create_model of LoRA seed {seed}", "POST", "create_model", dumps(
            with_field(templates["create_model"], ("lora_config", "seed"), seed)), plain_json))
    for name in ["x" * 5000, "a\u0000b", "", "/", "..", "/dev/zero", "/etc/passwd",
                 "zyquo-tiny/../../zyquo-tiny", "http://example.com/model"]:
        for route, body in [
                ("create_model", {**templates["create_model"], "base_model": name}),
                ("create_sampling_session", {**templates["create_sampling_session"],
                                             "base_model": name}),
                ("asample", {**sample, "sampling_session_id": None, "base_model": name})]:
            faults.append(Fault(f"{route} of base_model {name[:40]!r}", "POST", route,
                                dumps(body), plain_json))
    for path in bad_paths(known):
        for route, body in [
                ("load_weights", {"model_id": known.model, "path": path, "optimizer": True}),
                ("load_weights", {"session_id": known.session, "model_seq_id": 9000,
                                  "path": path, "optimizer": False}),
                ("create_sampling_session", {"session_id": known.session,
                                             "sampling_session_seq_id": 3, "model_path": path}),
                ("asample", {**sample, "sampling_session_id": None, "model_path": path}),
                ("weights_info", {"tinker_path": path})]:
            faults.append(Fault(f"{route} of {path[:60]!r}", "POST", route, dumps(body),
                                plain_json))
    for method, path in [("GET", "create_model"), ("DELETE", "asample"), ("POST", "healthz"),
                         ("GET", "no_such_route"), ("POST", "v2/forward_backward"),
                         ("GET", "samplers/nobody"), ("GET", "training_runs/nobody"),
                         ("GET", "training_runs/" + "r" * 400),
                         ("GET", "training_runs/../checkpoints"),
                         ("GET", f"training_runs/{known.run}/checkpoints"),
                         ("DELETE", f"training_runs/{known.run}/checkpoints/weights/nothing"),
                         ("DELETE", f"training_runs/{known.run}/checkpoints/optimizer/x"),
                         ("DELETE", f"training_runs/{known.run}/checkpoints/weights/../../x"),
                         ("DELETE", "training_runs/nobody/checkpoints/weights/x"),
                         ("POST", "sessions/nobody/finish")]:
        faults.append(Fault(f"{method} {path[:60]}", method, path))
    for route in ("training_runs", "checkpoints"):
        for params in ({"limit": "-1"}, {"offset": "many"}, {"limit": "9" * 5000},
                       {"limit": "10000000000000000000000", "offset": "10000000000000000000"},
                       {"limit": "1e3"}):
            faults.append(Fault(f"GET {route} {str(params)[:40]}", "GET", route, params=params))

    # Drawn faults: each picks a route and a way to break it.
    kinds = ["junk bytes", "wrong JSON", "bad field", "missing field", "unknown id",
             "content type", "truncated JSON"]
    fixed = len(faults)
    while len(faults) < fixed + drawn:
        route = rng.choice(json_routes)
        kind = rng.choice(kinds)
        template = templates[route]
        headers = dict(plain_json)
        if kind == "junk bytes":
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 3000)))
        elif kind == "wrong JSON":
            body = dumps(rng.choice([[], 3, "text", None, True, [template], {"": template},
                                     [[[[[]]]]], -1e308, "NaN"]))
        elif kind == "bad field":
            fields = field_paths(template)
            chosen = rng.choice(fields) if fields else ("x",)
            body = dumps(with_field(template, chosen, rng.choice(BAD_VALUES)))
            kind = f"bad field {'.'.join(map(str, chosen))}"
        elif kind == "missing field":
            if not template:
                continue
            name = rng.choice(list(template))
            body = dumps({k: v for k, v in template.items() if k != name})
            kind = f"no {name}"
        elif kind == "unknown id":
            body = dumps({k: (rng.randbytes(8).hex() if k.endswith("_id") else v)
                          for k, v in template.items()})
        elif kind == "content type":
            body = dumps(template) if rng.random() < 0.5 else b"a=1&b=2"
            headers = {"Content-Type": rng.choice(["text/plain", "application/x-protobuf",
                                                   "multipart/form-data; boundary=x",
                                                   "application/json; charset=latin-1"])}
        else:
            whole = dumps(template)
            body = whole[:rng.randrange(0, len(whole))]
        faults.append(Fault(f"{route}: {kind}", "POST", route, body, headers))
    return faults


# -- the server and its known ids --------------------------------------------------------------

def post(server, path: str, body: dict) -> dict:
    answer = server.post(path, json.dumps(body), **{"Content-Type": "application/json"})
    assert answer.status_code == 200, (path, answer.text)
    return answer.json()


def resolved(server, request_id: str) -> dict:
    for _ in range(30):
        answer = post(server, "retrieve_future", {"request_id": request_id})
        if answer.get("type") != "try_again":
            assert "error" not in answer, answer
            return answer
    raise AssertionError(f"request {request_id} did not finish")


def damage(state_folder: Path) -> list[Path]:
    """Copies of a real saved state, each damaged as a disk or a hand can damage one."""
    copies = {
        "no-description": lambda f: (f / "tinker.json").unlink(),
        "description-not-json": lambda f: (f / "tinker.json").write_text("{ not json"),
        "description-not-utf8": lambda f: (f / "tinker.json").write_bytes(b"\xff\xfe\x00\x81"),
        "description-a-list": lambda f: (f / "tinker.json").write_text("[1, 2]"),
        "description-bad-rank": lambda f: (f / "tinker.json").write_text(json.dumps(
            {**json.loads((f / "tinker.json").read_text()), "rank": "eight"})),
        "description-no-model": lambda f: (f / "tinker.json").write_text(json.dumps(
            {**json.loads((f / "tinker.json").read_text()), "folder": "/nowhere/model"})),
        "description-a-folder": lambda f: ((f / "tinker.json").unlink(),
                                           (f / "tinker.json").mkdir()),
        "no-weights": lambda f: [p.unlink() for p in f.rglob("*.safetensors")],
        "weights-junk": lambda f: [p.write_bytes(b"junk") for p in f.rglob("*.safetensors")],
        "empty": lambda f: [shutil.rmtree(p) if p.is_dir() else p.unlink()
                            for p in list(f.iterdir())],
    }
    made = []
    for name, spoil in copies.items():
        copy = state_folder.parent / name
        shutil.copytree(state_folder, copy)
        spoil(copy)
        made.append(copy)
    return made


@pytest.fixture(scope="module")
def server(tmp_path_factory, sample_models):
    home = tmp_path_factory.mktemp("tinker-faults-home")
    (home / "models").mkdir()
    shutil.copytree(sample_models["zyquo-tiny"], home / "models" / "zyquo-tiny")
    running = start_server(home)
    yield running
    stop(running)


@pytest.fixture(scope="module")
def known(server) -> Known:
    session = post(server, "create_session", {"tags": [], "user_metadata": None,
                                              "sdk_version": "0.38.0"})["session_id"]
    created = post(server, "create_model", {"session_id": session, "model_seq_id": 0,
                                            "base_model": "zyquo-tiny",
                                            "lora_config": {"rank": 2}})
    resolved(server, created["request_id"])
    model = created["model_id"]
    saved = resolved(server, post(server, "save_weights", {"model_id": model,
                                                           "path": "good"})["request_id"])
    state = saved["path"]
    run = state[len("tinker://"):].split("/")[0]
    folder = server.home / "runs" / run / "tinker" / "weights" / "good"
    damaged = [f"tinker://{run}/weights/{copy.name}" for copy in damage(folder)]
    sampler = post(server, "create_sampling_session", {
        "session_id": session, "sampling_session_seq_id": 0,
        "base_model": "zyquo-tiny"})["sampling_session_id"]
    return Known(session, model, sampler, run, state, damaged)


def send(server, fault: Fault) -> httpx.Response:
    headers = {"X-API-Key": server.key, **fault.headers}
    return httpx.request(fault.method, f"{server.url}/api/v1/{fault.path}", content=fault.body,
                         headers=headers, params=fault.params, timeout=120)


def future_problem(server, request_id: str) -> str | None:
    """Why an accepted request's future is a server error (None when it is not): its poll
    answered 5xx, or it failed other than as the program's own mistake."""
    while True:
        answer = server.post("retrieve_future", json.dumps({"request_id": request_id}))
        if answer.status_code >= 500:
            return f"retrieve_future answered {answer.status_code}: {answer.text[:300]}"
        if answer.headers.get("content-type", "").startswith("application/x-protobuf"):
            return None
        result = answer.json()
        if result.get("type") == "try_again":
            continue
        if "error" in result and result.get("category") != "user":
            return f"its future failed on the server: {result['error'][:300]}"
        return None


def is_one_sentence(answer: httpx.Response) -> bool:
    try:
        sentence = answer.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return False
    return (isinstance(sentence, str) and len(sentence) > 10 and sentence.endswith(".")
            and sentence.isprintable() and "Traceback" not in sentence)


def test_hundreds_of_malformed_requests_get_a_sentence_and_never_a_server_error(server, known):
    faults = generate(known, drawn=320)
    assert len(faults) >= 500
    routes = {fault.path.split("/")[0] for fault in faults}
    assert {"forward_backward", "optim_step", "asample", "create_model", "load_weights",
            "create_sampling_session", "retrieve_future", "weights_info", "training_runs",
            "checkpoints", "samplers", "sessions", "session_heartbeat", "get_info",
            "save_weights", "save_weights_for_sampler", "client", "create_session"} <= routes
    failures, accepted = [], []
    statuses: dict[int, int] = {}
    for number, fault in enumerate(faults):
        answer = send(server, fault)
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        if answer.status_code >= 500:
            failures.append(f"#{number} {fault.label}: {answer.status_code} {answer.text[:300]}")
        elif answer.status_code >= 400 and not is_one_sentence(answer):
            failures.append(f"#{number} {fault.label}: {answer.status_code} without one "
                            f"sentence: {answer.text[:300]}")
        elif answer.status_code == 200 and "request_id" in answer.text:
            accepted.append((number, fault.label, answer.json().get("request_id")))
    # What was accepted is resolved too: its failure is a sentence, never a server error.
    for number, label, request_id in accepted:
        if isinstance(request_id, str):
            problem = future_problem(server, request_id)
            if problem:
                failures.append(f"#{number} {label}: {problem}")
    assert not failures, f"{len(failures)} of {len(faults)}:\n" + "\n".join(failures)
    # The limits answer as documented: 413 for the body, 400 for the rest.
    assert statuses.get(413, 0) >= 2 and statuses.get(400, 0) >= 200, statuses
    assert server.process.poll() is None


def peak_memory(pid: int) -> int | None:
    """The process's peak resident memory in bytes (Linux's VmHWM; None elsewhere)."""
    status = Path(f"/proc/{pid}/status")
    found = re.search(r"^VmHWM:\s+(\d+) kB", status.read_text(), flags=re.M) \
        if status.exists() else None
    return int(found.group(1)) * 1024 if found else None


def test_the_limits_say_which_limit_and_what_to_do(server, known):
    big = send(server, Fault("20 MB", "POST", "forward_backward", bytes(20 * MIB)))
    assert big.status_code == 413
    assert "max_body_bytes" in big.json()["detail"] and "16777216" in big.json()["detail"]
    # Sent in chunks with no length declared: counted as it arrives, refused past the limit.
    chunked = httpx.post(f"{server.url}/api/v1/forward_backward",
                         content=(bytes(MIB) for _ in range(20)),
                         headers={"X-API-Key": server.key}, timeout=120)
    assert chunked.status_code == 413 and "max_body_bytes" in chunked.json()["detail"]
    # A gigabyte of zeros in 32 kB of zstd, three times: refused, and the server's peak
    # memory does not grow by the gigabyte (it decompresses at most the limit, a piece at a
    # time). `serve` execs the server: its pid is the server's.
    before = peak_memory(server.process.pid)
    gigabyte = zstd_bomb(1024 * MIB)
    for _ in range(3):
        bomb = send(server, Fault("bomb", "POST", "forward_backward", gigabyte,
                                  {"Content-Encoding": "zstd"}))
        assert bomb.status_code == 400 and "decompresses to more than" in bomb.json()["detail"]
    if before is not None:
        assert peak_memory(server.process.pid) - before < 256 * MIB
    sample = json_templates(known, random.Random(1))["asample"]
    many = server.post("asample", dumps({**sample, "num_samples": 129}))
    assert many.status_code == 400 and "(128, config.toml [serve] max_num_samples)" in \
        many.json()["detail"]
    long = server.post("asample", dumps(with_field(sample, ("sampling_params", "max_tokens"),
                                                   16385)))
    assert long.status_code == 400 and "between 0 and 16384" in long.json()["detail"]
    prompt = server.post("asample", dumps(with_field(sample, ("prompt", "chunks", 0, "tokens"),
                                                     [1] * 32769)))
    assert prompt.status_code == 400 and "32769 tokens" in prompt.json()["detail"]
    datum = send(server, Fault("datum", "POST", "forward_backward",
                               fb_message(known.model, [1] * 32769).SerializeToString()))
    assert datum.status_code == 400 and "max_sequence_tokens" in datum.json()["detail"]
    sparse = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[4097, 4097])
    sparse.sparse_csr.crow_indices = np.zeros(4098, np.int64).tobytes()
    tensor = send(server, Fault("tensor", "POST", "forward_backward", fb_message(
        known.model, [1, 2, 3], weights=sparse).SerializeToString()))
    assert tensor.status_code == 400 and "16785409 elements" in tensor.json()["detail"]
    # Just under the limits, a request is served.
    fine = server.post("asample", dumps({**sample, "num_samples": 128}))
    assert fine.status_code == 200, fine.text
    assert future_problem(server, fine.json()["request_id"]) is None


def test_a_bad_saved_state_is_a_sentence_that_names_it(server, known):
    prompt = {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]}
    for path in known.damaged:
        folder = path.rsplit("/", 1)[1]
        answer = server.post("create_sampling_session", json.dumps({
            "session_id": known.session, "sampling_session_seq_id": 5, "model_path": path}))
        if answer.status_code != 200:  # found at once: a damaged description
            assert answer.status_code == 400 and is_one_sentence(answer), (path, answer.text)
            assert folder in answer.json()["detail"], answer.text
            continue
        # Found when its weights are read: the sample fails as the program's mistake.
        sampled = server.post("asample", json.dumps({
            "sampling_session_id": answer.json()["sampling_session_id"], "num_samples": 1,
            "prompt": prompt, "sampling_params": {"max_tokens": 1}}))
        request_id = sampled.json()["request_id"]
        while (result := server.post("retrieve_future", json.dumps(
                {"request_id": request_id})).json()).get("type") == "try_again":
            pass
        assert result.get("category") == "user", (path, result)
        assert "\n" not in result["error"] and result["error"].endswith("."), result


def test_a_step_whose_metrics_are_not_finite_is_answered_as_they_are(server, known):
    # Log-probabilities of 1e30 make a finite ppo loss whose gradients are not: the step's
    # grad_norm is NaN, which its result carries (JSON's NaN, as the SDK's reader takes it)
    # instead of failing the poll.
    created = post(server, "create_model", {"session_id": known.session, "model_seq_id": 77,
                                            "base_model": "zyquo-tiny",
                                            "lora_config": {"rank": 2}})
    resolved(server, created["request_id"])
    model = created["model_id"]
    ppo = fb_message(model, [1, 2, 3], target_tokens=dense([2, 3, 4], pb.DTYPE_INT64),
                     logprobs=dense([-1e30, 1e30, 0.0]), advantages=dense([1.0, 1.0, 1.0]))
    ppo.loss_fn = "ppo"
    accepted = send(server, Fault("ppo", "POST", "forward_backward", ppo.SerializeToString()))
    assert future_problem(server, accepted.json()["request_id"]) is None
    step = post(server, "optim_step", {"model_id": model, "adam_params": {"learning_rate": 0.1}})
    answer = server.post("retrieve_future", json.dumps({"request_id": step["request_id"]}))
    while answer.json().get("type") == "try_again":
        answer = server.post("retrieve_future", json.dumps({"request_id": step["request_id"]}))
    assert answer.status_code == 200 and math.isnan(answer.json()["metrics"]["grad_norm:mean"])


def test_an_sdk_program_trains_on_the_server_after_the_faults(server, known):
    # After every fault above (pytest runs this file's tests in order): a whole program.
    from conftest import REPO

    env = {**os.environ, "TINKER_BASE_URL": server.url, "TINKER_API_KEY": server.key,
           "TINKER_TELEMETRY": "0"}
    done = subprocess.run([sys.executable, str(REPO / "examples" / "tinker_sft.py"),
                           "--steps", "4"], capture_output=True, text=True, timeout=600,
                          env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    losses = [float(x) for x in re.findall(r"\(([\d.naif]+) per token\)", done.stdout)]
    assert len(losses) == 4 and all(math.isfinite(loss) for loss in losses), done.stdout
    assert losses[-1] < losses[0]
    assert httpx.get(f"{server.url}/api/v1/healthz", headers={"X-API-Key": server.key},
                     timeout=10).json() == {"status": "ok"}
    assert server.process.poll() is None


def test_the_sdk_splits_its_batches_to_the_servers_limits_and_is_told_the_others(
        tmp_path, sample_models, monkeypatch):
    # A server of its own with small limits: the SDK learns max_datums from the server's
    # client config and sends a batch of 5 in requests of 2; a sample over max_num_samples
    # is the program's error, with the sentence.
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    shutil.copytree(sample_models["zyquo-tiny"], home / "models" / "zyquo-tiny")
    (home / "config.toml").write_text("[serve]\nmax_datums = 2\nmax_num_samples = 2\n")
    small = start_server(home)
    try:
        monkeypatch.setenv("TINKER_BASE_URL", small.url)
        monkeypatch.setenv("TINKER_API_KEY", small.key)
        monkeypatch.setenv("TINKER_TELEMETRY", "0")
        from test_tinker_server import ADAM, TEXTS, sft_datum

        service = tinker.ServiceClient()
        training = service.create_lora_training_client(base_model="zyquo-tiny", rank=2,
                                                       seed=3).result()
        tokenizer = training.get_tokenizer()
        data = [sft_datum(tokenizer, TEXTS[i % 2]) for i in range(5)]
        losses = []
        for _ in range(3):
            result = training.forward_backward(data, "cross_entropy").result()
            training.optim_step(ADAM).result()
            assert len(result.loss_fn_outputs) == 5
            losses.append(result.metrics["loss:sum"])
        assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0]
        sampler = training.save_weights_and_get_sampling_client().result()
        with pytest.raises(tinker.BadRequestError, match="max_num_samples"):
            sampler.sample(tinker.types.ModelInput.from_ints([1, 2, 3]), 3,
                           tinker.types.SamplingParams(max_tokens=2)).result()
        service.close("success").result(timeout=60)
    finally:
        os.killpg(small.process.pid, signal.SIGTERM)
        small.process.wait(timeout=30)
