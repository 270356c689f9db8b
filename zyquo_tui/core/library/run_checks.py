"""Whether a run can train: its settings against its model and its dataset.

A RunDraft's `problems()` (core/setup/draft.py) is the one check of a run before it is made or
started, and these are its parts: what a model and a dataset are to the checks (ModelTraits,
DataTraits: read from config.json and a count of the rows, fast: no tensor is loaded, no row is
validated; the form passes the facts and the report it already has) and the problems of the
settings against each. Every door gets the same structured problems (core/runs/problems.py),
so a check made in one place is made, with the same sentence, in all of them.

A num_layers above the model's layer count is refused, not clamped: the sentence says to use -1
(all layers) or fewer, and the run keeps exactly the settings the user gave.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from zyquo_tui.core.library.rows import TEXT, peek_format, training_refusal
from zyquo_tui.core.runs.problems import WARNING, Problem
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method
from zyquo_tui.core.runs.value_checks import is_whole

if TYPE_CHECKING:
    from zyquo_tui.core.library.datasets import DatasetReport
    from zyquo_tui.core.library.models import ModelInfo

SPLITS_COUNTED = ("train", "valid")


@dataclass(frozen=True)
class ModelTraits:
    """What the checks need to know of a base model: its name, whether it is quantized, and
    how many layers it has (None when config.json does not say)."""

    name: str
    quantized: bool
    num_layers: int | None = None
    positions: int | None = None  # config.json's max_position_embeddings
    layer_matrices: tuple[str, ...] = ()  # what lora keys can name; () when unknown
    # A quantization no run trains (core/library/models.py's untrainable_quantization).
    untrainable_quantization: str | None = None
    packing_refusal: str | None = None  # why its rows cannot be packed (core/runs/packing.py)

    @classmethod
    def from_info(cls, info: "ModelInfo") -> "ModelTraits":
        """From the model list's description of a folder (core/library/models.py)."""
        return cls(Path(info.path).name or info.name, info.quantization is not None,
                   info.num_layers, info.context_length, tuple(info.layer_matrices),
                   info.untrainable_quantization, info.packing_refusal)

    @classmethod
    def read(cls, folder: str | os.PathLike) -> "ModelTraits | None":
        """From a model folder's config.json and headers; None when there is no such folder."""
        from zyquo_tui.core.library.models import inspect_model

        path = Path(folder).expanduser()
        return cls.from_info(inspect_model(path)) if path.is_dir() else None


@dataclass(frozen=True)
class DataTraits:
    """What the checks need to know of a dataset folder: whether it is there with its
    train.jsonl, the format of its rows, and the rows of train.jsonl and valid.jsonl."""

    path: str
    exists: bool  # a folder is there
    has_train: bool
    format: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    is_file: bool = False  # a file was given where the folder belongs

    @property
    def name(self) -> str:
        return Path(self.path.rstrip("/")).name or self.path

    @classmethod
    def from_report(cls, report: "DatasetReport") -> "DataTraits":
        """From a validation report (the form validates every row anyway)."""
        return cls(report.path, True, "train" in report.files, report.format, dict(report.rows))

    @classmethod
    def read(cls, folder: str | os.PathLike) -> "DataTraits":
        """From the folder itself: the first row's format and a count of the rows."""
        path = Path(folder).expanduser()
        if not path.is_dir():
            return cls(str(folder), False, False, is_file=path.is_file())
        train = path / "train.jsonl"
        counted = {split: count_rows(path / f"{split}.jsonl") for split in SPLITS_COUNTED
                   if (path / f"{split}.jsonl").is_file()}
        rows = {split: n for split, n in counted.items() if n is not None}
        return cls(str(folder), True, train.is_file(), peek_format(train), rows)


def count_rows(path: Path) -> int | None:
    """The non-blank lines of a JSON Lines file (seconds per gigabyte, in bounded memory);
    None when it cannot be read (training's own load then says why, with the file)."""
    rows = 0
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if not line.isspace():
                    rows += 1
    except OSError:
        return None
    return rows


