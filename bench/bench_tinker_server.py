"""`zyquo-tui serve` against the in-process step-level client: the same supervised loop, side
by side.

Both train LoRA (rank 8, every layer) on the sample model with the same token rows (the sample
completions, 4 a batch, every token trained), Adam at 1e-4, forward_backward then optim_step
submitted before waiting. The client loop runs zyquo_tui.client in its own process; the
server loop is a Tinker program (the official SDK) talking to a `zyquo-tui serve` subprocess on
loopback. Runs alternate (client, server, client, ...) so the machine's drift hits both.
Tokens per second: the rows' tokens (as the client counts them) over wall time per 10 steps, the first 10 left out
(compilation). Target: server/client 0.9 or more.

    python bench/bench_tinker_server.py [--repeat 3] [--iters 60]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent

ROWS = textwrap.dedent("""
    import json
    from mlx_lm import load
    from zyquo_tui.trainer.encoding import encode_row

    def token_rows(model, data):
        _, tokenizer = load(model)
        rows = [json.loads(line) for line in open(data)]
        return [encode_row(tokenizer, r["prompt"], r["completion"], True)[0] for r in rows]
""")

CLIENT_LOOP = ROWS + textwrap.dedent("""
    import sys, time
    import mlx.core as mx
    from zyquo_tui.client import TrainingClient
    from zyquo_tui.client.batch import TrainingBatch

    model, data, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = TrainingClient.from_model(model, method="lora", learning_rate=1e-4, num_layers=-1,
                                       rank=8)
    rows = [json.loads(line) for line in open(data)]
    batches = [TrainingBatch([r["prompt"] for r in rows[i:i + 4]],
                             [r["completion"] for r in rows[i:i + 4]], train_on_prompt=True)
               for i in range(0, len(rows) - 3, 4)]
    rates, tokens, tic = [], 0, time.perf_counter()
    for step in range(1, iters + 1):
        result = client.forward_backward(batches[step % len(batches)])
        client.optim_step().result()
        tokens += result.result().num_tokens
        if step % 10 == 0:
            now = time.perf_counter()
            rates.append(tokens / (now - tic))
            tokens, tic = 0, now
    client.close()
    print(json.dumps({"rates": rates[1:]}))
""")

SERVER_LOOP = ROWS + textwrap.dedent("""
    import sys, time
    import tinker
    from tinker import types

    model, data, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rows = token_rows(model, data)
    batches = [[types.Datum(model_input=types.ModelInput.from_ints(t[:-1]),
                            loss_fn_inputs={"target_tokens": t[1:],
                                            "weights": [1.0] * (len(t) - 1)})
                for t in rows[i:i + 4]] for i in range(0, len(rows) - 3, 4)]
    service = tinker.ServiceClient()
    training = service.create_lora_training_client(base_model=model, rank=8, seed=0).result()
    adam = types.AdamParams(learning_rate=1e-4, beta2=0.999, eps=1e-8)
    rates, tokens, tic = [], 0, time.perf_counter()
    for step in range(1, iters + 1):
        batch = batches[step % len(batches)]
        result = training.forward_backward(batch, "cross_entropy")
        training.optim_step(adam).result()
        result.result()
        tokens += sum(d.model_input.length + 1 for d in batch)  # the rows' tokens
        if step % 10 == 0:
            now = time.perf_counter()
            rates.append(tokens / (now - tic))
            tokens, tic = 0, now
    service.close("success").result()
    print(json.dumps({"rates": rates[1:]}))
""")


def run_loop(code: str, model: str, data: Path, iters: int, env: dict) -> list[float]:
    done = subprocess.run([sys.executable, "-c", code, model, str(data), str(iters)],
                          capture_output=True, text=True, env=env, timeout=1800,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])["rates"]


def start_server(home: Path) -> tuple[subprocess.Popen, str, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "ZYQUO_HOME": str(home)}
    server = subprocess.Popen([sys.executable, "-m", "zyquo_tui", "serve", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        key_file = home / "tinker_api_key"
        if key_file.is_file():
            key = key_file.read_text().strip()
            try:
                if httpx.get(f"{url}/api/v1/healthz", headers={"X-API-Key": key}).is_success:
                    return server, url, key
            except httpx.TransportError:
                pass
        time.sleep(0.2)
    raise SystemExit("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--iters", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        temp = Path(temp)
        made = subprocess.run([sys.executable, "-m", "zyquo_tui.trainer.sample_model",
                               str(temp / "models"), "--json"], capture_output=True, text=True,
                              check=True)
        model = json.loads(made.stdout)["models"]["zyquo-tiny"]
        data = REPO / "sample_data" / "completions" / "train.jsonl"
        home = temp / "home"
        server, url, key = start_server(home)
        env = {**os.environ, "ZYQUO_HOME": str(home), "TINKER_BASE_URL": url,
               "TINKER_API_KEY": key, "TINKER_TELEMETRY": "0"}
        client_rates, server_rates = [], []
        try:
            for _ in range(args.repeat):
                client_rates.append(statistics.median(run_loop(CLIENT_LOOP, model, data,
                                                               args.iters, env)))
                server_rates.append(statistics.median(run_loop(SERVER_LOOP, model, data,
                                                               args.iters, env)))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    ratios = [s / c for s, c in zip(server_rates, client_rates, strict=True)]
    print(f"{args.repeat} repetitions of {args.iters} steps, LoRA rank 8 on the sample model, "
          "batch 4 (medians per repetition):")
    print(f"{'loop':<22}{'tokens/s':>12}")
    print(f"{'in-process client':<22}{statistics.median(client_rates):>12.0f}")
    print(f"{'through the server':<22}{statistics.median(server_rates):>12.0f}")
    print(f"server/client ratio, median of {args.repeat}: {statistics.median(ratios):.3f} "
          f"({', '.join(f'{r:.3f}' for r in ratios)}); target 0.9 or more")


if __name__ == "__main__":
    main()
