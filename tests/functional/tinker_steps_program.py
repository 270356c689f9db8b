"""A deterministic Tinker SDK program for the server's tests: supervised steps on fixed tokens,
one JSON line a step ({"step": N, "loss": L}), optionally a saved state ({"saved": PATH}).

    python tinker_steps_program.py --seed 3 --rows 0 --steps 6 [--save-at 3] [--vanish]
    python tinker_steps_program.py --resume tinker://RUN/weights/NAME --steps 3

Nothing in it draws at random but the adapters' start, which the seed fixes; the tokens are
fixed ids of the sample model's vocabulary, so it needs no tokenizer. `--vanish` ends the
program right after the save without closing its session (as a killed program would).
TINKER_BASE_URL and TINKER_API_KEY say which server.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import tinker
from tinker import types

ROWS = [list(range(5, 29)), list(range(40, 10, -1)), [7, 9, 11, 13] * 6]


def datum(tokens: list[int]) -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:],
                                       "weights": [1.0] * (len(tokens) - 1)})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", default="0", help="comma-separated indices of ROWS")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-at", type=int)
    parser.add_argument("--resume")
    parser.add_argument("--vanish", action="store_true")
    args = parser.parse_args()
    data = [datum(ROWS[int(i)]) for i in args.rows.split(",")]
    service = tinker.ServiceClient()
    if args.resume:
        training = service.create_training_client_from_state_with_optimizer(
            args.resume).result()
    else:
        training = service.create_lora_training_client(base_model="zyquo-tiny", rank=4,
                                                      seed=args.seed).result()
    for step in range(1, args.steps + 1):
        forward_backward = training.forward_backward(data, "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        print(json.dumps({"step": step, "loss": forward_backward.result().metrics["loss:sum"]}),
              flush=True)
        if step == args.save_at:
            path = training.save_state(f"at-{step}").result().path
            print(json.dumps({"saved": path}), flush=True)
            if args.vanish:
                os._exit(0)  # no close, no goodbye: the session is left behind
    service.close("success").result(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
