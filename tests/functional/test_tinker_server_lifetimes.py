"""`zyquo-tui serve` as the one long-lived process of a machine that serves for days: what its
programs leave behind is freed (memory does not grow with the programs it served), a freed id
answers with why, and the server's models and the machine's runs share its memory through one
ledger (server/lifetimes.py, server/ledger.py). A real server subprocess, the real SDK."""

from __future__ import annotations

import gc
import json
import shutil
import time
from pathlib import Path

import httpx
import psutil
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402
from test_tinker_server import start_server, stop  # noqa: E402


# Token ids of the sample model's vocabulary: the cycles need no tokenizer in the test process.
TOKENS = list(range(5, 29))
DATUM = types.Datum(model_input=types.ModelInput.from_ints(TOKENS[:-1]),
                    loss_fn_inputs={"target_tokens": TOKENS[1:],
                                    "weights": [1.0] * (len(TOKENS) - 1)})
PROMPT = types.ModelInput.from_ints(TOKENS[:6])
SAMPLING = types.SamplingParams(max_tokens=4, temperature=1.0, seed=5, stop=[])


def server_home(tmp_path: Path, sample_models) -> Path:
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    shutil.copytree(sample_models["zyquo-tiny"], home / "models" / "zyquo-tiny")
    return home



@pytest.fixture
def sdk_env(monkeypatch):
    def point_at(server) -> None:
        monkeypatch.setenv("TINKER_BASE_URL", server.url)
        monkeypatch.setenv("TINKER_API_KEY", server.key)
        monkeypatch.setenv("TINKER_TELEMETRY", "0")
    return point_at


@pytest.fixture
def forgetful_server(tmp_path, sample_models, monkeypatch, sdk_env):
    """A server that frees what is not used for 4 s and closes a session after 8 s
    without a heartbeat (the SDK beats every 10 s: an idle program's session ends too)."""
    monkeypatch.setenv("ZYQUO_TINKER_IDLE_SECONDS", "4")
    monkeypatch.setenv("ZYQUO_TINKER_HEARTBEAT_TIMEOUT", "8")
    server = start_server(server_home(tmp_path, sample_models))
    sdk_env(server)
    yield server
    stop(server)


def get_json(server, path: str) -> httpx.Response:
    return httpx.get(f"{server.url}/api/v1/{path}", headers={"X-API-Key": server.key},
                     timeout=30)


