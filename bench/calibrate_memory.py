"""Calibrate the memory estimate against real training: measure, store, print the table.

    python bench/calibrate_memory.py                 # the table from the stored measurements
    python bench/calibrate_memory.py --measure       # measure the configs not measured yet
    python bench/calibrate_memory.py --measure ID..  # (re)measure these configs
    python bench/calibrate_memory.py --measure --all # measure every config again
    python bench/calibrate_memory.py --markdown      # the table as Markdown (docs/memory.md)
    python bench/calibrate_memory.py --attention     # one attention's backward, in matrices

The matrix (bench/memory_calibration/matrix.json) names generated llama models of different
widths, depths, vocabularies, head counts and quantization, and training configs on them. Each
config is measured with `python -m zyquo_tui.trainer.measure`: real mlx-lm training, a few
steps, `mx.get_peak_memory()`, one process at a time. The models' config.json and tensor tables
are stored beside the measurements (models.json), so the estimate can be checked against them
without building a model (tests/test_memory.py does so).

Measurements take minutes on a CPU; keep new models small (quantized ones smaller still).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


CALIBRATION = REPO / "bench" / "memory_calibration"
MATRIX = CALIBRATION / "matrix.json"
MEASUREMENTS = CALIBRATION / "measurements.json"
MODELS = CALIBRATION / "models.json"


def load_json(path: Path, default):
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else default


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temp, path)


def build_model(name: str, shape: dict, models_dir: Path, tokenizer_dir: Path) -> Path:
    """The generated model `name` (built once into models_dir; reused while its shape holds)."""
    folder = models_dir / name
    stamp = folder / "shape.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == shape:
        return folder
    code = (
        "import json, sys\n"
        "from zyquo_tui.trainer.sample_model import build_model, build_tokenizer\n"
        "from pathlib import Path\n"
        "shape = json.loads(sys.argv[3])\n"
        "tok = Path(sys.argv[2])\n"
        "if not (tok / 'tokenizer.json').is_file(): build_tokenizer(tok)\n"
        "build_model(sys.argv[1], tokenizer_dir=tok, **shape)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(folder), str(tokenizer_dir), json.dumps(shape)],
                   check=True, cwd=REPO, stdin=subprocess.DEVNULL)
    stamp.write_text(json.dumps(shape))
    return folder


def model_record(folder: Path) -> dict:
    """config.json and the tensor table of a model, as ModelFacts.from_record reads them."""
    from zyquo_tui.core.library.safetensors_header import read_headers

    table = read_headers(sorted(folder.glob("model*.safetensors")))
    return {
        "config": json.loads((folder / "config.json").read_text()),
        "tensors": [[t.name, t.dtype, list(t.shape), t.nbytes] for t in table],
    }


def spec_of(config: dict, model_path: Path) -> dict:
    hp = {
        "batch_size": config["batch_size"],
        "max_seq_length": config["seq"],
        "num_layers": config.get("num_layers", 16),
        "grad_checkpoint": config.get("grad_checkpoint", False),
        "optimizer": config.get("optimizer", "adam"),
        "grad_accumulation_steps": config.get("grad_accumulation_steps", 1),
        "lora_parameters": {"rank": config.get("rank", 8), "dropout": 0.0, "scale": 20.0},
        "learning_rate": 1e-5,
        # The table was measured with mlx-lm's whole-batch loss; an entry may ask for slices.
        "zyquo_tui": {"loss_chunk_tokens": config.get("loss_chunk_tokens", "off")},
    }
    if config.get("objective"):  # a preference run: pairs, each side `seq` long
        hp["zyquo_tui"]["objective"] = config["objective"]
    return {"model": str(model_path), "method": config.get("method", "lora"),
            "hyperparameters": hp, "synthetic_tokens": config["seq"],
            "steps": config.get("steps", 3)}


def training_config(config: dict):
    from zyquo_tui.core.memory.estimate import TrainingConfig

    spec = spec_of(config, Path("."))
    return TrainingConfig.from_hyperparameters(spec["method"], spec["hyperparameters"],
                                               longest_row_tokens=config["seq"])


def measure_one(config: dict, model_path: Path, spec: dict | None = None) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(spec or spec_of(config, model_path), handle)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "zyquo_tui.trainer.measure", handle.name],
            capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL,
        )
    finally:
        os.unlink(handle.name)
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise SystemExit(f"{config['id']}: the measurement failed:\n{done.stderr[-2000:]}")
    if "error" in result:
        raise SystemExit(f"{config['id']}: {result['error']}")
    return result


def replica_spec(config: dict, model_record_: dict, tokenizer_dir: Path, scale: int = 2):
    """The measurement spec of the config's replica with its widths divided by `scale`
    (core/memory/replica.py), and the plan; None when no such replica can stand for it."""
    from zyquo_tui.core.memory.facts import ModelFacts
    from zyquo_tui.core.memory.replica import plan_replica

    replica = plan_replica(model_record_["config"], training_config(config), scales=(scale,))
    if replica is None:
        return None, None
    spec = spec_of(config, tokenizer_dir)
    hp = spec["hyperparameters"]
    hp["max_seq_length"] = replica.config.max_seq_length
    hp["lora_parameters"]["rank"] = replica.config.rank
    if isinstance(replica.config.loss_chunk_tokens, int):
        hp["zyquo_tui"]["loss_chunk_tokens"] = replica.config.loss_chunk_tokens
    facts = ModelFacts.from_record(model_record_, path=config["model"])
    spec["synthetic_tokens"] = replica.config.max_seq_length
    spec["replica"] = {"config": replica.model_config, "dtype": facts.compute_dtype}
    return spec, replica


def measure_replica(config: dict, models: dict, tokenizer_dir: Path,
                    scale: int = 2) -> dict | None:
    """Measure the config's replica; its figures and the real peak they predict."""
    from zyquo_tui.core.memory.facts import ModelFacts

    record = models[config["model"]]
    spec, replica = replica_spec(config, record, tokenizer_dir, scale)
    if spec is None:
        return None
    result = measure_one(config, tokenizer_dir, spec)
    facts = ModelFacts.from_record(record, path=config["model"])
    return {"scale": replica.scale, "replica_peak_bytes": result["peak_memory_bytes"],
            "replica_weights_bytes": result["model_weights_bytes"],
            "estimate_bytes": replica.predicted_peak(facts, training_config(config),
                                                     result["peak_memory_bytes"],
                                                     result["model_weights_bytes"]),
            "seconds": result["seconds"]}


