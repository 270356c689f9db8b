"""The step-level client's peak memory by how its loop is written, beside the run trainer's.

A client's forward_backward with no gradients pending waits for the next operation: an
optim_step submitted before the caller waits makes the two one compiled step, as a run's step
is; a caller that waits on the forward_backward first gets the two compiled apart
(docs/client.md). Each calibration config (bench/memory_calibration/matrix.json) trains for 3
steps through the client both ways and through the trainer (`python -m
zyquo_tui.trainer.measure`, as the calibration measures it), each in a process of its own,
`--repeat` times interleaved; the table gives MLX's median peak and the ratios to the trainer's.

A second table gives distillation from a teacher model (the `--distill-model` calibration
model, student and teacher alike) with the loss sliced: the teacher's full-vocabulary
log-probabilities made for the whole batch in float32 ("teacher whole", the path a teacher whose
logits are not a plain projection of its hidden states takes, and every teacher took before)
beside made a slice at a time from its hidden states ("teacher sliced").

    python bench/bench_client_memory.py [--repeat 3] [--distill-only] [ID ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import calibrate_memory  # noqa: E402

DEFAULT_CONFIGS = ["base-full", "w192-full-adafactor", "f32-full-adamw", "base", "base-dora"]
MIB = 2**20

# One client in a process of its own: its MLX peak is then the step's, as a run's is measured.
CLIENT_LOOP = """
import json, sys, warnings
import mlx.core as mx
from zyquo_tui.client import TrainingBatch, TrainingClient

warnings.simplefilter("ignore")  # the rows are cut to the config's length on purpose
model, config, together = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "together"
rows, tokens = config.pop("batch_size"), config["max_seq_length"]
batch = TrainingBatch([" ".join(["alpha beta gamma delta"] * tokens)] * rows,
                      max_seq_len=tokens)
with TrainingClient.from_model(model, **config) as client:
    for _ in range(3):
        loss = client.forward_backward(batch)
        if not together:
            loss.result()
        client.optim_step().result()
    print(json.dumps({"peak": mx.get_peak_memory(), "tokens": loss.result().num_tokens}))
"""


DISTILL_MODEL = "v128k-f32-untied"
DISTILL_SHAPE = {"rows": 4, "tokens": 128}
DISTILL_CHUNKS = (32, 128)  # loss_chunk_tokens of the table's rows

# Distillation from the same model as teacher, in a process of its own. "whole" hands the step
# the teacher's whole-batch log-probabilities: the fallback of a teacher with no plain head.
DISTILL_LOOP = """
import json, sys, warnings
from pathlib import Path
import mlx.core as mx
from zyquo_tui.client import TrainingBatch, TrainingClient

warnings.simplefilter("ignore")  # the rows are cut to the shape's length on purpose
model, shape, whole = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "whole"
batch = TrainingBatch([" ".join(["alpha beta gamma delta"] * shape["tokens"])] * shape["rows"],
                      max_seq_len=shape["tokens"], loss_type="distill",
                      extra={"teacher": model, "temperature": 2.0})
with TrainingClient.from_model(model, learning_rate=1e-4, num_layers=-1,
                               loss_chunk_tokens=shape["loss_chunk_tokens"]) as client:
    if whole:
        client._teacher_heads[str(Path(model).resolve())] = None
    for _ in range(3):
        loss = client.forward_backward(batch)
        client.optim_step().result()
    print(json.dumps({"peak": mx.get_peak_memory(), "tokens": loss.result().num_tokens,
                      "loss": loss.result().loss}))
