"""Runs to and from mlx-lm's YAML config (the schema of `mlx_lm lora -c FILE`, mlx-lm 0.32).

Exported files reproduce the run with `mlx_lm lora -c FILE`; any mlx-lm config imports into a
run, and keys this version does not model are kept (passed through on export) and reported.
Which keys are settings, and their defaults, come from the settings' one definition
(core/runs/settings.py SETTINGS).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.runs.config_keys import normalize_config
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import (
    COUNT_OR_FILE,
    FILE,
    FOLDER,
    OWN_KEY,
    SETTINGS,
    Hyperparameters,
    Method,
)

# Keys of mlx-lm's CONFIG_DEFAULTS that map onto Run fields other than hyperparameters, or that
# describe what to do rather than how to train.
_RUN_KEYS = {"model", "data", "fine_tune_type", "adapter_path", "train", "config",
             "resume_adapter_file"}


def setting_keys() -> frozenset[str]:
    """mlx-lm's top-level config keys that hold the settings (lora_parameters holds four)."""
    return frozenset(setting.name.split(".")[0] for setting in SETTINGS.values())


class _MlxLmLoader(yaml.SafeLoader):
    """YAML as mlx-lm reads it: `1e-5` is a float (plain YAML 1.1 reads it as a string).

    A subclass, so the patch mlx-lm applies to the global SafeLoader is not needed here.
    """


_MlxLmLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:
     [-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_mlx_yaml(path: Path) -> dict[str, Any]:
    """Read an mlx-lm YAML config; UserError with file:line when it is not a YAML mapping."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; give the path of an mlx-lm YAML config.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: cannot be read ({error}); give an mlx-lm YAML config.") from None
    try:
        data = yaml.load(text, Loader=_MlxLmLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise UserError(f"{where}: {problem}; fix the YAML and try again.") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{path}:1: an mlx-lm config must be a YAML mapping of keys to values.")
    return data



def yaml_key_lines(path: Path) -> dict[str, int]:
    """The line of each key of a YAML config, top-level ones by name and nested ones as
    `outer.inner` (for saying file:line of a bad value); empty when it cannot be read."""
    try:
        root = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=_MlxLmLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    lines: dict[str, int] = {}
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            lines[str(key.value)] = key.start_mark.line + 1
            if isinstance(value, yaml.MappingNode):
                for inner, _ in value.value:
                    lines[f"{key.value}.{inner.value}"] = inner.start_mark.line + 1
    return lines

def run_to_mlx_config(run: Run, adapter_path: str | None = None) -> dict[str, Any]:
    """The mlx-lm config that trains this run (`mlx_lm lora -c` accepts it as is)."""
    hp = run.hyperparameters.to_dict()
    if hp["lr_schedule"] is None:
        del hp["lr_schedule"]
    if not hp["optimizer_config"]:
        del hp["optimizer_config"]
    if not hp[OWN_KEY]:
        del hp[OWN_KEY]  # none of zyquo-tui's own settings set: a plain mlx-lm config
    if run.method is Method.FULL:
        hp.pop("lora_parameters")
    config: dict[str, Any] = {
        "model": run.model,
        "train": True,
        "data": run.data,
        "fine_tune_type": run.method.fine_tune_type,
        **hp,
        "adapter_path": adapter_path or "adapters",
    }
    if run.lineage and run.lineage.get("adapter_file"):
        config["resume_adapter_file"] = run.lineage["adapter_file"]
    config.update(mlx_lm_lora_keys(run))
    config.update(run.extra_config)
    return config


# mlx-lm trains SFT only. A preference run's config also carries the keys mlx-lm-lora's trainer
# (`mlx_lm_lora.train -c`) reads for the same run; `import-config` reads them back.
# docs/CLI.md lists the mapping.
MLX_LM_LORA_KEYS = ("train_mode", "train_type", "beta", "dpo_cpo_loss_type",
                    "reference_model_path", "gradient_accumulation_steps", "fuse")


def mlx_lm_lora_keys(run: Run) -> dict[str, Any]:
    hp = run.hyperparameters
    objective = SETTINGS["objective"].get(hp)
    if objective == "sft":
        return {}
    if objective == "grpo":
        return {"train_mode": "grpo", "train_type": run.method.fine_tune_type,
                **{theirs: SETTINGS[ours].get(hp) for theirs, ours in GRPO_KEYS.items()},
                "gradient_accumulation_steps": hp.grad_accumulation_steps, "fuse": False}
    reference = SETTINGS["reference"].get(hp)
    return {
        "train_mode": objective,
        "train_type": run.method.fine_tune_type,
        "beta": SETTINGS["beta"].get(hp),
        "dpo_cpo_loss_type": SETTINGS["dpo_loss"].get(hp),
        "reference_model_path": None if reference == "base" else reference,
        "gradient_accumulation_steps": hp.grad_accumulation_steps,
        "fuse": False,  # mlx-lm-lora fuses after training by default; a run keeps adapters
    }


# A grpo run's settings as mlx-lm-lora names them (its reward functions are its registry's
# names or one file's: ours stay in our own key, zyquo_tui.reward_functions).
GRPO_KEYS = {"beta": "kl_beta", "epsilon": "clip_epsilon", "group_size": "group_size",
             "max_completion_length": "max_completion_tokens",
             "temperature": "sampling_temperature", "reward_weights": "reward_weights"}


def _read_mlx_lm_lora_keys(config: dict[str, Any], hp: Hyperparameters) -> None:
    """An mlx-lm-lora config's preference or grpo settings as ours (train_mode dpo, orpo or
    grpo only: its other modes are not ours to train, and stay unknown keys)."""
    mode = config.get("train_mode")
    if mode == "grpo":
        SETTINGS["objective"].set(hp, mode)
        for theirs, ours in GRPO_KEYS.items():
            if config.get(theirs) is not None and SETTINGS[ours].get(hp) == \
                    SETTINGS[ours].default:  # our own key, when both are there
                SETTINGS[ours].set(hp, config[theirs])
        if config.get("gradient_accumulation_steps") is not None \
                and "grad_accumulation_steps" not in config:
            hp.grad_accumulation_steps = config["gradient_accumulation_steps"]
        return
    if mode not in ("dpo", "orpo"):
        return
    SETTINGS["objective"].set(hp, mode)
    if config.get("beta") is not None:
        SETTINGS["beta"].set(hp, config["beta"])
    if config.get("dpo_cpo_loss_type") is not None:
        SETTINGS["dpo_loss"].set(hp, config["dpo_cpo_loss_type"])
    if config.get("reference_model_path"):
        SETTINGS["reference"].set(hp, config["reference_model_path"])
    if config.get("gradient_accumulation_steps") is not None \
            and "grad_accumulation_steps" not in config:
        hp.grad_accumulation_steps = config["gradient_accumulation_steps"]


# mlx-lm-lora's key for training by epochs (top level; ours is zyquo_tui.epochs, which an
# export writes beside the iterations it made, so `mlx_lm lora -c` trains the same steps).
MLX_LM_LORA_EPOCHS = "epochs"


def _read_mlx_lm_lora_epochs(config: dict[str, Any], hp: Hyperparameters) -> bool:
    """An mlx-lm-lora config's `epochs` as our epochs, read as mlx-lm-lora reads it: ignored
    when the config gives iters (then it stays an other key, which the import names and
    passes through). True when it was read."""
    if config.get(MLX_LM_LORA_EPOCHS) is None or "iters" in config:
        return False
    if SETTINGS["epochs"].get(hp) is None:  # zyquo_tui.epochs, when both are there
        SETTINGS["epochs"].set(hp, config[MLX_LM_LORA_EPOCHS])
    return True


def dump_mlx_yaml(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


@dataclass
class ConfigChoices:
    """What an mlx-lm config chooses for a run: the choices a RunDraft is made from (the draft
    makes the Run: core/setup/draft.py, the one road to a Run)."""

    model: str
    data: str
    method: Method
    hyperparameters: Hyperparameters
    extra_config: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] | None = None


def choices_from_mlx_config(
    config: dict[str, Any], *, source: str = "config", base_dir: Path | None = None,
    locate: Callable[[str], str] | None = None,
) -> tuple[ConfigChoices, list[str]]:
    """An mlx-lm config's choices for a run, with the unknown keys that were kept.

    The config's shape is checked first (core/runs/config_keys.py: nulls are defaults, nested
    keys known, mlx-lm's other keys of their type); UserError names the first problem, at
    `locate(key)` (file:line of that key) when given. The settings' own values are checked
    with the run (core/library/run_checks.py).
    """
    where = locate or (lambda key: source)
    config, shape = normalize_config(config)
    for problem in shape:
        if problem.is_error:
            raise UserError(f"{where(problem.key)}: {problem.sentence}")
    model = config.get("model")
    data = config.get("data")
    if not isinstance(model, str) or not model:
        raise UserError(f"{source}: the config has no model; add `model: PATH`.")
    if not isinstance(data, str) or not data:
        raise UserError(f"{source}: the config has no data; add `data: PATH`.")
    if base_dir is not None:
        model = _resolve(model, base_dir)
        data = _resolve(data, base_dir)
    fine_tune_type = config.get("fine_tune_type", config.get("train_type", "lora"))
    if fine_tune_type not in ("lora", "dora", "full"):
        raise UserError(
            f"{source}: fine_tune_type {fine_tune_type!r} is unknown; use lora, dora or full."
        )
    # As mlx-lm names it: lora on a quantized base becomes qlora in its RunDraft
    # (core/setup/draft.py), which knows the base.
    method = Method(fine_tune_type)
    settings = setting_keys()
    hp = Hyperparameters.from_dict({k: v for k, v in config.items() if k in settings})
    _read_mlx_lm_lora_keys(config, hp)
    preference = config.get("train_mode") in ("dpo", "orpo")
    read_keys = (MLX_LM_LORA_KEYS if preference else
                 ("train_mode", "train_type", "gradient_accumulation_steps", "fuse", *GRPO_KEYS)
                 if config.get("train_mode") == "grpo" else ())
    epochs_read = _read_mlx_lm_lora_epochs(config, hp)
    unknown = {k: v for k, v in config.items() if k not in settings and k not in _RUN_KEYS
               and k not in read_keys
               and not (epochs_read and k == MLX_LM_LORA_EPOCHS)}
    if base_dir is not None:
        _resolve_own_files(hp, base_dir)
    run = ConfigChoices(model=model, data=data, method=method, hyperparameters=hp,
                        extra_config=unknown)
    warm_start = config.get("resume_adapter_file")
    if isinstance(warm_start, str) and warm_start:
        # mlx-lm's resume is a warm start from weights: the same as our fork from a checkpoint.
        path = _resolve(warm_start, base_dir) if base_dir is not None else warm_start
        run.lineage = {"parent": None, "step": None, "adapter_file": path}
    return run, sorted(unknown)


def _resolve_own_files(hp: Hyperparameters, base_dir: Path) -> None:
    """A file or folder named by one of our settings (sample_prompts, teacher) beside the
    config file."""
    for setting in SETTINGS.values():
        value = setting.get(hp)
        if setting.kind in (COUNT_OR_FILE, FILE, FOLDER) and isinstance(value, str) and value:
            setting.set(hp, _resolve(value, base_dir))


def _resolve(value: str, base_dir: Path) -> str:
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    candidate = base_dir / path
    # mlx-lm resolves relative paths from the working directory; a config file travels with
    # its data more often, so prefer the path beside the file when it exists.
    return str(candidate.resolve()) if candidate.exists() else value