def machine() -> dict:
    from importlib.metadata import version

    # MLX_BFS_MAX_WIDTH sets how MLX orders a graph's operations (how many it keeps in
    # flight), and so the step's peak: training runs with MLX's default, 20 (docs/memory.md).
    return {"platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "cpus": os.cpu_count(),
            "mlx": version("mlx"), "mlx_lm": version("mlx-lm"),
            "mlx_bfs_max_width": os.environ.get("MLX_BFS_MAX_WIDTH", "default")}


def table_rows(matrix: dict, stored: dict, models: dict, advisor) -> list[dict]:
    from zyquo_tui.core.memory.facts import ModelFacts

    rows = []
    for config in matrix["configs"]:
        measured = stored.get("measurements", {}).get(config["id"])
        if measured is None or config["model"] not in models:
            continue
        facts = ModelFacts.from_record(models[config["model"]], path=config["model"])
        estimate = advisor.estimate(facts, training_config(config))
        peak = measured["peak_memory_bytes"]
        rows.append({"id": config["id"], "config": config, "estimate": estimate.total_bytes,
                     "measured": peak, "error": (estimate.total_bytes - peak) / peak,
                     "seconds": measured.get("seconds")})
    return rows


def describe(config: dict) -> str:
    parts = [config["model"], config.get("method", "lora"), f"b{config['batch_size']}",
             f"s{config['seq']}", f"L{config.get('num_layers', 16)}"]
    if config.get("method", "lora") != "full":
        parts.append(f"r{config.get('rank', 8)}")
    if config.get("grad_checkpoint"):
        parts.append("ckpt")
    if config.get("grad_accumulation_steps", 1) > 1:
        parts.append(f"acc{config['grad_accumulation_steps']}")
    if config.get("optimizer", "adam") != "adam":
        parts.append(config["optimizer"])
    if config.get("objective"):
        parts.append(config["objective"])
    return " ".join(parts)


