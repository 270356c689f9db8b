"""`zyquo-tui serve` driven by the official tinker SDK, as a Tinker program drives Tinker: a real
server subprocess on loopback, the sample model, real training."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def server(tmp_path_factory, sample_models):
    home = tmp_path_factory.mktemp("tinker-home")
    (home / "models").mkdir()
    for name, folder in sample_models.items():
        shutil.copytree(folder, home / "models" / name)
    running = start_server(home)
    yield running
    if running.process.poll() is None:
        os.killpg(running.process.pid, signal.SIGTERM)
        try:
            running.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(running.process.pid, signal.SIGKILL)
            running.process.wait(timeout=10)


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