def abandoned_cycle() -> dict[str, str]:
    """A program's life, abandoned: a ServiceClient, a training client that steps once, a
    sampler of its weights and one of the base model, each sampling a little; then dropped
    without closing anything. The ids it leaves on the server."""
    client = tinker.ServiceClient()
    training = client.create_lora_training_client(base_model="zyquo-tiny", rank=4,
                                                  seed=1).result()
    forward_backward = training.forward_backward([DATUM], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    forward_backward.result()
    snapshot = training.save_weights_and_get_sampling_client().result()
    base = client.create_sampling_client(base_model="zyquo-tiny").result()
    for sampler in (snapshot, base):
        assert len(sampler.sample(PROMPT, 2, SAMPLING).result().sequences) == 2
    left = {"session": training.model_id.split(":")[0], "model": training.model_id,
            "snapshot": snapshot._sampling_session_id, "base": base._sampling_session_id}
    del client, training, snapshot, base, sampler
    gc.collect()  # the SDK's holders stop their heartbeats when collected
    return left


def wait_until_freed(server, left: list[dict[str, str]], timeout: float = 120) -> None:
    """Until every model and sampler the cycles left answers 410 (freed on the event loop),
    then once more through the MLX thread, after the freeing queued there (gc, clear_cache):
    a training client the memory verdict refuses loads nothing and answers only after it."""
    deadline = time.monotonic() + timeout
    for ids in left:
        for sampler in (ids["snapshot"], ids["base"]):
            while get_json(server, f"samplers/{sampler}").status_code != 410:
                assert time.monotonic() < deadline, f"sampler {sampler} was never freed"
                time.sleep(0.2)
        while server.post("get_info", json.dumps({"model_id": ids["model"]})
                          ).status_code != 410:
            assert time.monotonic() < deadline, f"model {ids['model']} was never freed"
            time.sleep(0.2)
    barrier = tinker.ServiceClient()
    with pytest.raises(tinker.RequestFailedError, match="won't fit in memory"):
        barrier.create_lora_training_client(base_model="zyquo-tiny", rank=4_000_000).result()
    del barrier
    gc.collect()


def resident(server) -> int:
    return psutil.Process(server.process.pid).memory_info().rss


def test_memory_stays_flat_over_fifty_abandoned_programs(forgetful_server):
    server = forgetful_server
    left = [abandoned_cycle() for _ in range(5)]
    wait_until_freed(server, left)
    after_5 = resident(server)
    left = [abandoned_cycle() for _ in range(45)]
    wait_until_freed(server, left)
    after_50 = resident(server)
    print(f"server RSS after 5 cycles: {after_5 / 2**20:.1f} MiB, after 50: "
          f"{after_50 / 2**20:.1f} MiB ({after_50 / after_5 - 1:+.1%})")
    assert after_50 <= 1.10 * after_5, (after_5, after_50)


def test_freed_ids_answer_410_with_why_and_unknown_ones_404(forgetful_server):
    server = forgetful_server
    left = abandoned_cycle()
    wait_until_freed(server, [left])
    # Freed as idle (4 s) or with its session (8 s without a beat), whichever came first.
    sampler = get_json(server, f"samplers/{left['snapshot']}")
    assert sampler.status_code == 410
    assert sampler.json()["detail"] in (
        f"Sampling session {left['snapshot']} was freed: it was not used for 4 s; make a "
        "new sampling client.",
        f"Sampling session {left['snapshot']} was freed: its program sent no heartbeat for "
        "8 s.")
    sampled = server.post("asample", json.dumps({
        "sampling_session_id": left["base"], "num_samples": 1,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [5, 6]}]},
        "sampling_params": {"max_tokens": 2}}))
    assert sampled.status_code == 410
    assert sampled.json()["detail"].startswith(f"Sampling session {left['base']} was freed: ")
    model = server.post("get_info", json.dumps({"model_id": left["model"]}))
    assert model.status_code == 410
    assert model.json()["detail"] in (
        f"Training model {left['model']} is closed: it was not used for 4 s, so its "
        "memory was freed (make a new one from a saved state to go on).",
        f"Training model {left['model']} is closed: its program sent no heartbeat for 8 s.")
    deadline = time.monotonic() + 60
    while True:  # the session ends 8 s after its program's last sign of life (asking with
        # a new sampler, which is no heartbeat, and goes with the session)
        made = server.post("create_sampling_session", json.dumps({
            "session_id": left["session"], "sampling_session_seq_id": 0,
            "base_model": "zyquo-tiny"}))
        if made.status_code != 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert (made.status_code, made.json()["detail"]) == (
        410, f"Session {left['session']} has finished.")
    beat = server.post("session_heartbeat", json.dumps({"session_id": left["session"]}))
    assert (beat.status_code, beat.json()["detail"]) == (
        410, f"Session {left['session']} has finished.")
    never = get_json(server, "samplers/never-made")
    assert never.status_code == 404
    assert never.json()["detail"] == ("No sampling session never-made is known to this "
                                      "server: make a new sampling client.")


def test_an_rl_loop_keeps_each_training_clients_newest_snapshot_samplers(tmp_path,
                                                                         sample_models,
                                                                         sdk_env):
    # save_weights_and_get_sampling_client keeps a copy of the weights; a loop that makes one
    # a step keeps only the newest SNAPSHOTS_KEPT.
    from zyquo_tui.server.lifetimes import SNAPSHOTS_KEPT

    server = start_server(server_home(tmp_path, sample_models))
    sdk_env(server)
    client = tinker.ServiceClient()
    try:
        training = client.create_lora_training_client(base_model="zyquo-tiny", rank=4,
                                                      seed=2).result()
        samplers = []
        for _ in range(SNAPSHOTS_KEPT + 2):
            training.forward_backward([DATUM], "cross_entropy").result()
            training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
            samplers.append(training.save_weights_and_get_sampling_client().result())
        for old in samplers[:2]:
            answer = get_json(server, f"samplers/{old._sampling_session_id}")
            assert answer.status_code == 410
            assert answer.json()["detail"] == (
                f"Sampling session {old._sampling_session_id} was freed: training model "
                f"{training.model_id} made {SNAPSHOTS_KEPT} newer ones with "
                "save_weights_and_get_sampling_client, and the server keeps the "
                f"{SNAPSHOTS_KEPT} newest (save_weights_for_sampler keeps weights for good).")
        for kept in samplers[2:]:
            assert len(kept.sample(PROMPT, 1, SAMPLING).result().sequences) == 1
    finally:
        client.close("success").result(timeout=60)
        stop(server)
