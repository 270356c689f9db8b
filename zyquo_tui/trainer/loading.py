"""Load a run's model and data with mlx-lm's own loaders, turning their errors into sentences.

Every check that can be made before the (slow) model load is made first, so a bad input fails
in a second with a message that says what to change.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

from zyquo_tui.core.library.models import (
    is_quantized,
    untrainable_quantization,
    untrainable_quantization_sentence,
)
from zyquo_tui.core.library.rows import feature_keys
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import Method
from zyquo_tui.trainer.trainer_failure import fail


def check_model_folder(run: Run) -> dict[str, Any]:
    """The model's config.json, after checking the folder and the method against it."""
    folder = Path(run.model)
    if not folder.is_dir():
        raise fail("config", f"The model folder {folder} does not exist.",
                   "pick a model from `zyquo-tui models`, or give the path of an MLX model folder")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise fail("config", f"{folder} has no config.json, so it is not a model folder.",
                   "point the run at the folder that holds config.json and *.safetensors")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise fail("config", f"{config_path}: not valid JSON ({error}).",
                   "repair or re-download the model") from None
    # The draft's rule (core/library/models.py), so what it lets through the trainer takes.
    untrainable = untrainable_quantization(config)
    if untrainable is not None:
        sentence = untrainable_quantization_sentence(folder.name, untrainable)
        what, _, todo = sentence.partition("; ")
        raise fail("config", f"{what}.", todo.rstrip("."))
    quantized = is_quantized(config)
    if run.method is Method.FULL and quantized:
        raise fail("config", f"Full fine-tuning needs an unquantized model, and {folder.name} is "
                   "quantized.",
                   "use the qlora method on this model, or full fine-tuning on an unquantized one")
    if run.method is Method.QLORA and not quantized:
        raise fail("config", f"QLoRA needs a quantized base model, and {folder.name} is not "
                   "quantized.",
                   "use lora on this model, or quantize it first (`mlx_lm convert -q`)")
    return config


def import_training_libraries() -> None:
    """Import what training will: mlx-lm with its tuner (which imports wandb and swanlab when
    they are installed, tens of MiB), so that a footprint taken after this is the
    interpreter's and the libraries', and none of it is counted as training's."""
    import mlx_lm  # noqa: F401
    import mlx_lm.tuner.datasets  # noqa: F401
    import mlx_lm.tuner.trainer  # noqa: F401
    import mlx_lm.tuner.utils  # noqa: F401


def ready_resident_bytes(start_rss: int | None) -> int | None:
    """The footprint training's own memory counts from, taken once the model, the tokenizer
    and the data are loaded: the process's resident footprint then, less the memory MLX holds
    (the weights and adapters, which the estimate counts). What is left is the runtime's own:
    the interpreter and the libraries (`start_rss`), the tokenizer, the rows, the loaders (65
    MiB above the start with the 7 MiB sample model, on the CPU). Never below `start_rss`:
    where MLX's buffers are not in the resident figure (a GPU's memory), the start stays the
    baseline."""
    import mlx.core as mx

    from zyquo_tui.core.system.machine import resident_bytes

    now = resident_bytes()
    if now is None or start_rss is None:
        return start_rss
    return max(int(start_rss), now - int(mx.get_active_memory()))


def load_model(run: Run):
    """(model, tokenizer) with mlx_lm.load; unknown architectures fail as config errors."""
    check_model_folder(run)
    from mlx_lm import load

    try:
        return load(run.model)
    except ValueError as error:
        text = str(error)
        if "not supported" in text:
            raise fail("config", f"{text.rstrip('.')}: the installed mlx-lm does not know this "
                       "architecture.",
                       "upgrade mlx-lm, or choose a model whose model_type mlx-lm supports"
                       ) from None
        raise fail("config", f"The model in {run.model} could not be loaded: {text}") from None
    except FileNotFoundError as error:
        raise fail("config", f"The model in {run.model} is incomplete: {error}.",
                   "the folder needs *.safetensors weights; convert PyTorch weights with "
                   "`mlx_lm convert`") from None


