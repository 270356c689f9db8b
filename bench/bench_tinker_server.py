"""`zyquo-tui serve` against the in-process step-level client: the same supervised loop, side
by side.

Both train LoRA (rank 8, every layer) on the sample model with the same token rows (the sample
completions, 4 a batch, every token trained), Adam at 1e-4, forward_backward then optim_step
submitted before waiting. The client loop runs zyquo_tui.client in its own process; the
server loop is a Tinker program (the official SDK) talking to a `zyquo-tui serve` subprocess on
loopback. Both loops stay up through a repetition and take turns, 10 steps at a time (client,
server, client, ...; one runs while the other waits), so a change in the machine's load (it is
shared) hits both alike. Tokens per second: the rows' tokens (as the client counts them) over
the wall time of a loop's turns, its first 10 steps left out (compilation). Target:
server/client 0.9 or more.

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

    model, data = sys.argv[1], sys.argv[2]
    client = TrainingClient.from_model(model, method="lora", learning_rate=1e-4, num_layers=-1,
                                       rank=8)
    rows = [json.loads(line) for line in open(data)]
    batches = [TrainingBatch([r["prompt"] for r in rows[i:i + 4]],
                             [r["completion"] for r in rows[i:i + 4]], train_on_prompt=True)
               for i in range(0, len(rows) - 3, 4)]
    step = 0
    for line in sys.stdin:  # a turn: this many steps, then tokens and seconds
        tokens, tic = 0, time.perf_counter()
        for _ in range(int(line)):
            step += 1
            result = client.forward_backward(batches[step % len(batches)])
            client.optim_step().result()
            tokens += result.result().num_tokens
        print(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - tic}), flush=True)
    client.close()
""")

SERVER_LOOP = ROWS + textwrap.dedent("""
    import sys, time
    import tinker
    from tinker import types

    model, data = sys.argv[1], sys.argv[2]
    rows = token_rows(model, data)
    batches = [[types.Datum(model_input=types.ModelInput.from_ints(t[:-1]),
                            loss_fn_inputs={"target_tokens": t[1:],
                                            "weights": [1.0] * (len(t) - 1)})
                for t in rows[i:i + 4]] for i in range(0, len(rows) - 3, 4)]
    service = tinker.ServiceClient()
    training = service.create_lora_training_client(base_model=model, rank=8, seed=0).result()
    adam = types.AdamParams(learning_rate=1e-4, beta2=0.999, eps=1e-8)
    step = 0
    for line in sys.stdin:  # a turn: this many steps, then tokens and seconds
        tokens, tic = 0, time.perf_counter()
        for _ in range(int(line)):
            step += 1
            batch = batches[step % len(batches)]
            result = training.forward_backward(batch, "cross_entropy")
            training.optim_step(adam).result()
            result.result()
            tokens += sum(d.model_input.length + 1 for d in batch)  # the rows' tokens
        print(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - tic}), flush=True)
    service.close("success").result()
""")


TURN = 10  # steps a loop takes before the other's turn; its first turn is left out


class Loop:
    """One loop's process, which takes its steps when told to."""

    def __init__(self, code: str, model: str, data: Path, env: dict) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", code, model, str(data)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env)
        self.tokens, self.seconds = 0, 0.0

    def turn(self, steps: int, counted: bool) -> None:
        self.process.stdin.write(f"{steps}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(self.process.stderr.read()[-3000:])
        done = json.loads(line)
        if counted:
            self.tokens += done["tokens"]
            self.seconds += done["seconds"]

    def rate(self) -> float:
        return self.tokens / self.seconds

    def close(self) -> None:
        self.process.stdin.close()
        if self.process.wait(timeout=600) != 0:
            raise SystemExit(self.process.stderr.read()[-3000:])


def repetition(model: str, data: Path, iters: int, env: dict) -> tuple[float, float]:
    """Tokens per second of the client loop and of the server loop, taking turns."""
    loops = [Loop(CLIENT_LOOP, model, data, env), Loop(SERVER_LOOP, model, data, env)]
    try:
        for turn in range(max(2, iters // TURN)):
            for loop in loops:
                loop.turn(TURN, counted=turn > 0)
    finally:
        for loop in loops:
            loop.close()
    return loops[0].rate(), loops[1].rate()


def start_server(home: Path) -> tuple[subprocess.Popen, str, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "ZYQUO_HOME": str(home)}
    # The key from the store (made on first use); the server never prints it.
    key = subprocess.run([sys.executable, "-m", "zyquo_tui", "serve", "--show-key"], env=env,
                         check=True, capture_output=True, text=True).stdout.strip()
    server = subprocess.Popen([sys.executable, "-m", "zyquo_tui", "serve", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
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
                client_rate, server_rate = repetition(model, data, args.iters, env)
                client_rates.append(client_rate)
                server_rates.append(server_rate)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    ratios = [s / c for s, c in zip(server_rates, client_rates, strict=True)]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.repeat} repetitions of {args.iters} steps, LoRA rank 8 on the sample model, "
          f"batch 4, turns of {TURN} steps (medians of the repetitions); load average after: "
          f"{load}")
    print(f"{'loop':<22}{'tokens/s':>12}")
    print(f"{'in-process client':<22}{statistics.median(client_rates):>12.0f}")
    print(f"{'through the server':<22}{statistics.median(server_rates):>12.0f}")
    print(f"server/client ratio, median of {args.repeat}: {statistics.median(ratios):.3f} "
          f"({', '.join(f'{r:.3f}' for r in ratios)}); target 0.9 or more")


if __name__ == "__main__":
    main()
