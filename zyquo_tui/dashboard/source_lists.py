"""SourceLists: the setup form's model and dataset lists, kept as discovery finds them.

The lists show the models mlx-lm can train and the datasets found, keep the current choice
when a new look comes back, and take a folder that discovery did not find (a run copied, a
preset, `--model` given). They only fill the two Select controls of the new-run screen; the
choice itself is the screen's draft.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import Select

from zyquo_tui.core.library.datasets import DatasetInfo, describe_dataset
from zyquo_tui.core.library.models import ModelInfo, inspect_model
from zyquo_tui.dashboard.library_text import dataset_label, model_label


class SourceLists:
    """The `#model` and `#dataset` Selects of `screen` and what they list."""

    def __init__(self, screen: Any) -> None:
        self.screen = screen
        self.models: list[ModelInfo] = []
        self.model_by_path: dict[str, ModelInfo] = {}
        self.unready_models = 0
        self.datasets: list[DatasetInfo] = []

    @property
    def model_select(self) -> Select:
        return self.screen.query_one("#model", Select)

    @property
    def data_select(self) -> Select:
        return self.screen.query_one("#dataset", Select)

    def fill(self, models: list[ModelInfo], datasets: list[DatasetInfo], *,
             model_path: str | None, data_path: str | None, ready: bool) -> bool:
        """Show the models mlx-lm can train and the datasets, keeping the current choice;
        False when nothing changed (the controls are left alone)."""
        listed = [m for m in models if m.ready]
        listed += [self.model_by_path[model_path] for model_path in [model_path]
                   if model_path in self.model_by_path
                   and model_path not in {str(m.path) for m in listed}]
        data_paths = {str(d.path) for d in datasets}
        data_listed = [*datasets, *[d for d in self.datasets if str(d.path) == data_path
                                    and data_path not in data_paths]]
        if ([str(m.path) for m in listed] == [str(m.path) for m in self.models]
                and [str(d.path) for d in data_listed] == [str(d.path) for d in self.datasets]
                and ready):
            return False
        self.unready_models = len([m for m in models if not m.ready])
        self.models = listed
        self.model_by_path = {str(m.path): m for m in listed}
        self.datasets = data_listed
        with self.screen.prevent(Select.Changed):
            self.model_select.set_options([(model_label(m), str(m.path)) for m in listed])
            self.model_select.prompt = "pick a model" if listed else "no models found"
            if model_path in self.model_by_path:
                self.model_select.value = model_path
            self.data_select.set_options([(dataset_label(d), str(d.path)) for d in data_listed])
            self.data_select.prompt = "pick a dataset" if data_listed else "no datasets found"
            if data_path in {str(d.path) for d in data_listed}:
                self.data_select.value = data_path
        return True

    def select_model(self, path: str | None) -> ModelInfo | None:
        """Select a model folder, adding it when discovery did not find it; its description,
        or None when there is no such folder."""
        if path and path not in self.model_by_path and Path(path).is_dir():
            info = inspect_model(path)
            self.model_by_path[path] = info
            self.models.append(info)
            with self.screen.prevent(Select.Changed):
                self.model_select.set_options([(model_label(m), str(m.path))
                                               for m in self.models])
        found = self.model_by_path.get(path or "")
        with self.screen.prevent(Select.Changed):
            self.model_select.value = path if found is not None else Select.NULL
        return found

    def select_dataset(self, path: str | None) -> bool:
        """Select a dataset folder, adding it when discovery did not find it; False when
        there is no such folder."""
        if path and path not in {str(d.path) for d in self.datasets} and Path(path).is_dir():
            self.datasets.append(describe_dataset(Path(path)))
            with self.screen.prevent(Select.Changed):
                self.data_select.set_options([(dataset_label(d), str(d.path))
                                              for d in self.datasets])
        known = path in {str(d.path) for d in self.datasets}
        with self.screen.prevent(Select.Changed):
            self.data_select.value = path if known else Select.NULL
        return known
