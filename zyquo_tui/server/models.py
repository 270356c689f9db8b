"""The models the server offers: the store's model library (core/library/models.py), by the
names `zyquo-tui models` lists, and any model folder by its path."""

from __future__ import annotations

from typing import Any

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.models import discover_models, resolve_model
from zyquo_tui.server.service import UserFacing
from zyquo_tui.server.trained_model import ModelSpec


def capabilities() -> list[dict[str, Any]]:
    """Each ready model twice: by its name and by its folder (a tokenizer loads from the
    folder, so a program that will call get_tokenizer names the model by it)."""
    listed = []
    for model in discover_models():
        if not model.ready:
            continue
        for name in (model.name, str(model.path)):
            listed.append({"model_name": name, "max_context_length": model.context_length,
                           "trainable": True, "sampleable": True})
    return listed


def resolve(base_model: str) -> ModelSpec:
    try:
        model = resolve_model(base_model)
    except UserError as error:
        raise UserFacing(400, error.message) from None
    except OSError:  # a name no file system holds (too long): no folder has it
        raise UserFacing(400, f"No model has a name this long ({len(base_model)} "
                         "characters): give a model folder, or a name that `zyquo-tui models` "
                         "lists.") from None
    return ModelSpec(base_model=base_model, folder=str(model.path.resolve()), rank=1)
