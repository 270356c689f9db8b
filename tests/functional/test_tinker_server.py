"""`zyquo-tui serve` driven by the official tinker SDK, as a Tinker program drives Tinker: a real
server subprocess on loopback, the sample model, real training."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    def __init__(self, home: Path, process: subprocess.Popen, url: str, key: str) -> None:
        self.home, self.process, self.url, self.key = home, process, url, key

    def post(self, path: str, content: bytes | str, key: str | None = "mine", **headers):
        headers = dict(headers)
        if key is not None:
            headers["X-API-Key"] = self.key if key == "mine" else key
        return httpx.post(f"{self.url}/api/v1/{path}", content=content, headers=headers,
                          timeout=30)


def start_server(home: Path) -> Server:
    port = free_port()
    env = {**os.environ, "ZYQUO_HOME": str(home)}
    process = subprocess.Popen([sys.executable, "-m", "zyquo_tui", "serve", "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    key_file = home / "tinker_api_key"
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        if key_file.is_file():
            try:
                key = key_file.read_text().strip()
                if httpx.get(f"{url}/api/v1/healthz", headers={"X-API-Key": key},
                             timeout=5).status_code == 200:
                    return Server(home, process, url, key)
            except httpx.TransportError:
                pass
        time.sleep(0.2)
    raise AssertionError("the server did not answer within 120 s")


def stop(server) -> None:
    """The server started by start_server stopped as a service manager stops it (SIGTERM to
    its group), killed when it does not end within a minute."""
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)


def stop_detached(pid: int) -> None:
    """A `serve --detach` server (no child of the test's) stopped, and waited for 10 s."""
    os.killpg(pid, signal.SIGTERM)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)


@contextlib.contextmanager
def serving(home: Path, sample_models, monkeypatch):
    """A server on the store at `home` with the sample model, the SDK pointed at it by its
    environment (TINKER_BASE_URL, TINKER_API_KEY), stopped at the end."""
    (home / "models").mkdir(parents=True, exist_ok=True)
    shutil.copytree(sample_models["zyquo-tiny"], home / "models" / "zyquo-tiny")
    server = start_server(home)
    monkeypatch.setenv("TINKER_BASE_URL", server.url)
    monkeypatch.setenv("TINKER_API_KEY", server.key)
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    try:
        yield server
    finally:
        stop(server)


@pytest.fixture(scope="module")
def server(tmp_path_factory, sample_models):
    home = tmp_path_factory.mktemp("tinker-home")
    (home / "models").mkdir()
    for name, folder in sample_models.items():
        shutil.copytree(folder, home / "models" / name)
    running = start_server(home)
    yield running
    stop(running)


@pytest.fixture
def service_client(server, monkeypatch):
    monkeypatch.setenv("TINKER_BASE_URL", server.url)
    monkeypatch.setenv("TINKER_API_KEY", server.key)
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    client = tinker.ServiceClient()
    yield client
    client.close("success").result(timeout=60)


def sft_datum(tokenizer, text: str) -> types.Datum:
    ids = tokenizer.encode(text)
    weights = [0.0] * 2 + [1.0] * (len(ids) - 3)  # the first tokens as a prompt: not trained
    return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                       loss_fn_inputs={"target_tokens": ids[1:], "weights": weights})


TEXTS = ["The quick brown fox jumps over the lazy dog.", "Two plus two is four, not five."]


def test_the_key_is_made_once_readable_by_its_owner_and_needed(server):
    assert server.key.startswith("tml-")
    assert (server.home / "tinker_api_key").stat().st_mode & 0o777 == 0o600
    assert server.post("create_session", "{}", key=None).status_code == 401
    assert server.post("create_session", "{}", key="tml-not-it").status_code == 401
    refused = httpx.get(f"{server.url}/api/v1/get_server_capabilities", timeout=30)
    assert refused.status_code == 401 and "TINKER_API_KEY" in refused.json()["detail"]