def print_table(rows: list[dict], markdown: bool) -> None:
    mib = 1024 * 1024
    if markdown:
        print("| config | settings | estimate MiB | measured MiB | error |")
        print("| --- | --- | ---: | ---: | ---: |")
        for row in rows:
            print(f"| {row['id']} | {describe(row['config'])} | {row['estimate'] / mib:.1f} | "
                  f"{row['measured'] / mib:.1f} | {row['error'] * 100:+.1f}% |")
    else:
        print(f"{'config':<16} {'settings':<44} {'estimate':>10} {'measured':>10} {'error':>7}")
        for row in rows:
            print(f"{row['id']:<16} {describe(row['config']):<44} {row['estimate'] / mib:>9.1f}M "
                  f"{row['measured'] / mib:>9.1f}M {row['error'] * 100:>+6.1f}%")
    errors = [abs(row["error"]) for row in rows]
    if errors:
        summary = (f"{len(rows)} configs: max error {max(errors) * 100:.1f}%, "
                   f"median {statistics.median(errors) * 100:.1f}%")
        print(f"\n{summary}" if not markdown else f"\n{summary}.")


# The multipliers fitted by --fit, and those held at what the computation gives them:
# kept_lora (x @ A is kept once), kept_inputs (the float32 copy of each adapter's input),
# checkpoint_hidden (one input per checkpointed layer), loss (four logit-sized arrays in the
# loss's backward), kept_attention (each layer's softmax output, one attention matrix) and
# working_attention (the rest of one layer's compiled attention backward: 2.25 more),
# checkpoint_attention (the layer below's recomputation: 0.6 of a matrix) and dora_weights
# (one layer's copies while DoRA's magnitudes are computed; estimate.py says how they were
# measured).
FITTED = ("kept_hidden", "kept_mlp", "kept_full_inputs", "dora_outputs",
          "checkpoint_mlp", "working_hidden", "working_mlp",
          "fixed_bytes")
PHYSICAL = {"kept_lora": 1.0, "kept_inputs": 1.0, "checkpoint_hidden": 1.0, "loss": 4.0,
            "kept_attention": 1.0, "working_attention": 2.25, "checkpoint_attention": 0.6,
            "dora_weights": 1.0}
# Held, not fitted (estimate.py says what they are and why): loss_overlap, chosen by
# leave-one-family-out validation of 0, 0.25, 0.5, 0.75 and 1; working_outputs at 0, what the
# fit gave it before DoRA's adapted weights left the working memory; dora_adapted at 1, one
# layer's copies (no config of the matrix peaks in DoRA's forward pass).
HELD = {"loss_overlap": 0.5, "working_outputs": 0.0, "dora_adapted": 1.0}
# The safe side: an underestimate weighs this many times an overestimate of the same size in
# the fit, so the multipliers over-state where the data leave them uncertain.
UNDERESTIMATE_WEIGHT = 4.0


def nnls(a, b, iterations: int = 500):
    """Non-negative least squares (Lawson-Hanson): min |a x - b| with x >= 0."""
    import numpy as np

    m, n = a.shape
    passive = np.zeros(n, dtype=bool)
    x = np.zeros(n)
    w = a.T @ (b - a @ x)
    for _ in range(iterations):
        if passive.all() or w[~passive].max() <= 1e-12:
            break
        j = np.argmax(np.where(passive, -np.inf, w))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            mask = passive & (z <= 0)
            alpha = np.min(x[mask] / (x[mask] - z[mask]))
            x = x + alpha * (z - x)
            passive &= x > 1e-12
        w = a.T @ (b - a @ x)
    return x


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured config: its family (the model it trains), quantities and measured peak."""

    id: str
    family: str
    quantities: dict
    peak: int


def fit_rows(matrix: dict, stored: dict, models: dict) -> list[Row]:
    """Every measured config of the matrix, with the estimate's quantities."""
    from zyquo_tui.core.memory.estimate import features

    rows = []
    for config in matrix["configs"]:
        measured = stored["measurements"].get(config["id"])
        # Preference configs are not fitted: they check the SFT terms applied to two
        # sequences per row (and a reference copy), on configs the fit never saw.
        if measured is not None and not config.get("objective"):
            facts = ModelFacts_from(models, config)
            rows.append(Row(config["id"], config["model"],
                            features(facts, training_config(config)),
                            measured["peak_memory_bytes"]))
    return rows


