"""`zyquo-tui models`: every local model, what it is, and whether mlx-lm can train it.

JSON output is documented in docs/models-and-datasets.md (schema_version 1).
"""

from __future__ import annotations

from importlib import metadata

from zyquo_tui.cli.output import fmt_bytes, print_json, print_table
from zyquo_tui.core.library.models import (
    READY,
    ModelInfo,
    discover_models,
    model_search_roots,
)

SCHEMA_VERSION = 1


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "models", help="list local models (Hugging Face cache, LM Studio, $ZYQUO_HOME/models, "
                       "config.toml folders)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=cmd_models)


def cmd_models(args) -> int:
    models = discover_models()
    roots = model_search_roots()
    if args.json:
        print_json({
            "schema_version": SCHEMA_VERSION,
            "mlx_lm_version": _mlx_lm_version(),
            "models": [model.to_json() for model in models],
            "searched": [{"path": str(root.path), "source": root.source,
                          "exists": root.path.is_dir()} for root in roots],
        })
        return 0
    if not models:
        print("No models found. Searched:")
        for root in roots:
            print(f"  {root.path} ({root.source})")
        print("Build the tiny sample with `zyquo-tui sample`, or list your model folders in "
              "config.toml under [models] folders.")
        return 0
    print_table(
        ["NAME", "STATUS", "ARCH", "PARAMS", "WEIGHTS", "QUANT", "CONTEXT", "CHAT", "SOURCE"],
        [[m.name, m.status, m.architecture or "?", format_parameters(m.parameters),
          fmt_bytes(m.weight_bytes) if m.weight_bytes is not None else "",
          format_precision(m), m.context_length or "", "yes" if m.chat_template else "no",
          m.source] for m in models],
    )
    not_ready = [m for m in models if m.status != READY]
    if not_ready:
        print()
        for model in not_ready:
            print(f"{model.name} ({model.path}): {model.status_detail}")
    return 0


def format_parameters(count: int | None) -> str:
    """106816 -> 107K, 7241732096 -> 7.2B: the way model sizes are spoken of."""
    if count is None:
        return ""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            value = count / size
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    return str(count)


def format_precision(model: ModelInfo) -> str:
    """4-bit g64 for a quantized model, else its main stored dtype (bf16, f16, f32)."""
    if model.quantization is not None:
        q = model.quantization
        text = f"{q.bits}-bit" + (f" g{q.group_size}" if q.group_size else "")
        if q.mode != "affine":
            text += f" {q.mode}"
        return text + (" mixed" if q.per_layer else "")
    if not model.weight_dtypes:
        return ""
    main = max(model.weight_dtypes, key=model.weight_dtypes.get)
    return main.lower()


def _mlx_lm_version() -> str | None:
    try:
        return metadata.version("mlx-lm")
    except metadata.PackageNotFoundError:
        return None
