"""The setup form's files: its run as an mlx-lm YAML config (export, import) and as a preset
(save, load). Each asks for a path or a name in a dialog and tells the outcome in a
notification; what fills the form goes back through the screen's `apply_settings`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.runs.mlx_config import (
    dump_mlx_yaml,
    load_mlx_yaml,
    choices_from_mlx_config,
    run_to_mlx_config,
)
from zyquo_tui.core.store.paths import presets_dir
from zyquo_tui.core.store.presets import Preset, list_presets, load_preset, save_preset
from zyquo_tui.dashboard.dialogs.preset_picker import PresetPickerDialog
from zyquo_tui.dashboard.dialogs.text_prompt import TextPromptDialog


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"


class SetupFiles:
    """YAML and presets for the new-run screen `screen` (its draft, its `apply_settings`)."""

    def __init__(self, screen: Any) -> None:
        self.screen = screen

    @property
    def app(self) -> Any:
        return self.screen.app

    def export_yaml(self) -> None:
        screen = self.screen
        run = screen.build_run()
        default = Path.cwd() / f"{slug(run.name)}.yaml"

        def chosen(path: str | None) -> None:
            if not path:
                return
            target = Path(path).expanduser()
            try:
                target.write_text(dump_mlx_yaml(run_to_mlx_config(run)), encoding="utf-8")
            except OSError as error:
                screen.notify(f"{target}: cannot write ({error.strerror}).", title="Export",
                              severity="error")
                return
            screen.notify(f"Wrote {target}: `mlx_lm lora -c {target}` trains this run.",
                          title="Export", timeout=8)
        self.app.push_screen(TextPromptDialog(
            "Export the mlx-lm config to", "mlx_lm lora -c FILE trains this run as it is.",
            str(default)), chosen)

    def import_yaml(self) -> None:
        screen = self.screen

        def chosen(path: str | None) -> None:
            if not path:
                return
            source = Path(path).expanduser()
            try:
                config = load_mlx_yaml(source)
                placeholders = {key: "-" for key in ("model", "data") if not config.get(key)}
                run, unknown = choices_from_mlx_config({**config, **placeholders},
                                                   source=str(source), base_dir=source.parent)
            except UserError as error:
                screen.notify(error.message, title="Import", severity="error", timeout=10)
                return
            screen.apply_settings(
                model=None if "model" in placeholders else run.model,
                data=None if "data" in placeholders else run.data, method=run.method,
                hp=run.hyperparameters, extra=run.extra_config)
            kept = f"; kept {len(unknown)} other keys as they are: {', '.join(unknown)}" \
                if unknown else ""
            screen.notify(f"Filled the form from {source}{kept}.", title="Import", timeout=8)
        self.app.push_screen(TextPromptDialog(
            "Import an mlx-lm YAML config", "Its model, data, method and settings fill the form; "
            "keys this form has no field for are kept and exported again.",
            str(Path.cwd()) + "/", placeholder="path/to/config.yaml"), chosen)

    def save_preset(self, default: str) -> None:
        screen = self.screen
        home = self.app.store.home
        draft = screen.draft

        def chosen(name: str | None) -> None:
            if not name:
                return
            preset = Preset(name=name, method=draft.method,
                            hyperparameters=draft.replace().hyperparameters,
                            model=draft.model_path, data=draft.data_path,
                            extra_config=dict(draft.extra_config))
            try:
                path = save_preset(preset, home)
            except UserError as error:
                screen.notify(error.message, title="Preset", severity="error", timeout=8)
                return
            screen.notify(f"Saved preset {name} ({path}).", title="Preset")
        self.app.push_screen(TextPromptDialog(
            "Save these settings as a preset named", "Method, hyperparameters, model and "
            "dataset; l loads it into a new form later.", slug(default)), chosen)

    def load_preset(self) -> None:
        screen = self.screen
        home = self.app.store.home
        names = list_presets(home)
        if not names:
            screen.notify("No presets yet: p saves the form as one.", title="Preset")
            return

        def chosen(name: str | None) -> None:
            if not name:
                return
            try:
                preset = load_preset(name, home)
            except UserError as error:
                screen.notify(error.message, title="Preset", severity="error", timeout=8)
                return
            screen.apply_preset(preset)
            screen.notify(f"Loaded preset {name}.", title="Preset", timeout=4)
        self.app.push_screen(PresetPickerDialog(names, str(presets_dir(home))), chosen)