def test_serve_show_key_makes_the_key_once_prints_it_and_exits(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "ZYQUO_HOME": str(home)}

    def show_key() -> str:
        done = subprocess.run([sys.executable, "-m", "zyquo_tui", "serve", "--show-key"],
                              capture_output=True, text=True, timeout=60, env=env,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return done.stdout

    first = show_key()
    assert first.startswith("tml-") and first.count("\n") == 1
    assert (home / "tinker_api_key").stat().st_mode & 0o777 == 0o600
    assert show_key() == first == (home / "tinker_api_key").read_text()


def test_capabilities_list_the_library_models_by_name_and_folder(server, service_client):
    names = [m.model_name for m in tinker.RestClient().get_server_capabilities().result()
             .supported_models]
    assert "zyquo-tiny" in names
    assert str((server.home / "models" / "zyquo-tiny").resolve()) in names


def test_a_supervised_loop_through_the_sdk_lowers_the_summed_loss(server, service_client):
    training = service_client.create_lora_training_client(base_model="zyquo-tiny", rank=8,
                                                          seed=3).result()
    info = training.get_info()
    assert info.lora_rank == 8 and info.model_data.model_name == "zyquo-tiny"
    tokenizer = training.get_tokenizer()
    data = [sft_datum(tokenizer, text) for text in TEXTS]
    losses = []
    for _ in range(10):
        forward_backward = training.forward_backward(data, "cross_entropy")
        step = training.optim_step(types.AdamParams(learning_rate=1e-2))
        result = forward_backward.result()
        assert step.result().metrics["learning_rate:mean"] == pytest.approx(1e-2)
        losses.append(result.metrics["loss:sum"])
        # Tinker's cross_entropy: the sum over tokens of -weight * log p(target), with each
        # datum's per-token log-probabilities returned.
        summed = 0.0
        for datum, output in zip(data, result.loss_fn_outputs, strict=True):
            logprobs = np.asarray(output["logprobs"].data)
            weights = np.asarray(datum.loss_fn_inputs["weights"].data)
            assert logprobs.shape == weights.shape and (logprobs <= 0).all()
            summed += float(-(weights * logprobs).sum())
        assert result.metrics["loss:sum"] == pytest.approx(summed, rel=1e-4)
    assert losses[-1] < 0.8 * losses[0] and min(losses[5:]) < min(losses[:5]), losses


def new_training_client(service_client, seed: int = 7):
    return service_client.create_lora_training_client(base_model="zyquo-tiny", rank=4,
                                                      seed=seed).result()


ADAM = types.AdamParams(learning_rate=1e-2)


def step(training, data, loss_fn="cross_entropy", config=None) -> float:
    forward_backward = training.forward_backward(data, loss_fn, config)
    training.optim_step(ADAM).result()
    return forward_backward.result().metrics["loss:sum"]


def test_an_rl_loop_samples_scores_and_trains_with_importance_sampling(server, service_client):
    training = new_training_client(service_client)
    tokenizer = training.get_tokenizer()
    prompt = tokenizer.encode("Count: one two")
    wanted = prompt[-1]  # the reward: how often the completion repeats the prompt's last token
    for iteration in range(3):
        sampler = training.save_weights_and_get_sampling_client().result()
        result = sampler.sample(types.ModelInput.from_ints(prompt), 4,
                                types.SamplingParams(max_tokens=6, temperature=1.0,
                                                     seed=iteration, stop=[])).result()
        assert len(result.sequences) == 4
        rewards = [sum(t == wanted for t in s.tokens) / len(s.tokens) for s in result.sequences]
        mean = sum(rewards) / len(rewards)
        data, advantages_sum = [], 0.0
        for sequence, reward in zip(result.sequences, rewards, strict=True):
            assert len(sequence.tokens) == 6 and sequence.stop_reason == "length"
            tokens = prompt + sequence.tokens
            n = len(tokens) - 1
            completion = len(sequence.tokens)
            advantages = [0.0] * (n - completion) + [reward - mean + 0.25] * completion
            advantages_sum += sum(advantages)
            data.append(types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:],
                                "logprobs": [0.0] * (n - completion) + sequence.logprobs,
                                "advantages": advantages}))
        loss = step(training, data, "importance_sampling")
        # Sampled with the weights being trained: every ratio is 1 before the update, so the
        # loss is minus the advantages' sum (the sampler's log-probabilities are the trainer's).
        assert loss == pytest.approx(-advantages_sum, rel=1e-3, abs=1e-3)