def solve(rows: list[Row], fixed: dict[str, float] | None = None) -> dict[str, float]:
    """Multipliers minimising the relative error of every row.

    The estimate is piecewise linear in its multipliers (estimate.combine: the backward pass's
    peak is the larger of the loss's and the layers', and the optimizer's step may top it),
    so each round linearises it at the current multipliers: non-negative least squares over
    the rows whose peak is the backward pass, then each `update_*` the median that explains
    the rows whose peak is the step. A few rounds settle which rows are in which phase. (A row
    whose peak is DoRA's magnitudes, a held term, has nothing to fit.)
    """
    import numpy as np

    from zyquo_tui.core.memory.estimate import _EXACT, CPU_COEFFICIENTS, combine

    fixed = fixed or {}
    # Start from the shipped multipliers: the rounds only move rows between phases.
    start = {f: getattr(CPU_COEFFICIENTS, f) for f in FITTED + ("update_lora", "update_full")}
    values = {**start, **PHYSICAL, **HELD, **fixed}
    free = [name for name in FITTED if name not in fixed]

    def backward(q, values) -> float:
        parts = combine(q, dataclasses.replace(CPU_COEFFICIENTS, **values))
        return sum(parts.values()) - parts["overhead"] + values["fixed_bytes"]

    weights = {row.id: 1.0 for row in rows}
    for _ in range(8):
        a, b, step_rows = [], [], []
        for row in rows:
            q = row.quantities
            here = backward(q, values)
            total = sum(combine(q, dataclasses.replace(CPU_COEFFICIENTS, **values)).values())
            if total > here:
                step = (sum(q[e] for e in _EXACT) + values["fixed_bytes"]
                        + values["update_lora"] * q["update_lora"]
                        + values["update_full"] * q["update_full"])
                if step >= total:
                    step_rows.append(row)
                continue
            # The slope of the backward peak along each free multiplier, and what the
            # held ones add: here = known + sum(slope x value).
            slopes = [backward(q, {**values, f: values[f] + 1.0}) - here for f in free]
            known = here - sum(s * values[f] for s, f in zip(slopes, free))
            weight = weights[row.id] / row.peak
            a.append([s * weight for s in slopes])
            b.append((row.peak - known) * weight)
        x = nnls(np.array(a), np.array(b))
        values.update({f: float(v) for f, v in zip(free, x)})
        for row, error in zip(rows, errors_of(rows, values)):
            weights[row.id] = UNDERESTIMATE_WEIGHT if error < 0 else 1.0
        for update in ("update_lora", "update_full"):
            ratios = [(row.peak - sum(row.quantities[e] for e in _EXACT) - values["fixed_bytes"])
                      / row.quantities[update] for row in step_rows if row.quantities[update] > 0]
            if ratios and update not in fixed:
                values[update] = float(np.median(ratios))
    return values


def errors_of(rows: list[Row], values: dict[str, float]) -> list[float]:
    """(estimate - measured) / measured of each row under these multipliers."""
    from zyquo_tui.core.memory.estimate import CPU_COEFFICIENTS, combine

    coefficients = dataclasses.replace(CPU_COEFFICIENTS, **values)
    return [(sum(combine(row.quantities, coefficients).values()) - row.peak) / row.peak
            for row in rows]


def held_out_by_family(rows: list[Row], fixed: dict[str, float] | None = None
                       ) -> dict[str, dict[str, float]]:
    """Leave one family out: for each family, fit on every other family and estimate this
    one's configs. {family: {config id: error}}: how the estimate does on a model it has
    never seen."""
    families: dict[str, list[Row]] = {}
    for row in rows:
        families.setdefault(row.family, []).append(row)
    result = {}
    for family, held in families.items():
        values = solve([row for row in rows if row.family != family], fixed)
        result[family] = {row.id: error for row, error in zip(held, errors_of(held, values))}
    return result


def fit(matrix: dict, stored: dict, models: dict, fixed: dict[str, float],
        markdown: bool = False) -> None:
    """Fit the multipliers to the measurements; print them, the errors and, per family, the
    errors with the family left out of the fit."""
    import numpy as np

    rows = fit_rows(matrix, stored, models)
    values = solve(rows, fixed)
    errors = np.array(errors_of(rows, values))
    print("fitted:", {name: round(v, 3) for name, v in values.items()})
    print(f"in-sample ({len(rows)} configs): max {np.abs(errors).max() * 100:.1f}%, "
          f"median {np.median(np.abs(errors)) * 100:.1f}%, "
          f"lowest {errors.min() * 100:+.1f}%")
    held = held_out_by_family(rows, fixed)
    every = np.array([e for family in held.values() for e in family.values()])
    print(f"leave one family out ({len(held)} families): max {np.abs(every).max() * 100:.1f}%, "
          f"median {np.median(np.abs(every)) * 100:.1f}%, lowest {every.min() * 100:+.1f}%"
          f" (held_out_error, the largest underestimate: {max(-every.min(), 0):.3f})")
    print_family_table(held, markdown=markdown, matrix=matrix)