def check_dataset(run: Run):
    """Validate the data folder before the model loads; the report's warnings are returned.

    The same checks as `zyquo-tui data check` (core/datasets.py), so a bad row fails the run in
    a second, at its file:line, instead of mid-training.
    """
    from zyquo_tui.core.library.datasets import validate_dataset
    from zyquo_tui.core.library.rows import ERROR, training_refusal

    folder = Path(run.data)
    if not folder.is_dir():
        raise fail("data", f"The data folder {folder} does not exist.")
    report = validate_dataset(folder, batch_size=run.hyperparameters.batch_size)
    errors = [p for p in report.problems if p.severity == ERROR]
    if errors:
        more = report.errors - 1
        extra = f" ({more} more problem{'s' if more != 1 else ''})" if more > 0 else ""
        raise fail("data", f"{errors[0]}{extra}.",
                   f"fix the dataset (`zyquo-tui data check {folder}` lists every problem "
                   "with file:line)")
    from zyquo_tui.core.runs.settings import SETTINGS

    refusal = training_refusal(report.format, SETTINGS["objective"].get(run.hyperparameters))
    if refusal:
        raise fail("data", f"{folder / 'train.jsonl'}: {refusal}.",
                   "pick a dataset of another format")
    return [p for p in report.problems if p.severity != ERROR]


def _read_rows(path: Path) -> list[Any]:
    """Rows of a JSONL file as mlx-lm reads them, with file:line on the first bad one."""
    rows = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                rows.append(json.loads(raw))
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                reason = "an empty line" if not raw.strip() else f"not valid JSON ({error})"
                raise fail("data", f"{path}:{number}: {reason}.") from None
    return rows


def data_settings(run: Run) -> types.SimpleNamespace:
    """What mlx-lm's create_dataset reads from its args (mask_prompt and the *_feature keys).
    On-policy distillation reads each row's prompt as its tokens before the offset, so its
    rows are made with mask_prompt on (trainer/on_policy.py)."""
    from zyquo_tui.core.runs.settings import SETTINGS

    hp = run.hyperparameters
    on_policy = SETTINGS["objective"].get(hp) == "distill" and SETTINGS["on_policy"].get(hp)
    return types.SimpleNamespace(mask_prompt=hp.mask_prompt or bool(on_policy),
                                 **feature_keys(run.extra_config))


def load_datasets(run: Run, tokenizer) -> tuple[Any, Any, dict[str, int]]:
    """(train, valid) as mlx-lm's dataset objects, and the row count of each split."""
    from mlx_lm.tuner.datasets import create_dataset

    folder = Path(run.data)
    if not folder.is_dir():
        raise fail("data", f"The data folder {folder} does not exist.")
    train_path = folder / "train.jsonl"
    if not train_path.is_file():
        raise fail("data", f"{folder} has no train.jsonl, which training needs.")
    settings = data_settings(run)
    splits: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    for name in ("train", "valid"):
        path = folder / f"{name}.jsonl"
        rows = _read_rows(path) if path.is_file() else []
        sizes[name] = len(rows)
        if not rows:
            splits[name] = []
            continue
        try:
            splits[name] = create_dataset(rows, tokenizer, settings)
        except ValueError as error:
            raise fail("data", f"{path}:1: {str(error).splitlines()[0]}") from None
    if not sizes["train"]:
        raise fail("data", f"{train_path} is empty.")
    batch_size = run.hyperparameters.batch_size
    if sizes["train"] < batch_size:
        raise fail("data", f"{train_path} has {sizes['train']} rows, fewer than the batch size "
                   f"({batch_size}).", "add rows or lower batch_size")
    return splits["train"], splits["valid"], sizes


def load_sft_data(run: Run, tokenizer):
    """(train set, valid set or [], row counts, train and valid token lengths) for SFT: mlx-lm's
    datasets, every row tokenized up front."""
    from mlx_lm.tuner.datasets import CacheDataset

    train_rows, valid_rows, sizes = load_datasets(run, tokenizer)
    data = Path(run.data)
    train_set = CacheDataset(train_rows)
    train_lengths = tokenize_all(train_set, data / "train.jsonl")
    val_set = CacheDataset(valid_rows) if valid_rows else []
    val_lengths = tokenize_all(val_set, data / "valid.jsonl") if val_set else []
    return train_set, val_set, sizes, train_lengths, val_lengths


def load_preference_data(run: Run, tokenizer):
    """The same for a preference run: pairs of chosen and rejected (trainer/preference_data.py);
    a length is the longer side's."""
    from zyquo_tui.trainer import preference_data

    return _load_rows(run, preference_data.PreferenceDataset, tokenizer, "pair")


def load_prompt_data(run: Run, tokenizer):
    """The same for a grpo run: prompts with answers (trainer/prompt_data.py); a length is the
    prompt's."""
    from zyquo_tui.trainer import prompt_data

    return _load_rows(run, prompt_data.PromptDataset, tokenizer, "prompt")


