"""Presets: a run's settings saved by name as TOML in $ZYQUO_HOME/presets/, to reuse later.

A preset holds the method, the hyperparameters (mlx-lm names), optionally the model and
data, and the mlx-lm config keys zyquo-tui has no field for (`extra_config`, kept as they
are). TOML has no null, so settings that are unset (an absent lr_schedule) are left out and
come back as their defaults.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.runs.config_keys import normalize_config
from zyquo_tui.core.runs.problems import errors_in
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.atomic import write_atomic
from zyquo_tui.core.store.paths import ensure_dir, presets_dir
from zyquo_tui.core.store.user_settings import toml_error_line

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$")


@dataclass
class Preset:
    """Reusable settings for new runs."""

    name: str
    method: Method = Method.LORA
    hyperparameters: Hyperparameters = field(default_factory=Hyperparameters)
    model: str | None = None
    data: str | None = None
    extra_config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_run(cls, name: str, run: Run, *, with_paths: bool = True) -> "Preset":
        return cls(name=name, method=run.method, hyperparameters=run.hyperparameters,
                   model=run.model if with_paths else None,
                   data=run.data if with_paths else None,
                   extra_config=dict(run.extra_config))


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def preset_path(name: str, home: Path | None = None) -> Path:
    if not _NAME.match(name):
        raise UserError(f"{name!r} cannot be a preset name: use letters, digits, spaces, dots, "
                        "dashes or underscores (at most 64).")
    return presets_dir(home) / f"{name}.toml"


def save_preset(preset: Preset, home: Path | None = None) -> Path:
    path = preset_path(preset.name, home)
    ensure_dir(path.parent, "presets")
    data: dict[str, Any] = {"name": preset.name, "method": preset.method.value}
    if preset.model:
        data["model"] = preset.model
    if preset.data:
        data["data"] = preset.data
    data["hyperparameters"] = _drop_none(preset.hyperparameters.to_dict())
    if preset.extra_config:
        data["extra_config"] = _drop_none(preset.extra_config)
    write_atomic(path, tomli_w.dumps(data))
    return path


def load_preset(name: str, home: Path | None = None) -> Preset:
    path = preset_path(name, home)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"There is no preset {name!r} in {path.parent}.") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path}:{toml_error_line(error, text)}: not valid TOML ({error}); "
                        "fix or delete the file.") from None
    try:
        method = Method(data.get("method", "lora"))
    except ValueError:
        raise UserError(f"{path}: method {data.get('method')!r} is unknown; use lora, dora, "
                        "qlora or full.") from None
    values = data.get("hyperparameters", {})
    if not isinstance(values, dict):
        raise UserError(f"{path}: [hyperparameters] must be a table of mlx-lm settings; fix or "
                        "delete the file.")
    values, shape = normalize_config(values)
    for problem in errors_in(shape):
        raise UserError(f"{path}: {problem.sentence}")
    return Preset(name=data.get("name", name), method=method,
                  hyperparameters=Hyperparameters.from_dict(values),
                  model=data.get("model"), data=data.get("data"),
                  extra_config=dict(data.get("extra_config") or {}))


def list_presets(home: Path | None = None) -> list[str]:
    folder = presets_dir(home)
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def delete_preset(name: str, home: Path | None = None) -> None:
    path = preset_path(name, home)
    if not path.exists():
        raise UserError(f"There is no preset {name!r} in {path.parent}.")
    path.unlink()
