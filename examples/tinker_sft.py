"""A Tinker program, unchanged but for the model name, training on `zyquo-tui serve`.

    zyquo-tui serve &                        # prints TINKER_BASE_URL
    export TINKER_BASE_URL=http://127.0.0.1:8765
    export TINKER_API_KEY=$(zyquo-tui serve --show-key)
    python examples/tinker_sft.py --model zyquo-tiny --steps 10

It uses the official `tinker` SDK only (no zyquo_tui import): a LoRA training client on a
local model, supervised steps on the sample completions as Tinker Datums (the prompt's tokens
weighted 0), the summed loss per step, a saved state, and a sampling client from the weights.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import tinker
from tinker import types

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data" / "completions" / "train.jsonl"


def datum(tokenizer, prompt: str, completion: str) -> types.Datum:
    """Prompt then completion, shifted by one; only the completion's tokens are trained."""
    prompt_tokens = tokenizer.encode(prompt)
    tokens = prompt_tokens + tokenizer.encode(" " + completion, add_special_tokens=False)
    tokens.append(tokenizer.eos_token_id)
    weights = [0.0] * (len(prompt_tokens) - 1) + [1.0] * (len(tokens) - len(prompt_tokens))
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="zyquo-tiny")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()

    service = tinker.ServiceClient()
    training = service.create_lora_training_client(base_model=args.model, rank=8, seed=0
                                                   ).result()
    tokenizer = training.get_tokenizer()
    rows = [json.loads(line) for line in SAMPLES.read_text().splitlines()]
    data = [datum(tokenizer, r["prompt"], r["completion"]) for r in rows]
    for index in range(args.steps):
        start = (index * args.batch) % (len(data) - args.batch + 1)
        batch = data[start:start + args.batch]
        # Submitted back to back, then waited on: the server runs them in this order.
        forward_backward = training.forward_backward(batch, "cross_entropy")
        optim = training.optim_step(types.AdamParams(learning_rate=5e-3))
        loss = forward_backward.result().metrics["loss:sum"]
        tokens = sum(sum(d.loss_fn_inputs["weights"].data) for d in batch)
        optim.result()
        print(f"step {index + 1}: loss {loss:.3f} ({loss / tokens:.3f} per token)", flush=True)
    print(f"saved {training.save_state('tinker-sft').result().path}")
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tokenizer.encode(rows[0]["prompt"]))
    answer = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=16, temperature=0.0)
                            ).result().sequences[0]
    print(f"answer: {tokenizer.decode(answer.tokens)!r}")
    service.close("success").result()


if __name__ == "__main__":
    main()