def problems_with_model(method: Method, hp: Hyperparameters, model: ModelTraits
                        ) -> list[Problem]:
    """The settings against the base model: its layers, its context, its layer matrices.
    (Which methods its weights allow is the RunDraft's rule: core/setup/draft.py.)"""
    found = []
    if model.untrainable_quantization is not None:
        from zyquo_tui.core.library.models import untrainable_quantization_sentence

        found.append(Problem("method", untrainable_quantization_sentence(
            model.name, model.untrainable_quantization)))
    layers = hp.num_layers
    if model.num_layers is not None and is_whole(layers) and layers > model.num_layers:
        found.append(Problem("num_layers", f"num_layers is {layers}, but {model.name} has only "
                                           f"{model.num_layers} layers; use -1 to train all of "
                                           "them, or fewer."))
    length = hp.max_seq_length
    if model.positions and is_whole(length) and length > model.positions:
        found.append(Problem("max_seq_length", f"max_seq_length {length} is above "
                                               f"{model.name}'s max_position_embeddings "
                                               f"({model.positions}); lower it to "
                                               f"{model.positions}.", WARNING))
    if SETTINGS["pack"].get(hp) is True and SETTINGS["objective"].get(hp) == "sft" \
            and model.packing_refusal:
        found.append(Problem("pack", f"{model.name} cannot pack rows: "
                                     f"{model.packing_refusal}; turn packing off "
                                     "(--no-pack)."))
    keys = SETTINGS["lora_keys"].get(hp)
    if isinstance(keys, list) and all(isinstance(key, str) for key in keys) and keys \
            and method is not Method.FULL and model.layer_matrices:  # (a wrong type: above)
        # mlx-lm adapts the modules a key names and skips a key it does not find: none found
        # trains nothing (and fails at the first step), some not found is likely a typo.
        unknown = [key for key in keys if key not in model.layer_matrices]
        offered = ", ".join(model.layer_matrices)
        if len(unknown) == len(keys):
            found.append(Problem("lora_keys", f"lora_parameters.keys names no matrix of "
                                              f"{model.name}'s layers ({', '.join(unknown)}); "
                                              f"its layers have {offered}."))
        elif unknown:
            found.append(Problem("lora_keys", f"lora_parameters.keys {', '.join(unknown)} "
                                              f"{'is' if len(unknown) == 1 else 'are'} not in "
                                              f"{model.name}'s layers, so only the others get "
                                              f"adapters; its layers have {offered}.",
                                 WARNING))
    return found


def dataset_folder_problem(data: DataTraits) -> Problem | None:
    """A dataset given that is not a folder holding train.jsonl (`runs new` and `plan`)."""
    if data.is_file:
        return Problem("dataset", f"{data.path} is a file, not a dataset folder; give the "
                                  "folder that holds train.jsonl.")
    if not data.exists:
        return Problem("dataset", f"{data.path}: no such dataset folder; give the folder that "
                                  "holds train.jsonl.")
    if not data.has_train:
        return Problem("dataset", f"{data.path} has no train.jsonl, which training needs; "
                                  "give the folder that holds it.")
    return None


def problems_with_data(hp: Hyperparameters, data: DataTraits) -> list[Problem]:
    """The settings against the dataset: rows enough for a batch, prompts to mask, and rows
    mlx-lm's trainer trains at all."""
    missing = dataset_folder_problem(data)
    if missing is not None:
        return [missing]
    found = []
    refusal = training_refusal(data.format, SETTINGS["objective"].get(hp))
    if refusal:
        found.append(Problem("dataset", f"{data.name}: {refusal}."))
    batch = hp.batch_size
    train, valid = data.rows.get("train"), data.rows.get("valid")
    if train == 0:
        found.append(Problem("dataset", f"{data.name}: train.jsonl has no rows; add the rows "
                                        "to train on."))
    elif is_whole(batch) and batch >= 1:
        if train and train < batch:
            found.append(Problem("batch_size", f"batch_size {batch} is more than the {train} "
                                              "rows of train.jsonl: mlx-lm refuses to train; "
                                              "lower it or add rows."))
        elif valid and valid < batch:
            found.append(Problem("batch_size", f"valid.jsonl has only {valid} rows, fewer than "
                                               f"batch_size {batch}: validation is skipped.",
                                 WARNING))
    if data.format == TEXT and hp.mask_prompt is True:
        found.append(Problem("mask_prompt", "mask_prompt needs prompts to mask, and text rows "
                                            "have none; turn it off for this dataset."))
    eval_problem = eval_data_problem(hp)
    if eval_problem is not None:
        found.append(eval_problem)
    return found


def eval_data_problem(hp: Hyperparameters) -> Problem | None:
    """eval_data's rows, read as the trainer will read them: each must have a reference
    answer (core/library/eval_rows.py), named at file:line when one has none."""
    from zyquo_tui.core.errors import UserError
    from zyquo_tui.core.library.eval_rows import read_eval_rows

    path = SETTINGS["eval_data"].get(hp)
    if not isinstance(path, str) or not os.path.isfile(os.path.expanduser(path)):
        return None  # the setting's own check says so
    try:
        read_eval_rows(os.path.expanduser(path))
    except UserError as error:
        return Problem("eval_data", f"eval_data: {error.message}")
    return None


def fit_default_layers(hp: Hyperparameters, model: ModelTraits) -> bool:
    """A num_layers nobody chose (mlx-lm's default of 16) above the model's layer count trains
    all of them, as mlx-lm itself would; True when it changed. A num_layers the user gave is
    left for the check to refuse."""
    layers = hp.num_layers
    if model.num_layers is not None and is_whole(layers) and layers > model.num_layers:
        hp.num_layers = -1
        return True
    return False


def fit_default_packing(hp: Hyperparameters, model: ModelTraits) -> bool:
    """Packing nobody chose stays off on a model that cannot pack (off by default, packing
    may come on from a preset or a copied run); True when it changed. Packing asked for
    there is the check's to refuse."""
    if SETTINGS["pack"].get(hp) is True and model.packing_refusal:
        SETTINGS["pack"].set(hp, False)
        return True
    return False


def config_name(key: str) -> str:
    """The mlx-lm config key a problem's key stands for (for saying where it is in a file)."""
    if key in SETTINGS:
        return SETTINGS[key].name.replace(".{optimizer}", "")
    return {"dataset": "data", "method": "fine_tune_type"}.get(key, key)