def test_a_state_saved_with_its_optimizer_goes_on_as_if_never_stopped(server, service_client):
    training = new_training_client(service_client, seed=11)
    data = [sft_datum(training.get_tokenizer(), text) for text in TEXTS]
    for _ in range(3):
        step(training, data)
    path = training.save_state("after-3").result().path
    assert path.startswith("tinker://") and path.endswith("/weights/after-3")
    went_on = [step(training, data) for _ in range(2)]

    resumed = service_client.create_training_client_from_state_with_optimizer(path).result()
    assert [step(resumed, data) for _ in range(2)] == pytest.approx(went_on, rel=1e-5)
    # Without the optimizer's moments the first step is a fresh Adam step: not the same.
    fresh = service_client.create_training_client_from_state(path).result()
    first = fresh.forward(data, "cross_entropy").result().metrics["loss:sum"]
    assert first == pytest.approx(went_on[0], rel=1e-5)  # same weights...
    step(fresh, data)
    assert step(fresh, data) != pytest.approx(went_on[1], rel=1e-5)  # ...another optimizer


def test_forward_backward_custom_trains_as_the_built_in_loss_it_restates(server,
                                                                         service_client):
    # torch is in the test extra: without it this is a failure, never a skip that would hide
    # forward_backward_custom going untested.
    import torch
    built_in, custom = new_training_client(service_client, 5), new_training_client(
        service_client, 5)
    data = [sft_datum(built_in.get_tokenizer(), text) for text in TEXTS]

    def negative_log_likelihood(datums, logprobs):
        loss = sum((-lp * torch.tensor(d.loss_fn_inputs["weights"].data)).sum()
                   for d, lp in zip(datums, logprobs, strict=True))
        return loss, {"custom:sum": float(loss.detach())}

    expected = step(built_in, data)
    forward_backward = custom.forward_backward_custom(data, negative_log_likelihood)
    custom.optim_step(ADAM).result()
    result = forward_backward.result()
    assert result.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    after = [c.forward(data, "cross_entropy").result().metrics["loss:sum"]
             for c in (built_in, custom)]
    assert after[1] == pytest.approx(after[0], rel=1e-4) and after[0] < expected


def test_a_sampling_client_from_saved_weights_samples_as_the_trained_model(server,
                                                                         service_client):
    training = new_training_client(service_client, seed=13)
    tokenizer = training.get_tokenizer()
    data = [sft_datum(tokenizer, text) for text in TEXTS]
    for _ in range(4):
        step(training, data)
    prompt = types.ModelInput.from_ints(tokenizer.encode("The quick"))
    greedy = types.SamplingParams(max_tokens=8, temperature=0.0, stop=[])
    live = training.save_weights_and_get_sampling_client().result()
    path = training.save_weights_for_sampler("four-steps").result().path
    assert "/sampler_weights/four-steps" in path
    step(training, data)  # later training changes neither sampler
    saved = service_client.create_sampling_client(model_path=path).result()
    base = service_client.create_sampling_client(base_model="zyquo-tiny").result()
    answers = [s.sample(prompt, 1, greedy).result().sequences[0].tokens
               for s in (live, saved, base)]
    assert answers[0] == answers[1] and len(answers[0]) == 8
    logprobs = [s.compute_logprobs(prompt).result() for s in (live, saved, base)]
    assert logprobs[0][0] is None and logprobs[0][1:] == pytest.approx(logprobs[1][1:],
                                                                       rel=1e-5)
    assert logprobs[2][1:] != pytest.approx(logprobs[0][1:], rel=1e-3)


