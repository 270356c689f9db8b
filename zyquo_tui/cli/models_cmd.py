"""`zyquo-tui models`: every local model, what it is, and whether mlx-lm can train it; the
GGUF files that `zyquo-tui models import` can make into one.

JSON output is documented in docs/models-and-datasets.md (schema_version 1; `importable`
and `gguf_searched` were added beside `models` and `searched`).
"""

from __future__ import annotations

from importlib import metadata

from zyquo_tui.cli.output import fmt_bytes, print_json, print_table
from zyquo_tui.core.library.gguf_files import (
    GGUFFile,
    discover_gguf_files,
    gguf_search_roots,
)
from zyquo_tui.core.library.model_import import DTYPES, import_gguf_model
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
                       "config.toml folders) and importable GGUF files (LM Studio, Ollama)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=cmd_models)
    actions = parser.add_subparsers(dest="models_action", metavar="ACTION")
    importing = actions.add_parser(
        "import", help="import a GGUF file (LM Studio, Ollama) as an MLX model into "
                       "$ZYQUO_HOME/models",
        description="Import a llama GGUF file as an MLX model folder in $ZYQUO_HOME/models. "
                    "Q4_0, Q4_1 and Q8_0 weights stay quantized (a QLoRA base); other types "
                    "are dequantized to bfloat16.")
    importing.add_argument("source", metavar="FILE.gguf|NAME",
                           help="a .gguf file, or a name `zyquo-tui models` lists as importable")
    importing.add_argument("--name", help="the model's name in the library (default: from the "
                                          "file's name, lowercase)")
    importing.add_argument("--dtype", choices=DTYPES, default="auto",
                           help="the dtype the model computes in (docs/models-and-datasets.md)")
    importing.add_argument("--dequantize", action="store_true",
                           help="a float model even from Q4_0/Q4_1/Q8_0 weights: a base for "
                                "lora, dora or full fine-tuning rather than qlora")
    importing.add_argument("--json", action="store_true", help="print JSON")
    importing.set_defaults(handler=cmd_import)


def cmd_import(args) -> int:
    made = import_gguf_model(args.source, name=args.name, dtype=args.dtype,
                             dequantize=args.dequantize)
    if args.json:
        print_json({"schema_version": SCHEMA_VERSION, **made})
    else:
        print(f"imported {made['name']}: {made['path']} ({describe_import(made)})")
    return 0


def describe_import(made: dict) -> str:
    """`30 layers, 4-bit g32 (some 8-bit), float32`: what an import made, in a few words."""
    quantization = made.get("quantization")
    if quantization:
        others = sorted({entry["bits"] for entry in quantization.values()
                         if isinstance(entry, dict)})
        kept = f"{quantization['bits']}-bit g{quantization['group_size']}" + (
            f" (some {', '.join(f'{bits}-bit' for bits in others)})" if others else "")
    else:
        kept = "not quantized"
    return f"{made['layers']} layers, {kept}, computes in {made['dtype']}"


def cmd_models(args) -> int:
    models = discover_models()
    roots = model_search_roots()
    gguf_files = discover_gguf_files()
    if args.json:
        print_json({
            "schema_version": SCHEMA_VERSION,
            "mlx_lm_version": _mlx_lm_version(),
            "models": [model.to_json() for model in models],
            "searched": [{"path": str(root.path), "source": root.source,
                          "exists": root.path.is_dir()} for root in roots],
            "importable": [entry.to_json() for entry in gguf_files],
            "gguf_searched": [{"path": str(path), "source": source, "exists": path.is_dir()}
                              for path, source in gguf_search_roots()],
        })
        return 0
    if not models:
        print("No models found. Searched:")
        for root in roots:
            print(f"  {root.path} ({root.source})")
        print("Build the tiny sample with `zyquo-tui sample`, import a GGUF file with "
              "`zyquo-tui models import FILE.gguf`, or list your model folders in "
              "config.toml under [models] folders.")
    else:
        print_models(models)
    if gguf_files:
        print()
        print_gguf_files(gguf_files)
    return 0


def print_models(models: list[ModelInfo]) -> None:
    """The models table, then why each model that is not ready is not."""
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


def print_gguf_files(gguf_files: list[GGUFFile]) -> None:
    """The GGUF files found, and how to import one (or why it cannot be)."""
    print("GGUF files (`zyquo-tui models import NAME` makes an MLX model of one):")
    print_table(["NAME", "STATUS", "ARCH", "SIZE", "IMPORTS AS", "SOURCE"],
                [[f.name, f.status, f.architecture or "?", fmt_bytes(f.size),
                  f.import_name if f.importable else "", f.source] for f in gguf_files])
    for entry in gguf_files:
        if not entry.importable:
            print(f"{entry.name}: {entry.status_detail}")  # the detail names the file


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
