"""Local models: where they are, what they are, and whether the installed mlx-lm can train them.

Searched, in this order (the first place a folder is found names it):
  - $ZYQUO_HOME/models (models the tool made or fused, the sample model)
  - folders listed in config.toml under [models] folders
  - the Hugging Face hub cache ($HF_HUB_CACHE, else $HF_HOME/hub, else
    ~/.cache/huggingface/hub): models--ORG--NAME/snapshots/REVISION, the revision refs/main names
  - LM Studio (~/.lmstudio/models and ~/.cache/lm-studio/models, PUBLISHER/MODEL); its
    folders of GGUF files are listed as importable files instead (gguf_files.py)

Everything comes from config.json, the tokenizer files and the safetensors headers: no tensor is
loaded and mlx_lm is never imported (it takes seconds); its sources are read as files instead.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.folder_search import find_folders, resolved
from zyquo_tui.core.library.safetensors_header import (
    SafetensorsHeaderError,
    TensorTable,
    read_headers,
)
from zyquo_tui.core.runs.packing import packing_refusal
from zyquo_tui.core.store.paths import models_dir, zyquo_home
from zyquo_tui.core.store.user_settings import Settings

# What a model folder can be.
READY = "ready"  # mlx-lm can load and train it
NEEDS_CONVERSION = "needs-conversion"  # weights in a format mlx-lm does not load
UNSUPPORTED = "unsupported"  # the installed mlx-lm has no code for its architecture
INCOMPLETE = "incomplete"  # config or weights missing or unreadable

SOURCE_ZYQUO = "zyquo"
SOURCE_CONFIG = "config"
SOURCE_HF_CACHE = "huggingface"
SOURCE_LM_STUDIO = "lm-studio"
SOURCE_PATH = "path"

PYTORCH_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth")
# How deep a model folder may sit below a searched folder (LM Studio uses publisher/model).
MAX_SEARCH_DEPTH = 3


@dataclass
class Quantization:
    """How a model's weights are packed, from config.json (mlx-lm's `quantization` entry)."""

    bits: int
    group_size: int | None
    mode: str = "affine"
    # True when some layers have their own bits or group size (mixed-precision conversions).
    per_layer: bool = False


@dataclass
class ModelInfo:
    """One local model folder as the model list and the run setup show it."""

    name: str
    path: Path
    source: str
    status: str
    status_detail: str = ""
    architecture: str | None = None  # config.json model_type
    mlx_module: str | None = None  # the mlx_lm.models module that would load it
    supported: bool = False
    parameters: int | None = None
    weight_bytes: int | None = None
    weight_files: int = 0
    weight_dtypes: dict[str, int] = field(default_factory=dict)  # bytes per stored dtype
    quantization: Quantization | None = None
    # A quantization no run can train (fp8...): its quant_method (untrainable_quantization).
    untrainable_quantization: str | None = None
    # Why its rows cannot be packed into one sequence, a clause (core/runs/packing.py); None
    # when they can.
    packing_refusal: str | None = None
    hidden_size: int | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    vocab_size: int | None = None
    context_length: int | None = None
    tied_embeddings: bool | None = None
    chat_template: bool = False
    # The weight matrices of a layer, as mlx-lm's lora_parameters.keys name them
    # ("self_attn.q_proj"), from the headers; empty when the weights name no layers.
    layer_matrices: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.status == READY

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        return data


@dataclass(frozen=True)
class SearchRoot:
    """A folder searched for models, and which kind of place it is."""

    path: Path
    source: str


# --- what the installed mlx-lm supports -------------------------------------------------------


@functools.lru_cache(maxsize=1)
def mlx_lm_package_dir() -> Path | None:
    """The installed mlx_lm package folder, found without importing it."""
    # find_spec on a top-level package locates it without running its __init__.
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def mlx_lm_remappings() -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """mlx-lm's MODEL_REMAPPING and MODEL_ARCHITECTURE_REMAPPING, read from its utils.py.

    mlx-lm maps some model_type values to the module of another (mistral loads with llama);
    reading the literals from the source keeps us exact for the installed version without
    paying for `import mlx_lm`.
    """
    package = mlx_lm_package_dir()
    found: dict[str, Any] = {"MODEL_REMAPPING": {}, "MODEL_ARCHITECTURE_REMAPPING": {}}
    if package is None:
        return found["MODEL_REMAPPING"], found["MODEL_ARCHITECTURE_REMAPPING"]
    try:
        tree = ast.parse((package / "utils.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return found["MODEL_REMAPPING"], found["MODEL_ARCHITECTURE_REMAPPING"]
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in found:
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return found["MODEL_REMAPPING"], found["MODEL_ARCHITECTURE_REMAPPING"]


def mlx_module_for(config: dict[str, Any]) -> str | None:
    """The mlx_lm.models module mlx-lm would import for this config (its _get_classes rule)."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        return None
    remapping, architecture_remapping = mlx_lm_remappings()
    architectures = config.get("architectures") or ()
    if isinstance(architectures, str):
        architectures = (architectures,)
    for architecture in architectures:
        remapped = architecture_remapping.get((model_type, architecture))
        if remapped is not None:
            return remapped
    return remapping.get(model_type, model_type)