def runs_cli(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zyquo_tui", "runs", *args],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "ZYQUO_HOME": str(server.home)})


def run_of(server, name_part: str) -> dict:
    import json

    listed = json.loads(runs_cli(server, "list", "--json").stdout)
    rows = listed if isinstance(listed, list) else listed.get("runs", [])
    return next(row for row in rows if name_part in row.get("name", ""))


def test_each_training_client_is_a_run_with_its_steps_and_a_cancel_ends_it(server,
                                                                          service_client):
    from zyquo_tui.core.events.protocol import read_events

    training = new_training_client(service_client, seed=17)
    data = [sft_datum(training.get_tokenizer(), text) for text in TEXTS]
    losses = [step(training, data) for _ in range(3)]
    session = training.model_id.split(":")[0]
    run = run_of(server, session)
    assert run["state"] == "running"
    assert run["step"] >= 1  # the listing follows the program's steps (at most 2 s behind)
    assert run["iters"] is None  # the program decides how many: the table reads N/?
    table = runs_cli(server, "list").stdout
    assert f"{run['step']}/?" in next(line for line in table.splitlines()
                                      if line.startswith(run["id"]))
    events = read_events(server.home / "runs" / run["id"] / "events.jsonl")
    train = [e for e in events if e["type"] == "train"]
    assert [e["iteration"] for e in train] == [1, 2, 3]
    assert [e["train_loss"] for e in train] == pytest.approx(losses, rel=1e-6)
    assert all(e["learning_rate"] == pytest.approx(1e-2) for e in train)
    path = training.save_state("kept").result().path
    assert path == f"tinker://{run['id']}/weights/kept"
    assert any(e["type"] == "checkpoint" for e in
               read_events(server.home / "runs" / run["id"] / "events.jsonl"))
    assert run_of(server, session)["step"] == 3  # a checkpoint writes the summary at once

    done = runs_cli(server, "cancel", run["id"])
    assert done.returncode == 0, done.stderr
    with pytest.raises(tinker.RequestFailedError, match="was cancelled"):
        training.forward_backward(data, "cross_entropy").result()
    assert run_of(server, session)["state"] == "cancelled"
    # The server and other programs go on.
    other = new_training_client(service_client, seed=18)
    assert step(other, data) > 0


def test_malformed_requests_get_one_sentence_and_the_session_goes_on(server, service_client):
    training = new_training_client(service_client, seed=19)
    data = [sft_datum(training.get_tokenizer(), text) for text in TEXTS]
    before = step(training, data)
    bodies = [("forward_backward", b"\xff\x00 not a protobuf"), ("optim_step", "{not json"),
              ("optim_step", '{"model_id": 3}'), ("create_model", "[]"),
              ("asample", '{"prompt": {"chunks": "x"}}'), ("retrieve_future", "null")]
    for index in range(100):
        path, body = bodies[index % len(bodies)]
        answer = server.post(path, body, **{"Content-Type": "application/json"})
        assert answer.status_code == 400, (path, answer.text)
        sentence = answer.json()["detail"]
        assert sentence.endswith(".") and "\n" not in sentence and "Traceback" not in sentence
    assert step(training, data) < before


def test_the_tinker_example_trains_saves_and_samples(server):
    from conftest import REPO

    env = {**os.environ, "TINKER_BASE_URL": server.url, "TINKER_API_KEY": server.key,
           "TINKER_TELEMETRY": "0"}
    done = subprocess.run([sys.executable, str(REPO / "examples" / "tinker_sft.py"), "--steps",
                           "8"], capture_output=True, text=True, timeout=600, env=env,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    import re

    per_token = [float(x) for x in re.findall(r"\(([\d.]+) per token\)", done.stdout)]
    assert len(per_token) == 8 and per_token[-1] < per_token[0]
    assert re.search(r"^saved tinker://\S+/weights/tinker-sft$", done.stdout, flags=re.M)
    assert "answer: " in done.stdout


def test_a_training_client_that_wont_fit_is_refused_with_the_memory_verdict(server,
                                                                           service_client):
    future = service_client.create_lora_training_client(base_model="zyquo-tiny",
                                                        rank=4_000_000)
    with pytest.raises(tinker.RequestFailedError, match="won't fit in memory") as refused:
        future.result()
    assert "\n" not in str(refused.value).split(" for self.request_id")[0]
    fine = new_training_client(service_client, seed=23)  # the server goes on
    assert fine.get_info().lora_rank == 4


def test_two_programs_at_once_do_not_move_each_others_training(server, service_client):
    alone = new_training_client(service_client, seed=29)
    data = [sft_datum(alone.get_tokenizer(), TEXTS[0])]
    other_data = [sft_datum(alone.get_tokenizer(), TEXTS[1])]
    expected = [step(alone, data) for _ in range(3)]
    other_program = tinker.ServiceClient()
    try:
        again = new_training_client(service_client, seed=29)
        other = new_training_client(other_program, seed=31)
        losses = []
        for _ in range(3):
            losses.append(step(again, data))
            step(other, other_data)
            other.save_weights_and_get_sampling_client().result().sample(
                types.ModelInput.from_ints([1, 2, 3]), 1,
                types.SamplingParams(max_tokens=3, temperature=1.0)).result()
        assert losses == pytest.approx(expected, rel=1e-6)
    finally:
        other_program.close("success").result(timeout=60)


def test_a_program_that_vanishes_leaves_its_run_interrupted(tmp_path, sample_models,
                                                           monkeypatch):
    # A server of its own that waits 2 s for a heartbeat; the "program" is plain HTTP, so it
    # can stop beating as a killed process would.
    monkeypatch.setenv("ZYQUO_TINKER_HEARTBEAT_TIMEOUT", "2")
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    shutil.copytree(sample_models["zyquo-tiny"], home / "models" / "zyquo-tiny")
    quiet = start_server(home)
    try:
        session = quiet.post("create_session", '{"tags": [], "user_metadata": null, '
                             '"sdk_version": "0.38.0"}').json()["session_id"]
        created = quiet.post("create_model", f'{{"session_id": "{session}", "model_seq_id": 0, '
                             '"base_model": "zyquo-tiny", "lora_config": {"rank": 2}}').json()
        answer = quiet.post("retrieve_future", f'{{"request_id": "{created["request_id"]}"}}')
        assert answer.json().get("model_id") == created["model_id"], answer.text
        deadline = time.monotonic() + 60
        while run_of(quiet, session)["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert run_of(quiet, session)["state"] == "interrupted"
        late = quiet.post("optim_step", f'{{"model_id": "{created["model_id"]}", '
                          '"adam_params": {"learning_rate": 0.001}}')
        assert late.status_code == 410 and "no heartbeat" in late.json()["detail"]
    finally:
        os.killpg(quiet.process.pid, signal.SIGTERM)
        quiet.process.wait(timeout=30)


def test_serve_detach_outlives_its_command_and_serves(tmp_path):
    home = tmp_path / "home"
    port = free_port()
    done = subprocess.run([sys.executable, "-m", "zyquo_tui", "serve", "--detach", "--port",
                           str(port)], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env={**os.environ, "ZYQUO_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    import re

    pid = int(re.search(r"\(pid (\d+),", done.stdout).group(1))
    try:
        key = (home / "tinker_api_key").read_text().strip()
        # The key is never in the output (it goes to logs): `serve --show-key` prints it.
        assert key not in done.stdout and "serve --show-key" in done.stdout
        assert key not in (home / "serve.log").read_text()
        shown = subprocess.run([sys.executable, "-m", "zyquo_tui", "serve", "--show-key"],
                               capture_output=True, text=True, timeout=60,
                               env={**os.environ, "ZYQUO_HOME": str(home)})
        assert shown.returncode == 0 and shown.stdout.strip() == key
        assert os.getsid(pid) == pid  # a session of its own: a closed terminal does not end it
        answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz",
                           headers={"X-API-Key": key}, timeout=10)
        assert answer.json() == {"status": "ok"}
    finally:
        stop_detached(pid)


def test_serve_refuses_a_wrong_serve_setting_in_one_sentence(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[serve]\nmax_num_samples = 0\n")
    done = subprocess.run([sys.executable, "-m", "zyquo_tui", "serve", "--port",
                           str(free_port())], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ZYQUO_HOME": str(home)}, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"zyquo-tui: {home / 'config.toml'}:2: [serve] "
                                   "max_num_samples must be a whole number of at least 1, not 0; "
                                   "fix the file.")


def test_waiting_on_a_forward_backward_before_its_step_gives_the_same_training(
        server, service_client):
    # Submitted together, the two run as one compiled step; waited on first, the
    # forward_backward runs alone. Same losses either way.
    together, apart = new_training_client(service_client, 37), new_training_client(
        service_client, 37)
    data = [sft_datum(together.get_tokenizer(), text) for text in TEXTS]
    expected = [step(together, data) for _ in range(3)]
    losses = []
    for _ in range(3):
        losses.append(apart.forward_backward(data, "cross_entropy").result()
                      .metrics["loss:sum"])
        apart.optim_step(ADAM).result()
    assert losses == pytest.approx(expected, rel=1e-5)


def test_cross_entropy_through_the_server_is_the_clients_sft_sum(server, service_client):
    # Before any step, LoRA adds nothing: both are the base model. The client's SFT loss is
    # mlx-lm's mean over its mask, which also trains the prediction after a row's last token
    # (its target the padding token 0): the same positions as a Datum whose last target is 0.
    from zyquo_tui.client import TrainingBatch, TrainingClient
    from zyquo_tui.trainer.encoding import encode_row

    with TrainingClient.from_model(server.home / "models" / "zyquo-tiny", method="lora",
                                   num_layers=-1) as client:
        result = client.forward_backward(TrainingBatch([TEXTS[0]])).result()
        tokens, _ = encode_row(client.tokenizer, TEXTS[0], None, False)
    training = new_training_client(service_client, seed=41)
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens),
                        loss_fn_inputs={"target_tokens": tokens[1:] + [0],
                                        "weights": [1.0] * len(tokens)})
    served = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    assert result.num_tokens == len(tokens)
    assert served == pytest.approx(result.loss * result.num_tokens, rel=1e-5)


def test_the_rest_client_lists_training_runs_and_checkpoints_and_deletes_them(
        server, service_client):
    metadata = {"renderer_name": "role_colon"}  # what tinker-cookbook reads back
    training = service_client.create_lora_training_client(
        base_model="zyquo-tiny", rank=4, seed=43, user_metadata=metadata).result()
    data = [sft_datum(training.get_tokenizer(), TEXTS[0])]
    step(training, data)
    state = training.save_state("first").result().path
    sampled = training.save_weights_for_sampler("for-sampling").result().path
    run_id = state.split("/")[2]
    rest = tinker.RestClient()

    run = rest.get_training_run_by_tinker_path(sampled).result()
    assert (run.training_run_id, run.base_model, run.lora_rank, run.user_metadata) == (
        run_id, "zyquo-tiny", 4, metadata)
    assert run.last_checkpoint.tinker_path == state
    assert run.last_sampler_checkpoint.tinker_path == sampled
    assert rest.get_training_run(run_id).result().training_run_id == run_id

    every = rest.list_training_runs(limit=100).result()
    served = sorted(p.parent.parent.name for p in
                    (server.home / "runs").glob("*/tinker/training_run.json"))
    assert sorted(r.training_run_id for r in every.training_runs) == served
    assert every.cursor.total_count == len(served) and run_id in served
    newest = rest.list_training_runs(limit=1).result()  # newest first
    assert [r.training_run_id for r in newest.training_runs] == [run_id]

    listed = rest.list_checkpoints(run_id).result().checkpoints
    assert sorted((c.checkpoint_type, c.tinker_path, c.checkpoint_id) for c in listed) == [
        ("sampler", sampled, "sampler_weights/for-sampling"),
        ("training", state, "weights/first")]
    assert all(c.size_bytes > 0 for c in listed)
    latest = rest.list_user_checkpoints(limit=2).result()
    assert {c.tinker_path for c in latest.checkpoints} == {state, sampled}
    assert latest.cursor.total_count >= 2  # with the other tests' checkpoints, when run
    info = rest.get_weights_info_by_tinker_path(state).result()
    assert (info.base_model, info.lora_rank) == ("zyquo-tiny", 4)

    # Deleting removes the folder; the program trains on.
    rest.delete_checkpoint_from_tinker_path(state).result()
    assert not (server.home / "runs" / run_id / "tinker" / "weights" / "first").exists()
    assert [c.tinker_path for c in rest.list_checkpoints(run_id).result().checkpoints] == [
        sampled]
    step(training, data)

    # A path that names nothing gets Tinker's error type and one sentence.
    with pytest.raises(tinker.NotFoundError, match=f"Run {run_id} has no checkpoint "
                       "weights/first"):
        rest.delete_checkpoint_from_tinker_path(state).result()
    with pytest.raises(tinker.NotFoundError, match="No training run no-such-run"):
        rest.get_training_run_by_tinker_path("tinker://no-such-run/weights/x").result()
    with pytest.raises(tinker.BadRequestError, match="is not a checkpoint of this server"):
        rest.delete_checkpoint_from_tinker_path(f"tinker://{run_id}/external_weights/x"
                                                ).result()
    # A run of `zyquo-tui runs` is no Tinker training run: neither listed nor read.
    from zyquo_tui.core.runs.run import Run
    from zyquo_tui.core.store.store import RunStore

    own = RunStore(server.home).create(Run.new(model=str(server.home / "models" / "zyquo-tiny"),
                                               data="sample_data/completions"))
    assert own.id not in [r.training_run_id for r in
                          rest.list_training_runs(limit=100).result().training_runs]
    with pytest.raises(tinker.NotFoundError, match="not trained through this server"):
        rest.list_checkpoints(own.id).result()


def test_many_samples_of_one_prompt_keep_seed_stop_and_top_k(server, service_client):
    # num_samples answers are decoded together; the same seed draws the same answers, stop
    # and top_k hold for each of them.
    sampler = service_client.create_sampling_client(base_model="zyquo-tiny").result()
    tokenizer = new_training_client(service_client, seed=47).get_tokenizer()
    prompt = types.ModelInput.from_ints(tokenizer.encode("The quick brown"))

    def answers(count: int, **params) -> list:
        return sampler.sample(prompt, count, types.SamplingParams(**params)).result().sequences

    drawn = answers(5, max_tokens=8, temperature=1.0, seed=5, stop=[])
    assert [s.tokens for s in answers(5, max_tokens=8, temperature=1.0, seed=5, stop=[])] == [
        s.tokens for s in drawn]
    assert len({tuple(s.tokens) for s in drawn}) > 1  # each answer a draw of its own
    assert all(len(s.tokens) == len(s.logprobs) == 8 and s.stop_reason == "length"
               for s in drawn)

    greedy = answers(1, max_tokens=8, temperature=0.0, stop=[])[0]
    for row in answers(3, max_tokens=8, temperature=1.0, seed=5, top_k=1, stop=[]):
        assert row.tokens == greedy.tokens
        assert row.logprobs == pytest.approx(greedy.logprobs, abs=1e-4)
    stop_id = greedy.tokens[3]
    ends = greedy.tokens.index(stop_id) + 1
    for row in answers(3, max_tokens=8, temperature=0.0, stop=[stop_id]):
        assert row.tokens == greedy.tokens[:ends] and row.stop_reason == "stop"


def test_top_k_prompt_logprobs_are_each_positions_likeliest_tokens(server, service_client):
    # Tinker's topk_prompt_logprobs: for each prompt position after the first, the k likeliest
    # tokens the prompt before it predicts, likeliest first; None for the first position.
    sampler = service_client.create_sampling_client(base_model="zyquo-tiny").result()
    tokenizer = new_training_client(service_client, seed=53).get_tokenizer()
    ids = tokenizer.encode("The quick brown")
    greedy = types.SamplingParams(max_tokens=4, temperature=0.0, stop=[])
    answer = sampler.sample(types.ModelInput.from_ints(ids), 1, greedy).result()
    prompt = ids + answer.sequences[0].tokens[:3]  # the greedy answer: each the top-1
    vocabulary = len(tokenizer.get_vocab())

    def scored(k: int):
        return sampler.sample(types.ModelInput.from_ints(prompt), 1,
                              types.SamplingParams(max_tokens=1), include_prompt_logprobs=True,
                              topk_prompt_logprobs=k).result()

    top5 = scored(5)
    rows = top5.topk_prompt_logprobs
    assert len(rows) == len(prompt) and rows[0] is None
    for row in rows[1:]:
        assert len(row) == 5
        logprobs = [lp for _, lp in row]
        assert logprobs == sorted(logprobs, reverse=True) and all(lp <= 0 for lp in logprobs)
    for position in range(len(ids), len(prompt)):  # greedy tokens are the likeliest
        assert rows[position][0][0] == prompt[position]
        assert rows[position][0][1] == pytest.approx(top5.prompt_logprobs[position], abs=1e-4)

    # k at least the vocabulary: every token, a distribution, with the prompt's own token at
    # its prompt log-probability; the cells past the vocabulary hold nothing.
    every = scored(vocabulary + 3)
    for position, row in enumerate(every.topk_prompt_logprobs[1:], start=1):
        assert len(row) == vocabulary
        assert sum(np.exp(lp) for _, lp in row) == pytest.approx(1.0, abs=1e-3)
        assert dict(row)[prompt[position]] == pytest.approx(every.prompt_logprobs[position],
                                                            abs=1e-4)
    assert scored(0).topk_prompt_logprobs is None


def test_cross_entropy_with_k_targets_a_position_sums_their_weighted_logprobs(server,
                                                                               service_client):
    # Tinker's top-k distillation: [N, K] target_tokens and weights; the loss is
    # -sum(w[n, k] * log p(target[n, k])) and the logprobs come back [N, K].
    training = new_training_client(service_client, seed=59)
    tokenizer = training.get_tokenizer()
    ids = tokenizer.encode(TEXTS[0])
    inputs, first = ids[:-1], ids[1:]
    second = [(t + 7) % 200 for t in first]
    rng = np.random.default_rng(0)
    w1, w2 = rng.uniform(0.1, 1, len(first)), rng.uniform(0.1, 1, len(first))

    def datum(targets, weights) -> types.Datum:
        return types.Datum(model_input=types.ModelInput.from_ints(inputs), loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.asarray(targets, np.int64)),
            "weights": types.TensorData.from_numpy(np.asarray(weights, np.float32))})

    pair = datum(np.stack([first, second], axis=1), np.stack([w1, w2], axis=1))
    both = training.forward([pair], "cross_entropy").result()
    one = [training.forward([datum(t, w)], "cross_entropy").result() for t, w in
           ((first, w1), (second, w2))]
    logprobs = both.loss_fn_outputs[0]["logprobs"]
    assert logprobs.shape == [len(first), 2]
    table = np.asarray(logprobs.data).reshape(len(first), 2)
    for column in (0, 1):
        assert table[:, column] == pytest.approx(
            np.asarray(one[column].loss_fn_outputs[0]["logprobs"].data), abs=1e-4)
    assert both.metrics["loss:sum"] == pytest.approx(
        one[0].metrics["loss:sum"] + one[1].metrics["loss:sum"], rel=1e-4)

    # And it trains: a few steps toward those soft targets lower the loss.
    losses = [step(training, [pair]) for _ in range(5)]
    assert losses[-1] < losses[0], losses


@pytest.mark.parametrize("option, value", [
    ("topk_sample_logprobs", 3), ("prompt_alt_tokens_k", 2), ("prompt_logprobs_last_n", 1),
    ("target_prompt_logprobs", "ids")])
def test_sampling_options_the_server_does_not_serve_get_a_400(server, service_client, option,
                                                              value):
    # Ignored, they would leave a program reading an answer that silently lacks them.
    sampler = service_client.create_sampling_client(base_model="zyquo-tiny").result()
    prompt = types.ModelInput.from_ints([5, 6, 7])
    if value == "ids":
        value = types.TensorData.from_numpy(np.full((2, 1), 5, np.int64))
    with pytest.raises(tinker.BadRequestError, match=option):
        sampler.sample(prompt, 1, types.SamplingParams(max_tokens=2),
                       include_prompt_logprobs=True, **{option: value}).result()


def test_unseeded_sample_calls_draw_afresh_and_a_seed_draws_the_same_again(server,
                                                                          service_client):
    # An RL group samples its answers one call each (tinker-cookbook's completers): without a
    # seed each call must draw new answers, not the last call's again; with one, the same.
    training = new_training_client(service_client, seed=61)
    tokenizer = training.get_tokenizer()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tokenizer.encode("The quick brown"))
    params = types.SamplingParams(max_tokens=8, temperature=1.0, stop=[])
    seeded = types.SamplingParams(max_tokens=8, temperature=1.0, stop=[], seed=3)
    before = sampler.sample(prompt, 1, seeded).result().sequences[0].tokens
    answers = {tuple(sampler.sample(prompt, 1, params).result().sequences[0].tokens)
               for _ in range(4)}
    assert len(answers) > 1, answers
    assert sampler.sample(prompt, 1, seeded).result().sequences[0].tokens == before
