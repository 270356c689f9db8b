"""Calibrate the memory estimate against real training: measure, store, print the table.

    python bench/calibrate_memory.py                 # the table from the stored measurements
    python bench/calibrate_memory.py --measure       # measure the configs not measured yet
    python bench/calibrate_memory.py --measure ID..  # (re)measure these configs
    python bench/calibrate_memory.py --measure --all # measure every config again
    python bench/calibrate_memory.py --markdown      # the table as Markdown (docs/memory.md)
    python bench/calibrate_memory.py --fit --markdown # the fit and the held-out table
    python bench/calibrate_memory.py --fit-grpo      # grpo_shared_working, held out by family
    python bench/calibrate_memory.py --spread --measure ID..  # measure again: run-to-run spread
    python bench/calibrate_memory.py --spread        # the spread table (repeats.json)
    python bench/calibrate_memory.py --attention     # one attention's backward, in matrices
    python bench/calibrate_memory.py --verdict       # the figure `plan` gives each config

The matrix (bench/memory_calibration/matrix.json) names generated llama models of different
widths, depths, vocabularies, head counts and quantization, and training configs on them. Each
config is measured with `python -m zyquo_tui.trainer.measure`: real mlx-lm training, a few
steps, `mx.get_peak_memory()`, one process at a time. The models' config.json and tensor tables
are stored beside the measurements (models.json), so the estimate can be checked against them
without building a model (tests/unit/test_memory.py does so).

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
# Configs measured again, each peak beside the stored one: how much a peak moves from one run
# to the next on this machine (`run_to_run_spread`), which the verdict's margin adds room for.
REPEATS = CALIBRATION / "repeats.json"


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
    if config.get("objective") == "grpo":  # prompts `seq` long, `group` answers to each
        hp["zyquo_tui"].update(group_size=config["group"],
                               max_completion_tokens=config["answer"],
                               kl_beta=config.get("kl_beta", 0.1))
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
    if config.get("objective") == "grpo":
        parts.append(f"g{config['group']} n{config['answer']}")
    return " ".join(parts)


def markdown_table_lines(rows: list[dict]) -> list[str]:
    """The table of estimates against measured peaks, as docs/memory.md holds it."""
    mib = 1024 * 1024
    return ["| config | settings | estimate MiB | measured MiB | error |",
            "| --- | --- | ---: | ---: | ---: |",
            *(f"| {row['id']} | {describe(row['config'])} | {row['estimate'] / mib:.1f} | "
              f"{row['measured'] / mib:.1f} | {row['error'] * 100:+.1f}% |" for row in rows)]


def print_table(rows: list[dict], markdown: bool) -> None:
    mib = 1024 * 1024
    if markdown:
        print("\n".join(markdown_table_lines(rows)))
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
        if not markdown:  # a study the fit never sees (small, chunked, layers) is held out
            print(outside_target_line({row["id"]: row["error"] for row in rows}))


# The multipliers, and how each gets its value. In every fit, held out or not, the fitted
# ones start from neutral values (NEUTRAL) and the choices (CHOICES) are made from the
# families the fit sees, so a held-out family lends its estimate nothing.
#
# Fitted by non-negative least squares: so many hidden-size, MLP-size and input-size vectors
# a token, checkpointing's extra, and the share of an attention matrix the layer below a
# checkpointed one holds while it starts its recomputation (checkpoint_attention).
FITTED = ("kept_hidden", "kept_mlp", "kept_full_inputs", "dora_outputs",
          "checkpoint_mlp", "checkpoint_attention", "working_hidden", "working_mlp",
          "fixed_bytes")
# Fitted to the configs whose peak is the optimizer's step.
UPDATES = ("update_lora", "update_full")
# Fitted to every full fine-tuning config, whichever phase sets its peak: the share of its
# gradients alive at once (estimate.alive_gradients).
GRADIENT_SHARES = ("full_gradients", "full_gradients_adafactor", "full_gradients_sgd")
NEUTRAL = {**dict.fromkeys(FITTED + UPDATES + GRADIENT_SHARES, 1.0), "fixed_bytes": 0.0}
# Held at what the computation gives them, measured apart from every family: kept_lora (x @ A
# is kept once), kept_inputs (the float32 copy of each adapter's input), checkpoint_hidden
# (one input per checkpointed layer), loss (four logit-sized arrays in the loss's backward),
# kept_attention (each layer's softmax output, one attention matrix), working_attention (the
# rest of one layer's compiled attention backward, measured on the attention alone: 2.25
# more) and dora_weights (one layer's copies while DoRA's magnitudes are computed, measured
# on one layer alone; estimate.py says how).
PHYSICAL = {"kept_lora": 1.0, "kept_inputs": 1.0, "checkpoint_hidden": 1.0, "loss": 4.0,
            "kept_attention": 1.0, "working_attention": 2.25, "dora_weights": 1.0}
# Held, not fitted (estimate.py says why): working_outputs at 0 (the layer's float32
# gradients, working_mlp, hold its peak), dora_adapted at 1 (one layer's copies; no config of
# the matrix peaks in DoRA's forward pass).
HELD = {"working_outputs": 0.0, "dora_adapted": 1.0}
# Chosen, in each fit, from the families it sees (`choose`): loss_overlap, the share of the
# top layer's working memory allocated while the loss's copies are alive, and the
# underestimate weight, how many times an underestimate weighs an overestimate of the same
# size in the fit (the safe side: where the data leave a multiplier uncertain it comes out
# high).
CHOICES = {"loss_overlap": (0.0, 0.25, 0.5, 0.75, 1.0), "underestimate_weight": (1.0, 2.0, 4.0)}


def nnls(a, b, iterations: int = 500):
    """Non-negative least squares (Lawson-Hanson): min |a x - b| with x >= 0."""
    import numpy as np

    m, n = a.shape
    unconstrained = np.linalg.lstsq(a, b, rcond=None)[0]
    if (unconstrained > 0).all():  # the problem is convex: then it is the solution
        return unconstrained
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


class Table:
    """The rows' quantities as arrays, for evaluating estimate.combine on all rows at once
    (the held-out procedure fits thousands of times; tests/unit/test_memory.py checks that this
    agrees with combine)."""

    def __init__(self, rows: list[Row]) -> None:
        import numpy as np

        self.rows = rows
        self.families = np.array([row.family for row in rows])
        self.peak = np.array([float(row.peak) for row in rows])
        names = set().union(*(row.quantities for row in rows)) if rows else set()
        self.q = {name: np.array([float(row.quantities.get(name, 0.0)) for row in rows])
                  for name in names}

    def phases(self, values: dict[str, float]) -> dict:
        """combine()'s total and which phase sets each row's peak, at these multipliers."""
        import numpy as np

        from zyquo_tui.core.memory.estimate import (
            _ATTENTION_KEPT,
            _ATTENTION_WORKING,
            _EXACT,
            _KEPT,
            _WORKING,
            alive_gradients,
        )

        q = self.q
        share = self.working_share(values)  # a grpo step's share of the layer's working memory
        kept = sum(values[name] * q[name] for name in _KEPT)
        checkpointed = q["_checkpointed"] > 0
        loss = values["loss"] * q["loss"] + q["chunked_loss"]
        layer = share * sum(values[name] * q[name] for name in _WORKING)
        overlap = self.overlap(values)
        attention = ((1 - overlap) * sum(values[name] * q[name] for name in _ATTENTION_KEPT)
                     + overlap * share * sum(values[name] * q[name]
                                             for name in _ATTENTION_WORKING))
        loss_phase = kept + loss + overlap * layer - np.where(checkpointed, attention, 0.0)
        layer_branch = kept + layer >= loss_phase
        backward = np.maximum(kept + layer, loss_phase)
        dora_forward = kept + values["dora_adapted"] * q["dora_adapted"]
        dora = dora_forward > backward
        backward = np.maximum(backward, dora_forward)
        step = sum(values[name] * q[name] for name in UPDATES)
        magnitudes = values["dora_weights"] * q["dora_weights"] - q["gradients"] \
            - q["optimizer_state"]
        exact = sum(q[name] for name in _EXACT) - q["gradients"] + alive_gradients(q, values)
        total = exact + values["fixed_bytes"] + np.maximum(np.maximum(step, magnitudes),
                                                           backward) + q["reference"]
        return {"total": total, "exact": exact, "backward_top": backward >= np.maximum(
                    step, magnitudes),
                "step_top": (step > backward) & (step >= magnitudes),
                "layer_branch": layer_branch, "dora": dora, "checkpointed": checkpointed}

    def overlap(self, values: dict[str, float]) -> "np.ndarray":
        """Each row's share of the top layer's working memory alive with the loss's copies:
        loss_overlap, none for a chunked loss (estimate.loss_overlap)."""
        import numpy as np

        return np.where(self.q["chunked_loss"] > 0, 0.0, values["loss_overlap"])

    def working_share(self, values: dict[str, float]) -> "np.ndarray":
        """Each row's multiplier of the working_* terms: grpo_shared_working for a grpo step
        whose prompts are computed once, else 1 (estimate.combine's `working_share`)."""
        import numpy as np

        shared = self.q.get("_grpo_shared", np.zeros(len(self.rows))) > 0
        return np.where(shared, values.get("grpo_shared_working", 1.0), 1.0)

    def slopes(self, phases: dict, values: dict[str, float], names) -> "np.ndarray":
        """d total / d multiplier of each row in its backward phase (columns: names)."""
        import numpy as np

        from zyquo_tui.core.memory.estimate import (
            _ATTENTION_KEPT,
            _ATTENTION_WORKING,
            _KEPT,
            _WORKING,
        )

        columns = []
        for name in names:
            if name == "fixed_bytes":
                columns.append(np.ones(len(self.rows)))
            elif name in _KEPT:
                # a checkpointed run's loss phase: the overlap's share of the attention matrix
                share = np.where(~phases["layer_branch"] & ~phases["dora"]
                                 & phases["checkpointed"] & (name in _ATTENTION_KEPT),
                                 self.overlap(values), 1.0)
                columns.append(share * self.q[name])
            elif name in _WORKING:
                share = np.where(phases["layer_branch"], 1.0, self.overlap(values))
                if name in _ATTENTION_WORKING:
                    share = np.where(phases["checkpointed"] & ~phases["layer_branch"], 0.0,
                                     share)
                columns.append(np.where(phases["dora"], 0.0, share * self.q[name]))
            else:
                raise ValueError(f"{name}: not a fitted multiplier of the backward pass")
        share = self.working_share(values)
        return np.stack([share * column if name in _WORKING else column
                         for name, column in zip(names, columns)], axis=1)

    def errors(self, values: dict[str, float], where=None) -> "np.ndarray":
        """(estimate - measured) / measured of each row (of the rows `where` selects)."""
        errors = (self.phases(values)["total"] - self.peak) / self.peak
        return errors if where is None else errors[where]


@dataclasses.dataclass
class Fit:
    """A fit's multipliers (loss_overlap among them), and the fitted ones no config it saw
    could set (they stay at their neutral values)."""

    values: dict[str, float]
    unsourced: frozenset[str]


def solve(table: Table, where=None, fixed: dict[str, float] | None = None,
          loss_overlap: float = 0.5, underestimate_weight: float = 4.0) -> Fit:
    """Multipliers minimising the relative error of the rows `where` selects (all: None),
    started from neutral values.

    The estimate is piecewise linear in its multipliers (estimate.combine: the backward pass's
    peak is the larger of the loss's and the layers', and the optimizer's step may top it),
    so each round linearises it at the current multipliers: non-negative least squares over
    the rows whose peak is the backward pass, an underestimate weighing `underestimate_weight`
    times an overestimate; then update_lora, the median that explains the adapter rows whose
    peak is the step; then full fine-tuning's gradient shares and update_full, least squares
    over its rows (the shares in either phase, update_full where the step is the peak). A few
    rounds settle which rows are in which phase. (A row whose peak is DoRA's magnitudes, a
    held term, has nothing to fit.) A multiplier that no row in its phase depends on keeps
    its neutral value and is named in `unsourced`.
    """
    import numpy as np

    fixed = fixed or {}
    mask = np.ones(len(table.rows), dtype=bool) if where is None else where
    values = {**NEUTRAL, **PHYSICAL, **HELD, "loss_overlap": loss_overlap, **fixed}
    free = [name for name in FITTED if name not in fixed]
    weights = np.ones(len(table.rows))
    sourced: set[str] = set()
    for _ in range(12):
        before = dict(values)
        phases = table.phases(values)
        rows = mask & phases["backward_top"]
        slopes = table.slopes(phases, values, free)[rows]
        here = phases["total"][rows]
        known = here - slopes @ np.array([values[name] for name in free])
        scale = weights[rows] / table.peak[rows]
        x = nnls(slopes * scale[:, None], (table.peak[rows] - known) * scale)
        sourced = {name for name, column in zip(free, slopes.T) if np.any(column != 0)}
        values.update({name: float(v) if name in sourced else NEUTRAL[name]
                       for name, v in zip(free, x)})
        phases = table.phases(values)
        step_rows = mask & phases["step_top"]
        has = step_rows & (table.q["update_lora"] > 0)
        if has.any():
            sourced.add("update_lora")
            if "update_lora" not in fixed:
                above = (table.peak - phases["exact"] - table.q["reference"]
                         - values["fixed_bytes"])
                values["update_lora"] = float(np.median(above[has] / table.q["update_lora"][has]))
        full = mask & (table.q["_full"] > 0) & (phases["backward_top"] | step_rows)
        columns = {name: table.q[name] for name in GRADIENT_SHARES}
        columns["update_full"] = np.where(step_rows, table.q["update_full"], 0.0)
        names = [name for name, column in columns.items() if np.any(column[full] != 0)]
        sourced.update(names)
        free_full = [name for name in names if name not in fixed]
        if free_full:
            a = np.stack([columns[name][full] for name in free_full], axis=1)
            known = phases["total"][full] - a @ np.array([values[name] for name in free_full])
            scale = weights[full] / table.peak[full]
            x = nnls(a * scale[:, None], (table.peak[full] - known) * scale)
            values.update({name: float(v) for name, v in zip(free_full, x)})
        errors = table.errors(values)
        weights = np.where(errors < 0, underestimate_weight, 1.0)
        if all(abs(values[k] - before[k]) <= 1e-9 * max(1.0, abs(before[k])) for k in values):
            break
    unsourced = frozenset(name for name in FITTED + GRADIENT_SHARES + UPDATES
                          if name not in sourced and name not in fixed)
    return Fit(values, unsourced)


def needed_terms(table: Table, values: dict[str, float], where) -> frozenset[str]:
    """The fitted multipliers the rows `where` selects depend on, in the phase that sets
    each one's peak."""
    import numpy as np

    phases = table.phases(values)
    backward = where & phases["backward_top"]
    slopes = table.slopes(phases, values, FITTED)[backward]
    needed = {name for name, column in zip(FITTED, slopes.T)
              if name != "fixed_bytes" and np.any(column != 0)}
    step = where & phases["step_top"]
    needed |= {update for update in UPDATES if np.any(table.q[update][step] > 0)}
    needed |= {share for share in GRADIENT_SHARES if np.any(table.q[share][where] > 0)}
    return frozenset(needed)


def _score(errors) -> float:
    """What a choice is judged by: the largest underestimate (it sets the verdict's margin)
    plus the median absolute error."""
    import numpy as np

    return float(max(-errors.min(), 0.0) + np.median(np.abs(errors)))


# How many groups of families `choose` judges a candidate on: each group is estimated by the
# candidate fitted on the others (leave one family out inside each fold would fit thousands of
# times, a minute; this, seconds).
INNER_GROUPS = 4


def choose(table: Table, families: list[str], fixed: dict[str, float] | None = None
           ) -> dict[str, float]:
    """The choices (CHOICES) for a fit on `families`, made from those families alone: each
    candidate is judged by cross-validation within them (the families in INNER_GROUPS groups,
    in turn, estimated by the candidate fitted on the rest; `_score` of those errors), and the
    best wins (the first listed on a tie)."""
    import itertools

    import numpy as np

    groups = [families[start::INNER_GROUPS] for start in range(INNER_GROUPS)]
    best, best_score = None, None
    for overlap, weight in itertools.product(*CHOICES.values()):
        errors = []
        for group in groups:
            rest = [family for family in families if family not in group]
            if not group or not rest:
                continue
            values = solve(table, np.isin(table.families, rest), fixed, overlap, weight).values
            errors.append(table.errors(values, np.isin(table.families, group)))
        score = _score(np.concatenate(errors))
        if best_score is None or score < best_score - 1e-12:
            best, best_score = {"loss_overlap": overlap, "underestimate_weight": weight}, score
    return best


def fit_families(table: Table, families: list[str], fixed: dict[str, float] | None = None
                 ) -> tuple[Fit, dict[str, float]]:
    """The fit on `families` with its choices made from them: (fit, choices)."""
    import numpy as np

    choices = choose(table, families, fixed)
    fit = solve(table, np.isin(table.families, families), fixed, choices["loss_overlap"],
                choices["underestimate_weight"])
    return fit, choices


@dataclasses.dataclass
class HeldOut:
    """One family estimated by a fit that never saw it."""

    family: str
    errors: dict[str, float]  # config id: (estimate - measured) / measured
    choices: dict[str, float]
    # Fitted multipliers this family's configs depend on that no other family's config sets:
    # this family is their only source, and held out they stay at their neutral values.
    only_source: frozenset[str]


def hold_out(table: Table, family: str, fixed: dict[str, float] | None = None) -> HeldOut:
    """`family` estimated by a fit on every other family, its choices made from them too,
    its multipliers started from neutral values: nothing of `family` reaches its estimate."""
    families = list(dict.fromkeys(table.families.tolist()))
    fit, choices = fit_families(table, [f for f in families if f != family], fixed)
    where = table.families == family
    errors = table.errors(fit.values, where)
    ids = [row.id for row in table.rows if row.family == family]
    return HeldOut(family, {i: float(e) for i, e in zip(ids, errors)}, choices,
                   needed_terms(table, fit.values, where) & fit.unsourced)


def held_out_by_family(rows: list[Row], fixed: dict[str, float] | None = None
                       ) -> dict[str, HeldOut]:
    """Leave one family out, carrying nothing from it: for each family, the choices and the
    multipliers are made from every other family (starting from neutral values), and this
    family's configs are estimated by them, as a model never seen would be."""
    table = Table(rows)
    return {family: hold_out(table, family, fixed)
            for family in dict.fromkeys(row.family for row in rows)}


def fitted_coefficients(rows: list[Row], fixed: dict[str, float] | None = None
                        ) -> tuple[dict[str, float], dict[str, float]]:
    """The shipped multipliers: the fit on every family, its choices made the same way."""
    table = Table(rows)
    families = list(dict.fromkeys(row.family for row in rows))
    fit, choices = fit_families(table, families, fixed)
    return fit.values, choices


def errors_of(rows: list[Row], values: dict[str, float]) -> list[float]:
    """(estimate - measured) / measured of each row under these multipliers."""
    from zyquo_tui.core.memory.estimate import CPU_COEFFICIENTS, combine

    coefficients = dataclasses.replace(CPU_COEFFICIENTS, **values)
    return [(sum(combine(row.quantities, coefficients).values()) - row.peak) / row.peak
            for row in rows]


def held_out_summary(held: dict[str, HeldOut]) -> str:
    """The held-out errors of every config in one line: max, median, lowest."""
    import numpy as np

    every = np.array([e for family in held.values() for e in family.errors.values()])
    return (f"{len(every)} configs of {len(held)} families held out: max "
            f"{np.abs(every).max() * 100:.1f}%, median {np.median(np.abs(every)) * 100:.1f}%, "
            f"lowest {every.min() * 100:+.1f}%")


# The accuracy target an estimate is judged against (docs/memory.md): no more than this over
# the measured peak, and no more than this under it.
TARGET_OVER = 0.15
TARGET_UNDER = 0.07


def outside_target_line(errors: dict[str, float]) -> str:
    """The configs whose error misses the target, worst first, in one line."""
    missed = sorted(((error, config) for config, error in errors.items()
                     if error > TARGET_OVER or error < -TARGET_UNDER),
                    key=lambda item: -abs(item[0]))
    listed = ", ".join(f"{config} {error:+.1%}" for error, config in missed)
    return (f"outside the target (+{TARGET_OVER:.0%} over, -{TARGET_UNDER:.0%} under): "
            f"{len(missed)} of {len(errors)}" + (f": {listed}" if missed else ""))


def fit(matrix: dict, stored: dict, models: dict, fixed: dict[str, float],
        markdown: bool = False) -> None:
    """Fit the multipliers to the measurements; print them, the errors and, per family, the
    errors with the family left out of the fit."""
    import numpy as np

    rows = fit_rows(matrix, stored, models)
    values, choices = fitted_coefficients(rows, fixed)
    errors = np.array(errors_of(rows, values))
    print("fitted:", {name: round(v, 3) for name, v in values.items()}, "chosen:", choices)
    print(f"in-sample ({len(rows)} configs): max {np.abs(errors).max() * 100:.1f}%, "
          f"median {np.median(np.abs(errors)) * 100:.1f}%, "
          f"lowest {errors.min() * 100:+.1f}%")
    held = held_out_by_family(rows, fixed)
    every = np.array([e for family in held.values() for e in family.errors.values()])
    print(f"{held_out_summary(held)} (the largest underestimate: {max(-every.min(), 0):.3f})")
    print(outside_target_line({config: error for family in held.values()
                               for config, error in family.errors.items()}))
    print_family_table(held, markdown=markdown, matrix=matrix)


def grpo_rows(matrix: dict, stored: dict, models: dict) -> list[Row]:
    """The measured grpo configs of the matrix, with the estimate's quantities."""
    from zyquo_tui.core.memory.estimate import features

    return [Row(config["id"], config["model"],
                features(ModelFacts_from(models, config), training_config(config)),
                stored["measurements"][config["id"]]["peak_memory_bytes"])
            for config in matrix["configs"]
            if config.get("objective") == "grpo" and config["id"] in stored["measurements"]]


# The values grpo_shared_working is chosen from: one multiplier, so a grid is exact enough.
GRPO_GRID = [round(0.001 * i, 3) for i in range(1501)]


def fit_grpo_step(rows: list[Row]) -> float:
    """grpo_shared_working for these rows, every other multiplier held at the shipped ones: the
    grid value with the smallest largest underestimate plus median absolute error (`_score`,
    as `choose` judges a fit)."""
    import numpy as np

    return min(GRPO_GRID, key=lambda value: _score(np.array(
        errors_of(rows, {"grpo_shared_working": value}))))


def grpo_held_out(rows: list[Row]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Each family's grpo configs estimated with grpo_shared_working fitted on the other
    families' alone: ({family: {config: error}}, {family: the value it was estimated with})."""
    held: dict[str, dict[str, float]] = {}
    values: dict[str, float] = {}
    for family in dict.fromkeys(row.family for row in rows):
        values[family] = fit_grpo_step([row for row in rows if row.family != family])
        mine = [row for row in rows if row.family == family]
        held[family] = dict(zip((row.id for row in mine),
                                errors_of(mine, {"grpo_shared_working": values[family]})))
    return held, values


def fit_grpo(matrix: dict, stored: dict, models: dict, markdown: bool = False) -> None:
    """Fit grpo_shared_working to the grpo configs; print it, the errors and, per family, the
    errors with the family left out of the fit (nothing of it in the value it is judged by)."""
    import numpy as np

    rows = grpo_rows(matrix, stored, models)
    if not rows:
        raise SystemExit("no grpo config measured yet (--measure its ids)")
    value = fit_grpo_step(rows)
    errors = np.array(errors_of(rows, {"grpo_shared_working": value}))
    print(f"fitted: grpo_shared_working {value}")
    print(f"in-sample ({len(rows)} configs): max {np.abs(errors).max() * 100:.1f}%, "
          f"median {np.median(np.abs(errors)) * 100:.1f}%, lowest {errors.min() * 100:+.1f}%")
    held, values = grpo_held_out(rows)
    for family, fitted in values.items():
        print(f"  without {family}: grpo_shared_working {fitted}")
    every = np.array([e for family in held.values() for e in family.values()])
    print(f"{len(every)} configs of {len(held)} families held out: max "
          f"{np.abs(every).max() * 100:.1f}%, median {np.median(np.abs(every)) * 100:.1f}%, "
          f"lowest {every.min() * 100:+.1f}%")
    print(outside_target_line({config: error for family in held.values()
                               for config, error in family.items()}))
    print_family_table(held, markdown=markdown, matrix=matrix)


def verdict_figures(matrix: dict, stored: dict, models: dict, replicas: dict
                    ) -> dict[str, tuple[str, float | None]]:
    """Each measured config's source of the figure `plan` gives it, and that figure's error
    with nothing of the config in it: `whole` (64 MiB or less by the terms: the config itself is
    measured, so its error is the run-to-run spread, None here), `replica` (scale 2, nothing
    fitted), `grpo terms` (a larger grpo config, which no replica stands for: its family held
    out of grpo_shared_working), or `terms` (no replica measured: the terms as shipped)."""
    from zyquo_tui.core.memory.advisor import MemoryAdvisor
    from zyquo_tui.core.memory.replica import can_measure_whole

    advisor = MemoryAdvisor.for_calibration(device="cpu")
    grpo = grpo_rows(matrix, stored, models)
    families = {row.family for row in grpo}
    grpo_errors = ({config: error for family in grpo_held_out(grpo)[0].values()
                    for config, error in family.items()} if len(families) > 1 else {})
    figures: dict[str, tuple[str, float | None]] = {}
    for row in table_rows(matrix, stored, models, advisor):
        config, peak = row["config"], row["measured"]
        if can_measure_whole(training_config(config), row["estimate"]):
            figures[row["id"]] = ("whole", None)
        elif config.get("objective") == "grpo" and row["id"] in grpo_errors:
            figures[row["id"]] = ("grpo terms", grpo_errors[row["id"]])
        elif row["id"] in replicas:
            figures[row["id"]] = ("replica", replicas[row["id"]]["estimate_bytes"] / peak - 1)
        else:
            figures[row["id"]] = ("terms", row["error"])
    return figures


def print_verdict(figures: dict[str, tuple[str, float | None]], spread: float | None) -> None:
    """How many configs take each source, each source's errors, and the target, in lines."""
    import numpy as np

    by_source: dict[str, dict[str, float | None]] = {}
    for config, (source, error) in figures.items():
        by_source.setdefault(source, {})[config] = error
    print(f"the figure plan gives, {len(figures)} configs:")
    for source, errors in by_source.items():
        if source == "whole":
            print(f"  whole      {len(errors):3d} configs: the config itself measured (the "
                  "run-to-run spread" + (f", {spread:.2%} at most" if spread is not None else "")
                  + ")")
            continue
        values = np.array(list(errors.values()))
        print(f"  {source:10s} {len(errors):3d} configs: max {np.abs(values).max():.1%}, median "
              f"{np.median(np.abs(values)):.1%}, lowest {values.min():+.1%}")
    print(outside_target_line({config: error for config, (_, error) in figures.items()
                               if error is not None}))


def family_shape(shape: dict) -> str:
    """A model family's shape in a few words: width, layers, heads:kv, MLP, vocabulary, dtype."""
    bits = f"q{shape['quantize_bits']} " if shape.get("quantize_bits") else ""
    tied = "" if shape.get("tie_word_embeddings", True) else " untied"
    return (f"{shape['hidden_size']}w {shape['num_layers']}L {shape['num_heads']}:"
            f"{shape['num_kv_heads']} heads, MLP {shape['intermediate_size']}, vocab "
            f"{shape.get('vocab_size', 512):,}{tied}, {bits}{shape['dtype']}")


def family_table_lines(held: dict, markdown: bool, matrix: dict | None = None) -> list[str]:
    """Per family: configs, the held-out errors' worst, median and lowest, and (held out by
    the terms) the choices made without it and the terms it alone measures. `held` maps a
    family to a HeldOut, or to {config: error} (the replicas', which fit nothing)."""
    import statistics

    lines = []
    fitted = any(isinstance(entry, HeldOut) for entry in held.values())
    if markdown:
        extra = " overlap, weight | only source of |" if fitted else ""
        lines.append(f"| family | shape | configs | worst | median | lowest |{extra}")
        lines.append("| --- | --- | ---: | ---: | ---: | ---: |"
                     + (" ---: | --- |" if fitted else ""))
    for family, entry in held.items():
        errors = entry.errors if isinstance(entry, HeldOut) else entry
        values = list(errors.values())
        worst = max(values, key=abs)
        median = statistics.median(abs(v) for v in values)
        lowest = min(values)
        chosen = only = ""
        if isinstance(entry, HeldOut):
            chosen = (f"{entry.choices['loss_overlap']:g}, "
                      f"{entry.choices['underestimate_weight']:g}")
            only = ", ".join(sorted(entry.only_source)) or "-"
        if markdown:
            shape = family_shape(matrix["models"][family]) if matrix else ""
            line = (f"| {family} | {shape} | {len(values)} | {worst * 100:+.1f}% | "
                    f"{median * 100:.1f}% | {lowest * 100:+.1f}% |")
            lines.append(line + (f" {chosen} | {only} |" if fitted else ""))
        else:
            line = (f"  {family:<24} {len(values):>2} configs  worst {worst * 100:+6.1f}%  "
                    f"median {median * 100:4.1f}%  lowest {lowest * 100:+6.1f}%")
            if fitted:
                line += f"  chosen {chosen:<9} only source of: {only}"
            lines.append(line)
    return lines


def print_family_table(held: dict, markdown: bool, matrix: dict | None = None) -> None:
    print("\n".join(family_table_lines(held, markdown, matrix)))


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


def spreads(stored: dict, repeats: dict) -> dict[str, float]:
    """Per config measured again: (largest - smallest) / smallest of its peaks, the stored
    one and the repeats."""
    result = {}
    for config, peaks in repeats["repeats"].items():
        every = [stored["measurements"][config]["peak_memory_bytes"], *peaks]
        result[config] = (max(every) - min(every)) / min(every)
    return result


def run_to_run_spread(stored: dict, repeats: dict) -> float:
    """The largest spread of any config measured again: how far one run's peak may be above
    another's of the same config."""
    return max(spreads(stored, repeats).values())


def print_spread(stored: dict, repeats: dict) -> None:
    mib = 1024 * 1024
    print("| config | stored MiB | measured again MiB | spread |")
    print("| --- | ---: | --- | ---: |")
    for config, spread in spreads(stored, repeats).items():
        again = ", ".join(f"{peak / mib:.2f}" for peak in repeats["repeats"][config])
        print(f"| {config} | {stored['measurements'][config]['peak_memory_bytes'] / mib:.2f} | "
              f"{again} | {spread * 100:.2f}% |")
    print(f"\nrun-to-run spread: {run_to_run_spread(stored, repeats) * 100:.2f}% (the largest)")


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
    parser.add_argument("--fit-grpo", action="store_true",
                        help="fit grpo_shared_working to the grpo configs (the SFT multipliers "
                             "held) and print it with its held-out errors by family")
    parser.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                        help="with --fit: hold a multiplier at a value")
    parser.add_argument("--replica", action="store_true",
                        help="with --measure: measure each config's half-scale replica "
                             "(core/memory/replica.py) into replica.json; alone: its table")
    parser.add_argument("--scale", type=int, default=2,
                        help="with --replica: divide the widths by this (replica.json for 2, "
                             "replica-xK.json otherwise)")
    parser.add_argument("--spread", action="store_true",
                        help="with --measure ID..: measure these configs again into "
                             "repeats.json (the stored peaks stay); alone: the run-to-run "
                             "spread table")
    parser.add_argument("--verdict", action="store_true",
                        help="the figure `plan` gives each config (measured whole, its "
                             "replica, or the grpo terms held out) and its error")
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

    repeats_path = args.out / "repeats.json"
    if args.spread:
        repeats = load_json(repeats_path, {"machine": machine(), "repeats": {}})
        wanted = [c for c in matrix["configs"] if c["id"] in (args.measure or ())]
        tokenizer_dir = args.models_dir / "tokenizer"
        for number, config in enumerate(wanted, start=1):
            folder = build_model(config["model"], matrix["models"][config["model"]],
                                 args.models_dir, tokenizer_dir)
            peak = measure_one(config, folder)["peak_memory_bytes"]
            repeats["repeats"].setdefault(config["id"], []).append(peak)
            repeats["machine"] = machine()
            write_json(repeats_path, repeats)
            print(f"[{number}/{len(wanted)}] {config['id']}: {peak / 2**20:.2f} MiB", flush=True)
        if repeats["repeats"]:
            print_spread(stored, repeats)
        return 0
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
    if args.verdict:
        repeats = load_json(repeats_path, {"repeats": {}})
        print_verdict(verdict_figures(matrix, stored, models,
                                      load_json(replicas_path, {"replicas": {}})["replicas"]),
                      run_to_run_spread(stored, repeats) if repeats["repeats"] else None)
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
        print(outside_target_line({config: error for family in by_family.values()
                                   for config, error in family.items()}))
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

    if args.fit_grpo:
        fit_grpo(matrix, stored, models, markdown=args.markdown)
        return 0
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