def mlx_lm_supports(module: str | None) -> bool:
    package = mlx_lm_package_dir()
    if module is None or package is None:
        return False
    return (package / "models" / f"{module}.py").is_file()


# --- reading one model folder -----------------------------------------------------------------


def count_parameters(table: TensorTable, config: dict[str, Any]) -> int:
    """The model's real parameter count, the figure mlx-lm's get_total_parameters gives.

    Counted: every element of every unquantized tensor (embeddings, norms, biases of layers),
    and for each quantized weight the number of weights it packs: a uint32 word holds 32/bits
    of them, so a packed [out, in*bits/32] tensor counts out*in. Not counted: the `scales` and
    `biases` (and `global_scale`) that quantization adds beside a packed weight, nor AWQ/GPTQ
    `qzeros` and `g_idx`: they are storage, not parameters. Tied embeddings are stored once
    and counted once.
    """
    default, per_layer = _quantization_settings(config)
    auxiliary: set[str] = set()
    for tensor in table:
        if tensor.name.endswith(".scales"):
            prefix = tensor.name[: -len(".scales")]
            auxiliary.update(
                {f"{prefix}.scales", f"{prefix}.biases", f"{prefix}.global_scale",
                 f"{prefix}.qzeros", f"{prefix}.g_idx"}
            )
    total = 0
    for tensor in table:
        if tensor.name in auxiliary:
            continue
        prefix, _, leaf = tensor.name.rpartition(".")
        packed = f"{prefix}.scales" in table and leaf in ("weight", "qweight")
        if packed and tensor.dtype in ("U32", "I32"):
            bits = per_layer.get(prefix, default).get("bits")
            if bits:
                total += tensor.elements * 32 // int(bits)
                continue
        total += tensor.elements
    return total


# The quantization_config methods mlx-lm loads as its own quantized layers, which train as
# QLoRA (`_legacy_quantization` maps each); a plain `bits` entry is mlx-lm's own. Any other
# (fp8, bitnet, compressed-tensors, modelopt, bitsandbytes...) trains neither as QLoRA nor as
# an unquantized model here: the one rule the draft and the trainer both apply.
TRAINABLE_QUANT_METHODS = ("mxfp4", "mxfp8", "awq", "gptq")


def untrainable_quantization(config: dict[str, Any]) -> str | None:
    """The quant_method of a config.json's `quantization_config` that no run trains (a
    model quantized so is refused, neither QLoRA's nor an unquantized base); None for an
    unquantized model or one quantized as mlx-lm's quantized layers are."""
    if isinstance(config.get("quantization"), dict):
        return None
    given = config.get("quantization_config")
    if given is None:
        return None
    if not isinstance(given, dict):
        return repr(given)
    method = given.get("quant_method")
    if method in TRAINABLE_QUANT_METHODS or (method is None and "bits" in given):
        return None
    return str(method)


def untrainable_quantization_sentence(model_name: str, method: str) -> str:
    """Why a model quantized by `method` cannot train, and what to do: one sentence."""
    return (f"{model_name} is quantized as {method} (config.json's quantization_config), "
            "which neither QLoRA nor full or LoRA fine-tuning can train here; use an "
            "unquantized copy of the model, or quantize that with `mlx_lm convert -q`.")


def is_quantized(config: dict[str, Any]) -> bool:
    """Whether a model's weights are quantized as mlx-lm quantizes them (QLoRA trains it,
    full fine-tuning cannot): the rule the draft and the trainer share."""
    return quantization_of(config) is not None


def quantization_of(config: dict[str, Any]) -> Quantization | None:
    default, per_layer = _quantization_settings(config)
    if not default.get("bits"):
        return None
    return Quantization(
        bits=int(default["bits"]),
        group_size=default.get("group_size"),
        mode=default.get("mode", "affine"),
        per_layer=bool(per_layer),
    )