def _load_rows(run: Run, dataset, tokenizer, noun: str):
    """(train set, valid set or [], row counts, train and valid lengths) of rows that
    `dataset(rows, tokenizer)` reads and measures (its `itemlen`); a `noun` is one row."""
    folder = Path(run.data)
    sets, sizes, lengths = {}, {}, {}
    for name in ("train", "valid"):
        path = folder / f"{name}.jsonl"
        rows = _read_rows(path) if path.is_file() else []
        sizes[name] = len(rows)
        sets[name] = dataset(rows, tokenizer) if rows else []
        lengths[name] = item_lengths(sets[name], path, noun) if rows else []
    if not sizes["train"]:
        raise fail("data", f"{folder / 'train.jsonl'} is empty or missing.")
    batch_size = run.hyperparameters.batch_size
    if sizes["train"] < batch_size:
        raise fail("data", f"{folder / 'train.jsonl'} has {sizes['train']} rows, fewer than the "
                   f"batch size ({batch_size}).", "add rows or lower batch_size")
    return sets["train"], sets["valid"], sizes, lengths["train"], lengths["valid"]


def item_lengths(dataset, path: Path, noun: str) -> list[int]:
    """Every item's length in tokens (its dataset's `itemlen`: a prompt's, a pair's longer
    side's), rendered now so a bad row fails up front."""
    lengths = []
    for index in range(len(dataset)):
        try:
            lengths.append(dataset.itemlen(index))
        except Exception as error:  # the tokenizer and its chat template raise many kinds
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise fail("data", f"{path}:{index + 1}: this {noun} cannot be used ({text})."
                       ) from None
    return lengths


def tokenize_all(dataset, path: Path) -> list[int]:
    """Process every row now (mlx-lm would do it mid-training) so bad rows fail up front.

    Returns the token count of each row. `dataset` is a CacheDataset, which keeps the result.
    """
    lengths = []
    for index in range(len(dataset)):
        try:
            tokens = dataset[index]
        except Exception as error:  # mlx-lm and the tokenizer raise many kinds
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            if "chat template" in text or "chat_template" in text:
                raise fail("data", f"{path}:{index + 1}: this row needs a chat template, and the "
                           f"model's tokenizer has none ({text}).",
                           "use text data ({\"text\": ...}), or a model whose tokenizer has a "
                           "chat_template") from None
            if isinstance(error, KeyError):
                text = f"the key {error.args[0]!r} is missing"
            raise fail("data", f"{path}:{index + 1}: this row cannot be used ({text}).") from None
        if isinstance(tokens, tuple):
            tokens = tokens[0]
        lengths.append(len(tokens))
    return lengths


def prepare_model(model, run: Run):
    """Freeze, add adapters (or unfreeze layers), and make the optimizer.

    The same steps, in the same order, as mlx_lm.lora.train_model (the order matters: the
    adapters' initial weights come from MLX's RNG). Used by training, by the memory probe and
    by the step-level client.
    """
    import mlx.core as mx
    import mlx.optimizers as optim
    from mlx_lm.tuner.utils import build_schedule, linear_to_lora_layers

    hp = run.hyperparameters
    model.freeze()
    if hp.num_layers > len(model.layers):
        raise fail("config", f"num_layers is {hp.num_layers}, but the model has only "
                   f"{len(model.layers)} layers.", "use -1 to train all layers, or fewer")
    if run.method is Method.FULL:
        for layer in model.layers[-max(hp.num_layers, 0):]:
            layer.unfreeze()
    else:
        linear_to_lora_layers(model, hp.num_layers, dict(hp.lora_parameters),
                              use_dora=run.method is Method.DORA)
    # The new parameters are lazy: DoRA's magnitudes are norms of a float32 copy of each
    # adapted weight (one layer's weights in float32 at once). Left lazy, the first step would
    # compute them on top of its own activations; evaluated now, before any activation exists,
    # the run's peak is the larger of the two instead of their sum. The values are the same.
    mx.eval(model.parameters())
    lr = build_schedule(hp.lr_schedule) if hp.lr_schedule else hp.learning_rate
    classes = {"adam": optim.Adam, "adamw": optim.AdamW, "muon": optim.Muon,
               "sgd": optim.SGD, "adafactor": optim.Adafactor}
    options = (hp.optimizer_config or {}).get(hp.optimizer, {})
    try:
        return classes[hp.optimizer](learning_rate=lr, **options)
    except TypeError as error:
        raise fail("config", f"optimizer_config for {hp.optimizer} is not accepted: "
                   f"{error}.") from None
