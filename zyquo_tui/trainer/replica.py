"""Build a replica model (core/memory/replica.py plans it): random weights of the replica's
config.json in the model's compute dtype, quantized as the replica says, with the real
model's tokenizer files beside them (mlx-lm's load wants a tokenizer; training on the replica
uses synthetic token ids below the replica's vocabulary)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

# The files a model folder carries besides its weights and config.json: the tokenizer's.
_NOT_TOKENIZER = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".npz")


def copy_tokenizer(source: Path, out: Path) -> None:
    for path in source.iterdir():
        if (path.is_file() and path.name != "config.json"
                and not path.name.endswith(_NOT_TOKENIZER)
                and not path.name.endswith(".safetensors.index.json")):
            shutil.copyfile(path, out / path.name)


def build_replica(model_config: dict[str, Any], dtype: str, tokenizer_from: Path,
                  out: Path, seed: int = 0) -> int:
    """Write the replica into `out` (an empty folder); return its weights' bytes."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes, quantize_model

    config = dict(model_config)
    quantization = config.pop("quantization", None)
    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    model.set_dtype(getattr(mx, dtype))
    mx.eval(model.parameters())
    if quantization:
        with contextlib.redirect_stdout(io.StringIO()):  # quantize_model prints a line
            model, config = quantize_model(model, config, quantization["group_size"],
                                           quantization["bits"])
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    copy_tokenizer(tokenizer_from, out)
    return int(sum(value.nbytes for value in weights.values()))
