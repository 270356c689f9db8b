"""What a replica costs beside measuring the real config: seconds, peak memory, and how close
its prediction comes, side by side on calibration configs (core/memory/replica.py).

    python bench/bench_replica.py [--repeat 3] [--scale 2 --scale 4] [ID ...]

For each config: the real measurement (a few training steps of the config itself) and the
replica's at each scale, runs alternating, `--repeat` times; the table gives the medians: the
subprocess's wall seconds, the peak it needed, and the replica's prediction against the real
peak (the median's, and the lowest of the repeats': MLX's queue makes some peaks vary from
process to process). Models are generated from bench/memory_calibration/matrix.json (built
once into a temporary folder).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import calibrate_memory  # noqa: E402

DEFAULT_CONFIGS = ("base", "q4g-b2-s512-l2", "w384-b2-s512-l4", "v152k-b1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", default=list(DEFAULT_CONFIGS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", type=int, action="append")
    parser.add_argument("--models-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "zyquo-calibration-models")
    args = parser.parse_args(argv)
    scales = args.scale or [2, 4]
    matrix = calibrate_memory.load_json(calibrate_memory.MATRIX, None)
    models = calibrate_memory.load_json(calibrate_memory.MODELS, {})
    tokenizer = args.models_dir / "tokenizer"
    entries = {e["id"]: e for e in matrix["configs"]}
    unknown = [config_id for config_id in args.ids if config_id not in entries]
    if unknown:
        raise SystemExit(f"not in {calibrate_memory.MATRIX}: {', '.join(unknown)}")
    rows = []
    for config_id in args.ids:
        entry = entries[config_id]
        folder = calibrate_memory.build_model(entry["model"], matrix["models"][entry["model"]],
                                              args.models_dir, tokenizer)
        real: list[tuple[float, int]] = []
        replicas: dict[int, list[tuple[float, int, int]]] = {k: [] for k in scales}
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = calibrate_memory.measure_one(entry, folder)
            real.append((time.perf_counter() - started, result["peak_memory_bytes"]))
            for k in scales:
                started = time.perf_counter()
                measured = calibrate_memory.measure_replica(entry, models, tokenizer, k)
                if measured is None:
                    break
                replicas[k].append((time.perf_counter() - started,
                                    measured["replica_peak_bytes"], measured["estimate_bytes"]))
        seconds = statistics.median(s for s, _ in real)
        peak = statistics.median(p for _, p in real)
        rows.append([config_id, "real", f"{seconds:.1f}", f"{peak / 2**20:.1f}", "", "", ""])
        for k, runs in replicas.items():
            if not runs:
                rows.append([config_id, f"1/{k}", "no replica", "", "", "", ""])
                continue
            s = statistics.median(r[0] for r in runs)
            p = statistics.median(r[1] for r in runs)
            predicted = statistics.median(r[2] for r in runs)
            rows.append([config_id, f"1/{k}", f"{s:.1f} ({s / seconds:.2f}x)",
                         f"{p / 2**20:.1f} ({p / peak:.3f}x)", f"{predicted / 2**20:.1f}",
                         f"{predicted / peak - 1:+.1%}",
                         f"{min(r[2] for r in runs) / peak - 1:+.1%}"])
    header = ["config", "measured", "seconds", "peak MiB", "predicts MiB", "vs real",
              "lowest vs real"]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
