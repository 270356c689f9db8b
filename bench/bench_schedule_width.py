"""How MLX's evaluation order changes a training step's peak memory and speed.

MLX evaluates a graph from its outputs breadth first, with at most MLX_BFS_MAX_WIDTH
operations waiting at once (20 unless set). The order decides which arrays are alive together,
so the same step peaks differently at different widths (docs/memory.md, Calibration). Training
runs with MLX's default; this bench measures what another width would change, side by side:
each calibration config (bench/memory_calibration/matrix.json) is trained for a few steps
(`python -m zyquo_tui.trainer.measure`, as the calibration measures it) at each width, `--repeat`
times, and the table gives the medians and their ratios to the default width.

    python bench/bench_schedule_width.py [--width 1 --width 100] [--repeat 3] [--steps 8] [ID ...]

Speed here is the CPU's; on Metal the order also decides how many kernels can run at once,
so a width's cost in speed there must be measured on a Mac with this same script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import calibrate_memory  # noqa: E402

DEFAULT_CONFIGS = ["q4g-b2-s512-l2", "w192-b2-s512-l2", "base", "base-full"]
DEFAULT = "default"


def measure_at(width: str, config: dict, folder: Path) -> dict:
    """One measurement with MLX_BFS_MAX_WIDTH set to `width` (unset for MLX's default)."""
    saved = os.environ.pop("MLX_BFS_MAX_WIDTH", None)
    try:
        if width != DEFAULT:
            os.environ["MLX_BFS_MAX_WIDTH"] = width
        return calibrate_memory.measure_one(config, folder)
    finally:
        os.environ.pop("MLX_BFS_MAX_WIDTH", None)
        if saved is not None:
            os.environ["MLX_BFS_MAX_WIDTH"] = saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", metavar="ID", default=DEFAULT_CONFIGS,
                        help="calibration config ids (default: %(default)s)")
    parser.add_argument("--width", action="append", default=[], metavar="N",
                        help="a width to compare with MLX's default (default: 1 and 100)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="training steps per measurement")
    parser.add_argument("--models-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "zyquo-calibration-models")
    args = parser.parse_args(argv)
    widths = [DEFAULT] + (args.width or ["1", "100"])
    matrix = json.loads(calibrate_memory.MATRIX.read_text(encoding="utf-8"))
    by_id = {entry["id"]: entry for entry in matrix["configs"]}
    unknown = [config_id for config_id in args.configs if config_id not in by_id]
    if unknown:
        print(f"{unknown[0]} is not a config of {calibrate_memory.MATRIX}; "
              "pick ids from its configs", file=sys.stderr)
        return 2

    print(f"{'config':<20} {'width':>7} {'peak MiB':>9} {'ratio':>6} {'tok/s':>7} {'ratio':>6}"
          "   peaks of each repeat")
    for config_id in args.configs:
        config = {**by_id[config_id], "steps": args.steps}
        folder = calibrate_memory.build_model(config["model"], matrix["models"][config["model"]],
                                              args.models_dir, args.models_dir / "tokenizer")
        runs = {width: [] for width in widths}
        for _ in range(args.repeat):  # interleaved, so the machine's drift touches every width
            for width in widths:
                runs[width].append(measure_at(width, config, folder))
        base_peak = statistics.median(r["peak_memory_bytes"] for r in runs[DEFAULT])
        base_speed = statistics.median(r["tokens_per_second"] for r in runs[DEFAULT])
        for width in widths:
            peak = statistics.median(r["peak_memory_bytes"] for r in runs[width])
            speed = statistics.median(r["tokens_per_second"] for r in runs[width])
            each = ", ".join(f"{r['peak_memory_bytes'] / 2**20:.1f}" for r in runs[width])
            print(f"{config_id:<20} {width:>7} {peak / 2**20:>9.1f} {peak / base_peak:>6.2f} "
                  f"{speed:>7.0f} {speed / base_speed:>6.2f}   {each}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
