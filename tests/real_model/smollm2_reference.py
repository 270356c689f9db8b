"""The figures the import of SmolLM2-135M-Instruct is judged by, from either side:

    python smollm2_reference.py mlx MODEL_FOLDER         # the import, through mlx-lm
    python smollm2_reference.py transformers FILE.gguf   # transformers' own load of the file

Each prints JSON: the text's token ids, its mean per-token negative log-likelihood (nats), and
the greedy answer (token ids, up to the end-of-turn token) to each prompt through the chat
template. Run as a subprocess: torch and mlx stay out of the test process, and each side's
figures are made once per test run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TEXT = ("The quick brown fox jumps over the lazy dog. Paris is the capital of France, and "
        "Berlin is the capital of Germany. Water boils at one hundred degrees Celsius at sea "
        "level. Most people sleep for about eight hours each night, and many of them dream.")
PROMPTS = ["What is 2+3?", "What is the capital of France?", "Name the three primary colors.",
           "How many days are in a week?", "Write one sentence about the sea."]
MAX_TOKENS = 20


def chat(tokenizer, prompt: str) -> list[int]:
    return list(tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                              add_generation_prompt=True, tokenize=True,
                                              return_dict=False))


def mlx_side(folder: str) -> dict:
    import mlx.core as mx
    from mlx_lm import load, stream_generate

    model, tokenizer = load(folder)
    ids = tokenizer.encode(TEXT)
    tokens = mx.array([ids])
    logits = model(tokens[:, :-1]).astype(mx.float32)
    log_probs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    nll = -mx.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1).mean().item()
    answers = []
    for prompt in PROMPTS:
        answer = []
        for response in stream_generate(model, tokenizer, chat(tokenizer, prompt),
                                        max_tokens=MAX_TOKENS):
            if response.token in tokenizer.eos_token_ids:
                break
            answer.append(int(response.token))
        answers.append(answer)
    return {"ids": ids, "nll": nll, "answers": answers,
            "texts": [tokenizer.decode(a) for a in answers]}


def transformers_side(gguf: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                 dtype=torch.float32)
    ids = tokenizer.encode(TEXT)
    answers = []
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1]
        log_probs = torch.log_softmax(logits.float(), -1)
        nll = -log_probs.gather(-1, torch.tensor(ids[1:])[:, None]).mean().item()
        for prompt in PROMPTS:
            prompt_ids = chat(tokenizer, prompt)
            out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=MAX_TOKENS,
                                 do_sample=False, attention_mask=torch.ones(1, len(prompt_ids),
                                                                            dtype=torch.long))
            answer = []
            for token in out[0, len(prompt_ids):].tolist():
                if token == tokenizer.eos_token_id:
                    break
                answer.append(int(token))
            answers.append(answer)
    return {"ids": ids, "nll": nll, "answers": answers,
            "texts": [tokenizer.decode(a) for a in answers]}


if __name__ == "__main__":
    side, target = sys.argv[1:]
    print(json.dumps(mlx_side(target) if side == "mlx" else transformers_side(target)))