def family_shape(shape: dict) -> str:
    """A model family's shape in a few words: width, layers, heads:kv, MLP, vocabulary, dtype."""
    bits = f"q{shape['quantize_bits']} " if shape.get("quantize_bits") else ""
    tied = "" if shape.get("tie_word_embeddings", True) else " untied"
    return (f"{shape['hidden_size']}w {shape['num_layers']}L {shape['num_heads']}:"
            f"{shape['num_kv_heads']} heads, MLP {shape['intermediate_size']}, vocab "
            f"{shape.get('vocab_size', 512):,}{tied}, {bits}{shape['dtype']}")


def print_family_table(held: dict[str, dict[str, float]], markdown: bool,
                       matrix: dict | None = None) -> None:
    """Per family: configs, and the held-out errors' worst, median and lowest."""
    import statistics

    if markdown:
        print("| family | shape | configs | worst | median | lowest |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
    for family, errors in held.items():
        values = list(errors.values())
        worst = max(values, key=abs)
        median = statistics.median(abs(v) for v in values)
        lowest = min(values)
        if markdown:
            shape = family_shape(matrix["models"][family]) if matrix else ""
            print(f"| {family} | {shape} | {len(values)} | {worst * 100:+.1f}% | "
                  f"{median * 100:.1f}% | {lowest * 100:+.1f}% |")
        else:
            print(f"  {family:<24} {len(values):>2} configs  worst {worst * 100:+6.1f}%  "
                  f"median {median * 100:4.1f}%  lowest {lowest * 100:+6.1f}%")


def attention_copies(tokens: int = 1024, head_dim: int = 16) -> None:
    """What working_attention and kept_attention stand for, measured: the peak of MLX's attention
    (causal, as mlx-lm calls it) differentiated alone, compiled as the training step is and
    not, in attention matrices (batch x heads x tokens^2 in its dtype), and of its forward
    pass alone."""
    import mlx.core as mx

    print(f"{'dtype':<10} {'heads':>6} {'compiled backward':>18} {'backward':>9} "
          f"{'forward':>8}  (peaks, in matrices)")
    for dtype in (mx.bfloat16, mx.float32):
        for heads, kv_heads in ((4, 4), (8, 1)):
            q = mx.random.normal((1, heads, tokens, head_dim)).astype(dtype)
            k = mx.random.normal((1, kv_heads, tokens, head_dim)).astype(dtype)
            v = mx.random.normal((1, kv_heads, tokens, head_dim)).astype(dtype)
            mx.eval(q, k, v)

            def attend(q, k, v):
                out = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask="causal")
                return out.astype(mx.float32).sum()

            matrix = heads * tokens * tokens * dtype.size
            peaks = []
            backward = mx.grad(attend, argnums=(0, 1, 2))
            for run in (mx.compile(backward), backward, attend):
                mx.reset_peak_memory()
                start = mx.get_active_memory()
                mx.eval(run(q, k, v))
                peaks.append((mx.get_peak_memory() - start) / matrix)
            print(f"{str(dtype).split('.')[-1]:<10} {heads:>3}:{kv_heads:<2} {peaks[0]:>18.2f} "
                  f"{peaks[1]:>9.2f} {peaks[2]:>8.2f}")


