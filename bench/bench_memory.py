"""How long a memory estimate takes: the run setup recomputes it on every keystroke.

    python bench/bench_memory.py [--repeat N]

Prints the median time of one estimate (model facts cached, as the setup screen has them), of
an estimate with its verdict and suggestion search (what `plan` computes), and of reading a
model folder's headers cold. The models are the calibration models' stored tensor tables
(bench/memory_calibration/models.json), plus a synthetic 80-layer, 8k-wide table to show
that the cost does not grow with the model's size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from zyquo_tui.core.memory.advisor import MemoryAdvisor
from zyquo_tui.core.memory.budget import MemoryBudget
from zyquo_tui.core.memory.estimate import TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.history import MemoryHistory
from zyquo_tui.core.runs.settings import Method  # noqa: E402

MODELS = REPO / "bench" / "memory_calibration" / "models.json"


def big_model_record(layers: int = 80, hidden: int = 8192, intermediate: int = 28672,
                     vocab: int = 128256) -> dict:
    """A llama-70B-shaped tensor table (no tensor data: the estimate reads shapes only)."""
    kv = 1024
    tensors = [["model.embed_tokens.weight", "BF16", [vocab, hidden], vocab * hidden * 2],
               ["model.norm.weight", "BF16", [hidden], hidden * 2],
               ["lm_head.weight", "BF16", [vocab, hidden], vocab * hidden * 2]]
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", [hidden, hidden]),
                            ("self_attn.k_proj", [kv, hidden]),
                            ("self_attn.v_proj", [kv, hidden]),
                            ("self_attn.o_proj", [hidden, hidden]),
                            ("mlp.gate_proj", [intermediate, hidden]),
                            ("mlp.up_proj", [intermediate, hidden]),
                            ("mlp.down_proj", [hidden, intermediate])):
            tensors.append([p + name + ".weight", "BF16", shape, shape[0] * shape[1] * 2])
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors.append([p + norm + ".weight", "BF16", [hidden], hidden * 2])
    config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers,
              "num_attention_heads": 64, "num_key_value_heads": 8,
              "intermediate_size": intermediate, "vocab_size": vocab,
              "torch_dtype": "bfloat16"}
    return {"config": config, "tensors": tensors}


def timed(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)

    records = json.loads(MODELS.read_text())
    records["llama-70b-shape"] = big_model_record()
    advisor = MemoryAdvisor(MemoryBudget.fixed(16 << 30), history=MemoryHistory())
    config = TrainingConfig(method=Method.LORA, batch_size=4, max_seq_length=2048,
                            num_layers=16, longest_row_tokens=1500)
    print(f"{'model':<24} {'estimate':>10} {'plan':>10}")
    worst = 0.0
    for name, record in records.items():
        facts = ModelFacts.from_record(record, path=name)
        cfg = config.replace(num_layers=min(16, facts.num_layers))
        estimate = timed(lambda: advisor.estimate(facts, cfg), args.repeat)
        plan = timed(lambda: advisor.plan(facts, cfg), max(args.repeat // 10, 5))
        worst = max(worst, estimate)
        print(f"{name:<24} {estimate * 1e3:>8.3f}ms {plan * 1e3:>8.3f}ms")

    with tempfile.TemporaryDirectory() as folder:
        build = Path(folder)
        record = records["llama-70b-shape"]
        (build / "config.json").write_text(json.dumps(record["config"]))
        header = {name: {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}
                  for name, dtype, shape, _ in record["tensors"]}
        # Offsets of zero-sized ranges would not validate; give each its real size.
        offset = 0
        for name, dtype, shape, nbytes in record["tensors"]:
            header[name]["data_offsets"] = [offset, offset + nbytes]
            offset += nbytes
        raw = json.dumps(header).encode()
        with open(build / "model.safetensors", "wb") as handle:
            handle.write(len(raw).to_bytes(8, "little") + raw)
            handle.truncate(8 + len(raw) + offset)  # sparse: no bytes are written
        cold = timed(lambda: ModelFacts._read_folder(build), 20)
    print(f"\nmedian estimate (facts cached): {worst * 1e3:.3f} ms at most over the models")
    print(f"reading a 70B model's config and headers cold: {cold * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