"""


def distill_peak(model: Path, chunk: int, whole: bool) -> dict:
    """MLX's peak over 3 distillation steps from `model` as its own teacher, the loss sliced
    in `chunk` tokens; the teacher's log-probabilities for the whole batch when `whole`."""
    shape = {**DISTILL_SHAPE, "loss_chunk_tokens": chunk}
    done = subprocess.run(
        [sys.executable, "-c", DISTILL_LOOP, str(model), json.dumps(shape),
         "whole" if whole else "sliced"],
        capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"distillation failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def distill_table(matrix: dict, model_id: str, repeat: int, models_dir: Path) -> None:
    spec = matrix["models"][model_id]
    model = calibrate_memory.build_model(model_id, spec, models_dir, models_dir / "tokenizer")
    medians = {}
    for chunk in DISTILL_CHUNKS:
        peaks: dict[str, list[int]] = {"whole": [], "sliced": []}
        losses: set[float] = set()
        for _ in range(repeat):
            for way in peaks:
                measured = distill_peak(model, chunk, whole=way == "whole")
                peaks[way].append(measured["peak"])
                losses.add(measured["loss"])
        if len(losses) != 1:  # the two ways must train the same steps
            raise SystemExit(f"loss_chunk_tokens {chunk}: the last losses differ: {losses}")
        medians[chunk] = {k: statistics.median(v) for k, v in peaks.items()}
    rows, tokens = DISTILL_SHAPE["rows"], DISTILL_SHAPE["tokens"]
    logprobs = rows * (tokens - 1) * spec["vocab_size"] * 4
    print()
    print(f"Distillation, {model_id} as its own teacher, {rows} x {tokens} tokens: MLX peak, "
          f"median of {repeat} (3 steps each); the teacher's whole-batch float32 "
          f"log-probabilities take {logprobs / MIB:.1f} MiB")
    print(f"{'loss_chunk_tokens':>17} {'teacher whole':>14} {'teacher sliced':>15} {'ratio':>6}")
    for chunk, m in medians.items():
        print(f"{chunk:>17} {m['whole'] / MIB:>14.1f} {m['sliced'] / MIB:>15.1f} "
              f"{m['sliced'] / m['whole']:>6.2f}")


def client_settings(config: dict, model_layers: int) -> dict:
    """The client's settings for a calibration config: what its run spec says
    (calibrate_memory.spec_of), with every layer as -1."""
    hp = calibrate_memory.spec_of(config, Path("."))["hyperparameters"]
    layers = hp["num_layers"]
    return {
        "method": config.get("method", "lora"), "batch_size": hp["batch_size"],
        "max_seq_length": hp["max_seq_length"],
        "num_layers": -1 if layers < 0 or layers >= model_layers else layers,
        "grad_checkpoint": hp["grad_checkpoint"], "optimizer": hp["optimizer"],
        "lora_parameters": hp["lora_parameters"], "learning_rate": hp["learning_rate"],
        "loss_chunk_tokens": hp["zyquo_tui"]["loss_chunk_tokens"],
    }


def client_peak(config: dict, model: Path, together: bool) -> int:
    """MLX's peak over 3 client steps of `config`; optim_step submitted before waiting on the
    forward_backward when `together`, after it otherwise."""
    shape = json.loads((model / "config.json").read_text())
    settings = client_settings(config, shape["num_hidden_layers"])
    done = subprocess.run(
        [sys.executable, "-c", CLIENT_LOOP, str(model), json.dumps(settings),
         "together" if together else "apart"],
        capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"{config['id']}: the client failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = config["batch_size"] * (config["seq"] - 1)
    if result["tokens"] != expected:  # the rows must have the config's shape
        raise SystemExit(f"{config['id']}: {result['tokens']} tokens, not {expected}")
    return result["peak"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", metavar="ID", default=DEFAULT_CONFIGS,
                        help="calibration config ids (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--distill-model", default=DISTILL_MODEL, metavar="ID",
                        help="the calibration model of the distillation table "
                             "(default: %(default)s)")
    parser.add_argument("--distill-only", action="store_true",
                        help="only the distillation table")
    parser.add_argument("--models-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "zyquo-calibration-models")
    args = parser.parse_args(argv)
    matrix = calibrate_memory.load_json(calibrate_memory.MATRIX, {})
    by_id = {c["id"]: c for c in matrix["configs"]}
    unknown = [i for i in args.configs if i not in by_id]
    if unknown:
        print(f"bench_client_memory: no calibration config {unknown[0]!r} in "
              f"{calibrate_memory.MATRIX}; pass ids it lists.", file=sys.stderr)
        return 2
    if args.distill_model not in matrix["models"]:
        print(f"bench_client_memory: no calibration model {args.distill_model!r} in "
              f"{calibrate_memory.MATRIX}; pass a name of its models.", file=sys.stderr)
        return 2
    if args.distill_only:
        distill_table(matrix, args.distill_model, args.repeat, args.models_dir)
        return 0
    tokenizer = args.models_dir / "tokenizer"
    rows = []
    for config_id in args.configs:
        config = by_id[config_id]
        model = calibrate_memory.build_model(config["model"], matrix["models"][config["model"]],
                                             args.models_dir, tokenizer)
        peaks: dict[str, list[int]] = {"trainer": [], "together": [], "apart": []}
        for _ in range(args.repeat):
            peaks["trainer"].append(calibrate_memory.measure_one(config, model)
                                    ["peak_memory_bytes"])
            peaks["together"].append(client_peak(config, model, together=True))
            peaks["apart"].append(client_peak(config, model, together=False))
        median = {k: statistics.median(v) for k, v in peaks.items()}
        rows.append((config_id, median))
        print(f"{config_id}: " + ", ".join(f"{k} {v / MIB:.1f} MiB" for k, v in median.items()),
              flush=True)
    print()
    print(f"MLX peak, median of {args.repeat} (3 steps each)")
    print(f"{'config':<22} {'trainer':>9} {'client, together':>17} {'ratio':>6} "
          f"{'client, apart':>14} {'ratio':>6}")
    for config_id, m in rows:
        print(f"{config_id:<22} {m['trainer'] / MIB:>9.1f} {m['together'] / MIB:>17.1f} "
              f"{m['together'] / m['trainer']:>6.2f} {m['apart'] / MIB:>14.1f} "
              f"{m['apart'] / m['trainer']:>6.2f}")
    distill_table(matrix, args.distill_model, args.repeat, args.models_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
