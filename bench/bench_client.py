"""The step-level client against the run trainer: the same SFT configuration, side by side.

Both train the same model on the sample completions (every token: mask_prompt off, and
train_on_prompt on), batch 4, LoRA on every layer; runs
alternate (trainer, client, trainer, ...) so drift in the machine's load hits both. Tokens per
second: the trainer's from its `train` events, the client's from a loop of forward_backward +
optim_step (submitted before waiting, as docs/client.md advises: one compiled step, as a
run's) timed the same way (target tokens over wall time, per 10 steps); the first 10 steps
of each are left out (compilation). Also printed: the client's tokenization of a batch (Python,
on each forward_backward), the part of a client step that a run does once up front.
Target: client/trainer ratio 0.95 or more.

    python bench/bench_client.py [--repeat 3] [--iters 80] [--hidden 128] [--layers 2]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_trainer import bench_arguments, bench_heading, bench_run, ours  # noqa: E402

CLIENT_LOOP = textwrap.dedent("""
    import json, sys, time
    from zyquo_tui.client import TrainingBatch, TrainingClient
    from zyquo_tui.trainer.encoding import encode_row

    model, data, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rows = [json.loads(line) for line in open(data)]
    batches = [TrainingBatch([r["prompt"] for r in rows[i:i + 4]],
                             [r["completion"] for r in rows[i:i + 4]], train_on_prompt=True)
               for i in range(0, len(rows) - 3, 4)]
    client = TrainingClient.from_model(model, method="lora", learning_rate=1e-4, num_layers=-1)
    rates, tokens, tic = [], 0, time.perf_counter()
    for step in range(1, iters + 1):
        result = client.forward_backward(batches[step % len(batches)])
        client.optim_step().result()  # submitted before waiting: one compiled step
        tokens += result.result().num_tokens
        if step % 10 == 0:
            now = time.perf_counter()
            rates.append(tokens / (now - tic))
            tokens, tic = 0, now
    tic = time.perf_counter()
    for batch in batches:
        for p, r in zip(batch.prompts, batch.responses):
            encode_row(client.tokenizer, p, r, True)
    tokenize_ms = (time.perf_counter() - tic) / len(batches) * 1000
    client.close()
    print(json.dumps({"rates": rates[1:], "tokenize_ms": tokenize_ms}))
""")


def client_run(model: Path, iters: int) -> tuple[list[float], float]:
    done = subprocess.run([sys.executable, "-c", CLIENT_LOOP, str(model),
                           str(REPO / "sample_data" / "completions" / "train.jsonl"), str(iters)],
                          check=True, capture_output=True, text=True, cwd=REPO,
                          stdin=subprocess.DEVNULL)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["rates"], result["tokenize_ms"]


def main() -> None:
    args = bench_arguments()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model, store, run = bench_run(tmp, args)
        trainer, client, tokenize = [], [], []
        for i in range(args.repeat):
            trainer.append(statistics.median(ours(store, run)))
            rates, tokenize_ms = client_run(model, args.iters)
            client.append(statistics.median(rates))
            tokenize.append(tokenize_ms)
            print(f"repetition {i + 1}: trainer {trainer[-1]:.0f} tok/s, client "
                  f"{client[-1]:.0f} tok/s", flush=True)
    ratios = [c / t for c, t in zip(client, trainer, strict=True)]
    print()
    print(bench_heading(args))
    print(f"{'':<28} {'median tok/s':>13}")
    print(f"{'run trainer':<28} {statistics.median(trainer):>13.0f}")
    print(f"{'client loop':<28} {statistics.median(client):>13.0f}")
    print(f"{'median ratio client/trainer':<28} {statistics.median(ratios):>13.3f}   "
          f"(each: {', '.join(f'{r:.3f}' for r in ratios)}; target 0.95 or more)")
    print(f"{'tokenizing a batch (client)':<28} {statistics.median(tokenize):>10.2f} ms")
    print(json.dumps({"ratio_median": statistics.median(ratios),
                      "tokenize_ms": statistics.median(tokenize)}))


if __name__ == "__main__":
    main()
