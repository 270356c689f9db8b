"""A base model with a run's adapter at one step, loaded once, answering as either.

Trying an adapter and checking a fused export both need the base and the adapted model side
by side. Loading the model twice would double the memory; instead the adapter's layers are
swapped in and out of the one model: for LoRA and DoRA the adapter modules (each wraps the
base layer it adapts), for a full fine-tune the trained weights.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from zyquo_tui.core.store.checkpoints import (
    ADAPTER_CONFIG,
    LATEST_ADAPTERS,
    adapter_file,
)


@contextmanager
def step_adapter_folder(adapters: Path, step: int):
    """A folder mlx-lm's `load_adapters` accepts for `step`: adapters.safetensors and
    adapter_config.json. mlx-lm loads only that file name, so a step is linked under it in a
    temporary folder (the run's own files are never written)."""
    with tempfile.TemporaryDirectory(prefix="zyquo-adapter-") as folder:
        target = Path(folder)
        os.symlink((adapters / ADAPTER_CONFIG).resolve(), target / ADAPTER_CONFIG)
        os.symlink(adapter_file(adapters, step).resolve(), target / LATEST_ADAPTERS)
        yield target


def _wrapped(module):
    """The base layer an adapter module wraps (a Linear, SwitchLinear or Embedding)."""
    return module.linear if hasattr(module, "linear") else module.embedding


class AdaptedModel:
    """The model with the adapter of `adapters` at `step` applied; `use_base()` and
    `use_adapter()` switch between the two without reloading anything."""

    def __init__(self, model_path: str | Path, adapters: Path, step: int) -> None:
        import mlx.core as mx
        from mlx.utils import tree_flatten
        from mlx_lm import load
        from mlx_lm.tuner.utils import load_adapters

        self.model, self.tokenizer, self.config = load(str(model_path), return_config=True)
        config = json.loads((adapters / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        self.full = config.get("fine_tune_type") == "full"
        self._base_weights: list = []
        self._adapted_weights: list = []
        if self.full:
            trained = mx.load(str(adapter_file(adapters, step)))
            current = dict(tree_flatten(self.model.parameters()))
            self._base_weights = [(name, current[name]) for name in trained if name in current]
            self._adapted_weights = list(trained.items())
        with step_adapter_folder(adapters, step) as folder:
            load_adapters(self.model, str(folder))
        self.model.eval()
        self._adapter_modules = [(name, module) for name, module in self.model.named_modules()
                                 if hasattr(module, "fuse")]
        self.adapted = True

    def use_base(self) -> None:
        from mlx.utils import tree_unflatten

        if self.adapted:
            if self.full:
                self.model.load_weights(self._base_weights, strict=False)
            else:
                self.model.update_modules(tree_unflatten(
                    [(name, _wrapped(module)) for name, module in self._adapter_modules]))
            self.adapted = False

    def use_adapter(self) -> None:
        from mlx.utils import tree_unflatten

        if not self.adapted:
            if self.full:
                self.model.load_weights(self._adapted_weights, strict=False)
            else:
                self.model.update_modules(tree_unflatten(self._adapter_modules))
            self.adapted = True

    def fuse(self, dequantize: bool) -> None:
        """Merge the adapter into the model for good, with mlx-lm's own `fuse` of each adapter
        module (what `mlx_lm fuse` does); `dequantize` as its flag."""
        from mlx.utils import tree_unflatten

        self.use_adapter()
        fused = [(name, module.fuse(dequantize=dequantize))
                 for name, module in self._adapter_modules]
        if fused:
            self.model.update_modules(tree_unflatten(fused))
        self._adapter_modules = []
