"""`python -m zyquo_tui.trainer.probe`: what MLX sees on this machine, printed as JSON.

Run as a subprocess by `zyquo-tui doctor` and the memory advisor, so the dashboard never
imports mlx. On Metal, `max_recommended_working_set_size` is the budget MLX trains within.
"""

from __future__ import annotations

import json
import platform
import sys


def probe() -> dict:
    import mlx.core as mx
    import mlx_lm

    info = {k: (v if isinstance(v, (int, float, str, bool)) else str(v))
            for k, v in mx.device_info().items()}
    return {
        "python": platform.python_version(),
        "mlx": mx.__version__,
        "mlx_lm": mlx_lm.__version__,
        "device": str(mx.default_device()),
        "device_info": info,
        "memory_limit_bytes": int(mx.get_memory_limit()),
        "recommended_working_set_bytes": info.get("max_recommended_working_set_size"),
    }


if __name__ == "__main__":
    json.dump(probe(), sys.stdout)
    sys.stdout.write("\n")