def ModelFacts_from(models: dict, config: dict):
    from zyquo_tui.core.memory.facts import ModelFacts

    return ModelFacts.from_record(models[config["model"]], path=config["model"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", nargs="*", metavar="ID",
                        help="measure these configs (none: those without a measurement)")
    parser.add_argument("--all", action="store_true", help="with --measure: every config")
    parser.add_argument("--matrix", type=Path, default=MATRIX)
    parser.add_argument("--out", type=Path, default=CALIBRATION,
                        help="folder of measurements.json and models.json")
    parser.add_argument("--models-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "zyquo-calibration-models")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--no-table", action="store_true", help="measure only")
    parser.add_argument("--fit", action="store_true",
                        help="fit the multipliers to the stored measurements and print them")
    parser.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                        help="with --fit: hold a multiplier at a value")
    parser.add_argument("--replica", action="store_true",
                        help="with --measure: measure each config's half-scale replica "
                             "(core/memory/replica.py) into replica.json; alone: its table")
    parser.add_argument("--scale", type=int, default=2,
                        help="with --replica: divide the widths by this (replica.json for 2, "
                             "replica-xK.json otherwise)")
    parser.add_argument("--attention", action="store_true",
                        help="measure one attention's backward peak, in attention matrices "
                             "(what kept_attention and working_attention stand for)")
    args = parser.parse_args(argv)

    if args.attention:
        attention_copies()
        return 0
    matrix = load_json(args.matrix, None)
    if matrix is None:
        raise SystemExit(f"{args.matrix}: no such matrix")
    measurements_path = args.out / "measurements.json"
    models_path = args.out / "models.json"
    stored = load_json(measurements_path, {"machine": machine(), "measurements": {}})
    models = load_json(models_path, {})

    replicas_path = args.out / ("replica.json" if args.scale == 2
                                else f"replica-x{args.scale}.json")
    if args.replica and args.measure is not None:
        replicas = load_json(replicas_path, {"machine": machine(), "replicas": {}})
        tokenizer_dir = args.models_dir / "tokenizer"
        if not (tokenizer_dir / "tokenizer.json").is_file():
            from zyquo_tui.trainer.sample_model import build_tokenizer

            build_tokenizer(tokenizer_dir)
        wanted = [c for c in matrix["configs"] if c["model"] in models
                  and (args.all or (c["id"] in args.measure if args.measure
                                    else c["id"] not in replicas["replicas"]))]
        for number, config in enumerate(wanted, start=1):
            try:
                result = measure_replica(config, models, tokenizer_dir, args.scale)
            except SystemExit as failed:
                print(f"[{number}/{len(wanted)}] {failed}", flush=True)
                continue
            if result is None:
                print(f"[{number}/{len(wanted)}] {config['id']}: no replica", flush=True)
                continue
            replicas["replicas"][config["id"]] = result
            replicas["machine"] = machine()
            write_json(replicas_path, replicas)
            measured = stored["measurements"].get(config["id"], {}).get("peak_memory_bytes")
            error = f" ({result['estimate_bytes'] / measured - 1:+.1%})" if measured else ""
            print(f"[{number}/{len(wanted)}] {config['id']}: replica "
                  f"{result['replica_peak_bytes'] / 2**20:.1f} MiB, predicts "
                  f"{result['estimate_bytes'] / 2**20:.1f} MiB{error} "
                  f"({result['seconds']:.0f} s)", flush=True)
        return 0
    if args.replica:
        replicas = load_json(replicas_path, {"replicas": {}})["replicas"]
        by_family: dict[str, dict[str, float]] = {}
        for config in matrix["configs"]:
            measured = stored["measurements"].get(config["id"])
            if measured and config["id"] in replicas:
                peak = measured["peak_memory_bytes"]
                by_family.setdefault(config["model"], {})[config["id"]] = (
                    replicas[config["id"]]["estimate_bytes"] - peak) / peak
        errors = [e for family in by_family.values() for e in family.values()]
        if not errors:
            raise SystemExit(f"{replicas_path}: no replica measured yet (add --measure)")
        print(f"replicas ({len(errors)} configs of {len(by_family)} families, nothing fitted): "
              f"max {max(map(abs, errors)):.1%}, median "
              f"{statistics.median(map(abs, errors)):.1%}, lowest {min(errors):+.1%}")
        print_family_table(by_family, args.markdown, matrix)
        return 0
    if args.measure is not None:
        wanted = [c for c in matrix["configs"]
                  if (args.all or (c["id"] in args.measure if args.measure
                                   else c["id"] not in stored["measurements"]))]
        tokenizer_dir = args.models_dir / "tokenizer"
        for number, config in enumerate(wanted, start=1):
            shape = matrix["models"][config["model"]]
            folder = build_model(config["model"], shape, args.models_dir, tokenizer_dir)
            models[config["model"]] = model_record(folder)
            write_json(models_path, models)
            started = time.perf_counter()
            try:
                result = measure_one(config, folder)
            except SystemExit as failed:  # one config's failure (a NaN, say) stops no other
                print(f"[{number}/{len(wanted)}] {failed}", flush=True)
                continue
            result["measured_at"] = time.strftime("%Y-%m-%d")
            stored["measurements"][config["id"]] = result
            stored["machine"] = machine()
            write_json(measurements_path, stored)
            print(f"[{number}/{len(wanted)}] {config['id']}: "
                  f"{result['peak_memory_bytes'] / 2**20:.1f} MiB "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)

    if args.fit:
        fixed = {k: float(v) for k, v in (item.split("=", 1) for item in args.fix)}
        fit(matrix, stored, models, fixed, markdown=args.markdown)
        return 0
    if args.no_table:
        return 0
    from zyquo_tui.core.memory.advisor import MemoryAdvisor

    advisor = MemoryAdvisor.for_calibration(device="cpu")
    print_table(table_rows(matrix, stored, models, advisor), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