def _quantization_settings(
    config: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    # mlx-lm's own `quantization` entry holds the defaults plus one entry per layer that
    # differs; legacy `quantization_config` (AWQ, GPTQ, mxfp4...) is mapped by mlx-lm at load.
    quantization = config.get("quantization")
    if not isinstance(quantization, dict):
        quantization = _legacy_quantization(config.get("quantization_config"))
    if not isinstance(quantization, dict):
        return {}, {}
    default = {k: quantization[k] for k in ("bits", "group_size", "mode") if k in quantization}
    per_layer = {
        name: value for name, value in quantization.items() if isinstance(value, dict)
    }
    return default, per_layer


def _legacy_quantization(quantization_config: object) -> dict[str, Any] | None:
    if not isinstance(quantization_config, dict):
        return None
    method = quantization_config.get("quant_method")
    fixed = {
        "mxfp4": {"bits": 4, "group_size": 32, "mode": "mxfp4"},
        "mxfp8": {"bits": 8, "group_size": 32, "mode": "mxfp8"},
    }
    if method in fixed:
        return fixed[method]
    if method in ("awq", "gptq"):
        return {
            "bits": quantization_config.get("bits", 4),
            "group_size": quantization_config.get("group_size", 128),
            "mode": "affine",
        }
    if method is None and "bits" in quantization_config:
        return quantization_config
    return None


def _config_value(config: dict[str, Any], *keys: str) -> Any:
    # Multimodal checkpoints (gemma3, mistral3, qwen-vl) keep the language model's shape in
    # text_config; older ones use GPT-2 names (n_embd, n_layer, n_head, n_positions).
    text_config = config.get("text_config")
    for source in (config, text_config if isinstance(text_config, dict) else {}):
        for key in keys:
            value = source.get(key)
            if value is not None:
                return value
    return None


def _has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return bool(isinstance(tokenizer_config, dict) and tokenizer_config.get("chat_template"))


def mlx_weight_files(folder: Path) -> list[Path]:
    """The files mlx-lm loads weights from: model*.safetensors, nothing else."""
    return sorted(p for p in folder.glob("model*.safetensors") if p.is_file())


def inspect_model(folder: Path | str, name: str | None = None, source: str = SOURCE_PATH,
                  hub_repo: str | None = None) -> ModelInfo:
    """Describe one model folder. Never raises for a broken folder: the status says why."""
    folder = Path(folder)
    info = ModelInfo(name=name or folder.name, path=folder, source=source, status=READY)
    info.chat_template = _has_chat_template(folder)

    config: dict[str, Any] = {}
    config_problem = ""
    try:
        loaded = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            config = loaded
        else:
            config_problem = "config.json is not a JSON object"
    except FileNotFoundError:
        config_problem = "no config.json"
    except (OSError, ValueError) as error:
        config_problem = f"config.json is unreadable ({error})"
    _describe_shape(info, config)
    info.packing_refusal = packing_refusal(None if config_problem else config)

    weights = mlx_weight_files(folder)
    info.weight_files = len(weights)
    table: TensorTable | None = None
    weight_problem = ""
    if weights:
        try:
            table = read_headers(weights)
        except SafetensorsHeaderError as error:
            weight_problem = str(error)
    if table is not None:
        info.parameters = count_parameters(table, config)
        info.weight_bytes = table.total_bytes
        info.weight_dtypes = table.bytes_by_dtype()
        if info.tied_embeddings is None:
            # Without the config key, an output projection stored apart means untied.
            info.tied_embeddings = not any("lm_head" in t.name for t in table)
        info.layer_matrices = layer_matrices(t.name for t in table if len(t.shape) >= 2)

    info.status, info.status_detail = _status(
        folder, info, config, config_problem, weights, weight_problem, hub_repo
    )
    return info


_LAYER_WEIGHT = re.compile(r"(?:^|\.)layers\.\d+\.(.+)\.weight$")


def layer_matrices(names: Iterable[str]) -> list[str]:
    """The modules within a layer that hold a matrix (`self_attn.q_proj`), from the weights'
    names (`model.layers.3.self_attn.q_proj.weight`): what lora_parameters.keys can name."""
    found = {match.group(1) for name in names if (match := _LAYER_WEIGHT.search(name))}
    return sorted(found)


def _describe_shape(info: ModelInfo, config: dict[str, Any]) -> None:
    info.architecture = config.get("model_type") if isinstance(config.get("model_type"), str) \
        else None
    info.mlx_module = mlx_module_for(config)
    info.supported = mlx_lm_supports(info.mlx_module) and "model_file" not in config
    info.quantization = quantization_of(config)
    info.untrainable_quantization = untrainable_quantization(config)
    info.hidden_size = _config_value(config, "hidden_size", "n_embd", "d_model")
    info.num_layers = _config_value(config, "num_hidden_layers", "n_layer", "num_layers")
    info.num_heads = _config_value(config, "num_attention_heads", "n_head", "num_heads")
    info.num_kv_heads = _config_value(config, "num_key_value_heads", "num_kv_heads")
    if info.num_kv_heads is None:
        info.num_kv_heads = info.num_heads  # plain multi-head attention
    info.vocab_size = _config_value(config, "vocab_size")
    info.context_length = _config_value(
        config, "max_position_embeddings", "n_positions", "max_sequence_length",
        "seq_length", "n_ctx",
    )
    tied = _config_value(config, "tie_word_embeddings")
    info.tied_embeddings = bool(tied) if tied is not None else None


def _status(folder: Path, info: ModelInfo, config: dict[str, Any], config_problem: str,
            weights: list[Path], weight_problem: str, hub_repo: str | None) -> tuple[str, str]:
    try:
        names = [p.name for p in folder.iterdir() if p.is_file() or p.is_symlink()]
    except OSError as error:
        return INCOMPLETE, f"cannot read the folder ({error.strerror})."
    if not weights:
        pytorch = [n for n in names if n.endswith(PYTORCH_WEIGHT_SUFFIXES)]
        other_safetensors = [n for n in names if n.endswith(".safetensors")]
        if pytorch or other_safetensors:
            # mlx_lm convert loads model*.safetensors too, so a local PyTorch checkpoint first
            # needs safetensors; for a hub repo, convert can fetch them itself.
            how = (
                f"`mlx_lm convert --hf-path {hub_repo} --mlx-path OUT` fetches the safetensors "
                "weights from the hub when the repo has them"
                if hub_repo
                else "re-save it with transformers' save_pretrained(safe_serialization=True), "
                "then `mlx_lm convert --hf-path FOLDER --mlx-path OUT`"
            )
            kind = "PyTorch weights only" if pytorch else "safetensors not named model*"
            return NEEDS_CONVERSION, f"{kind}: mlx-lm loads model*.safetensors; {how}."
        if any(n.endswith(".gguf") for n in names):
            return UNSUPPORTED, (
                "GGUF weights only: mlx-lm cannot load GGUF; import a file with "
                "`zyquo-tui models import FILE.gguf`, or download the safetensors release."
            )
        return INCOMPLETE, "no weight files (model*.safetensors)."
    if weight_problem:
        return INCOMPLETE, weight_problem
    if config_problem:
        return INCOMPLETE, f"{config_problem}."
    if "model_file" in config:
        return UNSUPPORTED, (
            "config.json names custom model code (model_file): mlx-lm runs it only with "
            "trust_remote_code."
        )
    if not info.supported:
        return UNSUPPORTED, (
            f"model_type {info.architecture!r} has no module in the installed mlx-lm "
            f"(mlx_lm/models/{info.mlx_module}.py); a newer mlx-lm may support it."
        )
    return READY, ""


# --- where models live ------------------------------------------------------------------------


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache folder, by huggingface_hub's own environment rules."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "huggingface" / "hub"


def lm_studio_folders() -> list[Path]:
    return [Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"]


def model_search_roots(home: Path | None = None) -> list[SearchRoot]:
    """Every folder searched for models, in the order listed in this module's docstring."""
    home = home or zyquo_home()
    roots = [SearchRoot(models_dir(home), SOURCE_ZYQUO)]
    roots += [
        SearchRoot(Path(folder).expanduser(), SOURCE_CONFIG)
        for folder in Settings.load(home).model_folders
    ]
    roots.append(SearchRoot(hf_hub_cache(), SOURCE_HF_CACHE))
    roots += [SearchRoot(folder, SOURCE_LM_STUDIO) for folder in lm_studio_folders()]
    return roots


def discover_models(home: Path | None = None) -> list[ModelInfo]:
    """Every model in every searched folder, each folder once, sorted by name."""
    found: dict[Path, ModelInfo] = {}
    for root in model_search_roots(home):
        if root.source == SOURCE_HF_CACHE:
            candidates = _hub_cache_models(root.path)
        else:
            candidates = [
                (folder, name, None) for folder, name in _model_folders(root.path)
            ]
        for folder, name, repo in candidates:
            key = resolved(folder)
            if root.source == SOURCE_LM_STUDIO and _gguf_only(folder):
                continue  # its files are listed as importable (core/library/gguf_files.py)
            if key not in found:
                found[key] = inspect_model(folder, name=name, source=root.source, hub_repo=repo)
    return sorted(found.values(), key=lambda m: (m.name.lower(), str(m.path)))


def find_model(name_or_path: str, home: Path | None = None) -> ModelInfo | None:
    """A model given by folder path, or by the name the model list shows."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return inspect_model(path)
    for model in discover_models(home):
        if model.name == name_or_path:
            return model
    return None


def resolve_model(name_or_path: str, home: Path | None = None) -> ModelInfo:
    """The model a user named on the command line: a folder, or a name as `zyquo-tui models`
    lists it. UserError (one sentence) when there is no such model."""
    model = find_model(name_or_path, home)
    if model is None and name_or_path.lower().endswith(".gguf"):
        raise UserError(f"{name_or_path} is a GGUF file, which mlx-lm cannot train: import it "
                        f"first with `zyquo-tui models import {name_or_path}`.")
    if model is None:
        raise UserError(f"No model {name_or_path!r}: give a model folder, or a name that "
                        "`zyquo-tui models` lists.")
    if not (model.path / "config.json").is_file():
        raise UserError(f"{model.path} has no config.json, so it is not a model folder.")
    if not model.weight_files:
        raise UserError(f"{model.path} has no weights (*.safetensors); give a complete MLX "
                        "model folder.")
    return model


def _looks_like_model(folder: Path) -> bool:
    try:
        names = {entry.name for entry in folder.iterdir()}
    except OSError:
        return False
    if "config.json" in names:
        return True
    if "adapter_config.json" in names:
        return False  # a LoRA adapter (adapters.safetensors), not a model
    return any(n.endswith((".safetensors", ".gguf") + PYTORCH_WEIGHT_SUFFIXES) for n in names)


def _gguf_only(folder: Path) -> bool:
    """A folder of GGUF files and no MLX model (LM Studio's downloads of llama.cpp models)."""
    return not (folder / "config.json").exists() and any(folder.glob("*.gguf"))


def _model_folders(root: Path) -> list[tuple[Path, str]]:
    """Model folders at or below `root`, named by their path relative to it."""
    if not root.is_dir():
        return []
    return find_folders(root, _looks_like_model, MAX_SEARCH_DEPTH)


def _hub_cache_models(cache: Path) -> list[tuple[Path, str, str]]:
    """(snapshot folder, "org/name", repo id) for each model repo in the hub cache."""
    if not cache.is_dir():
        return []
    found = []
    for repo_folder in sorted(cache.glob("models--*")):
        parts = repo_folder.name.split("--", 2)
        if len(parts) < 2:
            continue
        repo_id = "/".join(parts[1:])
        snapshot = _current_snapshot(repo_folder)
        if snapshot is not None:
            found.append((snapshot, repo_id, repo_id))
    return found


def _current_snapshot(repo_folder: Path) -> Path | None:
    # refs/main holds the revision a plain `from_pretrained(repo)` uses; without it (a download
    # of a pinned revision), take the newest snapshot.
    snapshots = repo_folder / "snapshots"
    try:
        revision = (repo_folder / "refs" / "main").read_text(encoding="utf-8").strip()
        if (snapshots / revision).is_dir():
            return snapshots / revision
    except OSError:
        pass
    try:
        candidates = [p for p in snapshots.iterdir() if p.is_dir()]
    except OSError:
        return None
    return max(candidates, key=lambda p: p.stat().st_mtime, default=None)


def list_model_folder(folder: Path, home: Path | None = None) -> Path | None:
    """Make a model folder appear in the model list (an exported model): nothing to do when
    $ZYQUO_HOME/models or a configured folder holds it, else a link to it is made in
    $ZYQUO_HOME/models, named after it. Returns the link made, if any."""
    home = home or zyquo_home()
    target = resolved(folder)
    for root in model_search_roots(home):
        if root.source not in (SOURCE_ZYQUO, SOURCE_CONFIG):
            continue
        try:
            depth = len(target.relative_to(resolved(root.path)).parts)
        except ValueError:
            continue
        if depth <= MAX_SEARCH_DEPTH:
            return None
    linked = models_dir(home)
    linked.mkdir(mode=0o700, parents=True, exist_ok=True)
    link, number = linked / target.name, 1
    while link.exists() or link.is_symlink():
        number += 1
        link = linked / f"{target.name}-{number}"
    os.symlink(target, link)
    return link
