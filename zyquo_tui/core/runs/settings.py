"""Run settings, each defined once: the method, and the hyperparameters with mlx-lm's names.

Every setting of a run is one `Setting` in SETTINGS: its key, mlx-lm's name for it (dotted for
nested ones: lora_parameters.rank, lr_schedule.warmup), type, default, the check of its value
with its bounds or choices (core/runs/value_checks.py), label and help, the form's group, its
CLI flag, and whether only LoRA and DoRA have it. Everything else reads this one definition:
Hyperparameters' defaults, `zyquo-tui runs new`'s flags (cli/setting_flags.py), the new-run
form's fields (dashboard/widgets/hyperparameter_form.py), the mlx-lm YAML (mlx_config.py),
presets and the memory estimate (core/memory/estimate.py TrainingConfig).

Checks that relate settings to one another are CROSS_CHECKS here; checks against the model and
the dataset are in core/library/run_checks.py. All of them return structured problems
(core/runs/problems.py).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from zyquo_tui.core.runs.hosts import (
    BACKENDS,
    HostfileCheck,
    HostNames,
    distribution_problems,
    world_size_of,
)
from zyquo_tui.core.runs.problems import WARNING, Problem
from zyquo_tui.core.runs.value_checks import (
    AUTO_TEXT,
    INT_TEXT,
    OFF_TEXT,
    AnyNumber,
    BaseOrModelFolder,
    ByteSize,
    CountOrFile,
    CountOrOff,
    ExistingFile,
    Fraction,
    LayerNames,
    LearningRate,
    ModelFolder,
    NumberFromZero,
    NumberList,
    OneOf,
    RewardFunctions,
    ScheduleArguments,
    SomeText,
    TrackerNames,
    TRACKERS,
    TrueOrFalse,
    WholeNumber,
    bytes_from_text,
    is_whole,
    number_from_text,
)


class Method(str, enum.Enum):
    """How the model is fine-tuned. QLoRA is LoRA on a quantized base model."""

    LORA = "lora"
    DORA = "dora"
    QLORA = "qlora"
    FULL = "full"

    @property
    def fine_tune_type(self) -> str:
        """mlx-lm's name for it (mlx-lm has no qlora: the quantized base makes it so)."""
        return "lora" if self is Method.QLORA else self.value


OPTIMIZERS = ("adam", "adamw", "muon", "sgd", "adafactor")
LR_SCHEDULES = ("cosine_decay", "linear_schedule", "exponential_decay", "step_decay")
# The optimizers whose MLX class takes a weight_decay, with MLX's default for it (mlx-lm passes
# optimizer_config[optimizer] to the class as keyword arguments; Adam has none).
WEIGHT_DECAY_DEFAULTS = {"adamw": 0.01, "muon": 0.01, "sgd": 0.0, "adafactor": 0.0}

# The form's groups: basic settings are always shown, the others folded away.
BASIC = "basic"
ADVANCED = "advanced"
SCHEDULE = "schedule"
PREFERENCE = "preference"  # shown for preference objectives only (dpo, orpo)
REINFORCEMENT = "reinforcement"  # shown for grpo only
DISTILLATION = "distillation"  # shown for distill only

# Kinds of value.
INT = "int"
FLOAT = "float"
BOOL = "bool"
CHOICE = "choice"
NUMBERS = "numbers"  # a list of numbers, written "1e-05, 1000, 0"
NAMES = "names"  # a list of names, written "self_attn.q_proj, self_attn.v_proj"
COUNT_OR_FILE = "count_or_file"  # a whole number, or the path of a file
COUNT_OR_OFF = "count_or_off"  # a whole number, auto or off
BYTES = "bytes"  # a size: whole bytes, or text such as 12GB or 800MB

# Tokens per slice of the sliced loss (trainer/chunked_loss.py) when a run leaves it to auto:
# with a 151,936-token vocabulary a slice is 0.16 GB of float32 logits, and about four such
# arrays live while it is computed.
DEFAULT_LOSS_CHUNK_TOKENS = 256

BASE_OR_PATH = "base_or_path"  # the word base, or the path of a model folder

# What a run learns: from responses (sft), or to prefer chosen over rejected ones.
# grpo learns from rewards of its own sampled answers; distill from a teacher's distribution.
OBJECTIVES = ("sft", "dpo", "orpo", "grpo", "distill")
PREFERENCE_OBJECTIVES = ("dpo", "orpo")
# The objectives that sample answers from the model while training (distill with on_policy).
SAMPLING_OBJECTIVES = ("grpo", "distill")
# What a run that runs out of memory does (core/runs/memory_ladder.py, docs/unattended.md):
# resume from its last checkpoint one rung down the ladder, or stop.
ON_OOM = ("step-down", "stop")
# What picks a run's best checkpoint: the lowest validation loss, or the best in-run evaluation
# (eval_every on eval_data: the highest score with a scorer, else the lowest answer NLL).
BEST_BY = ("val_loss", "eval")
# The reward functions built in (trainer/rewards.py defines them); a file's function is
# written FILE.py:FUNCTION, with mlx-lm-lora's signature.
BUILTIN_REWARDS = ("exact_answer", "format", "length")
DPO_LOSSES = ("sigmoid", "ipo", "hinge")
FILE = "file"  # the path of a file
FOLDER = "folder"  # the path of a folder (a teacher model's)
TEXT = "text"  # words as they are written (a tracker's project name, a list of trackers)

# zyquo-tui's own settings (mlx-lm has no such keys) live under this key of the config, so an
# exported YAML still trains with `mlx_lm lora -c` (mlx-lm ignores a key it does not know)
# and a reader sees at once which settings are ours.
OWN_KEY = "zyquo_tui"

NONE_TEXT = "none"  # an optional choice not made: no lr_schedule, a constant learning rate

# -- the definition ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting of a run, defined once (see the module docstring).

    `key` names it in the form, in problems and in suggestions; `name` is mlx-lm's, dotted for
    a nested one, where `{optimizer}` stands for the chosen optimizer's entry of
    optimizer_config. `called` is how problem sentences name it (default: its key). An
    `optional` setting is left out unless given (None: mlx-lm's or MLX's own behaviour);
    `in_form` is False for the few the form has no field for (the YAML and the CLI set them).
    `objectives` are the objectives that use it (empty: every one), as `lora_only` says for
    methods: the form shows beta for dpo and orpo, the DPO loss and reference for dpo.
    """

    key: str
    name: str
    kind: str
    default: Any
    label: str
    help: str
    group: str
    flag: str
    check: Callable[[str, Any], list[tuple[str, str]]]
    choices: tuple[str, ...] = ()
    lora_only: bool = False
    optional: bool = False
    in_form: bool = True
    called: str = ""
    objectives: tuple[str, ...] = ()

    @property
    def spoken(self) -> str:
        return self.called or self.key

    @property
    def own(self) -> bool:
        """One of zyquo-tui's own settings (under OWN_KEY), not one of mlx-lm's."""
        return self.name.split(".")[0] == OWN_KEY

    def default_value(self) -> Any:
        return copy.deepcopy(self.default)

    def applies_to(self, method: Method | None) -> bool:
        """Whether a run of this method uses the setting (LoRA's own ones not for full)."""
        return not (self.lora_only and method is Method.FULL)

    def used_by(self, objective: str | None) -> bool:
        """Whether a run of this objective uses the setting (beta not for sft)."""
        return not self.objectives or objective in self.objectives

    def path(self, hp: "Hyperparameters") -> tuple[str, ...]:
        return tuple(str(hp.optimizer) if part == "{optimizer}" else part
                     for part in self.name.split("."))

    def get(self, hp: "Hyperparameters") -> Any:
        """Its value in `hp` (its default when a nested one is not there)."""
        parts = self.path(hp)
        value = getattr(hp, parts[0])
        for part in parts[1:]:
            if not isinstance(value, dict) or part not in value:
                return self.default_value()
            value = value[part]
        return value

    def set(self, hp: "Hyperparameters", value: Any) -> None:
        """Set its value in `hp` (a nested one in a copy of its dicts: `hp` shares none)."""
        parts = self.path(hp)
        if len(parts) == 1:
            setattr(hp, parts[0], value)
            return
        if self.own and value == self.default:
            value = None  # our own settings are written only when they differ from the default
        if value is None and self.kind == CHOICE and self.optional:
            # No choice of what a nested group is (lr_schedule.name): no group at all.
            setattr(hp, parts[0], None)
            return
        top = getattr(hp, parts[0])
        top = copy.deepcopy(top) if isinstance(top, dict) else {}
        node = top
        for part in parts[1:-1]:
            child = node.get(part)
            node[part] = child = dict(child) if isinstance(child, dict) else {}
            node = child
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
        setattr(hp, parts[0], top)

    def parse(self, text: str) -> Any:
        """The value a form field's or a flag's text stands for.

        Empty text is the default. Text that is no value of the setting's kind is kept as it
        is, so the check names it in its sentence (`batch_size must be a whole number, not
        'abc'.`).
        """
        stripped = text.strip()
        if self.kind == NUMBERS and not (stripped or self.default is not None):
            return None  # an optional list left empty (reward weights): unset
        if self.kind == NUMBERS:
            parts = [part.strip() for part in stripped.split(",") if part.strip()]
            numbers = [number_from_text(part) for part in parts]
            return stripped if None in numbers else numbers
        if not stripped:
            return self.default_value()
        if self.kind == INT:
            plain = stripped.replace("_", "")
            return int(plain) if INT_TEXT.match(plain) else stripped
        if self.kind == FLOAT:
            number = number_from_text(stripped)
            return stripped if number is None else float(number)
        if self.kind == BOOL:
            words = {"true": True, "on": True, "yes": True, "1": True,
                     "false": False, "off": False, "no": False, "0": False}
            return words.get(stripped.lower(), stripped)
        if self.kind == NAMES:
            return [part.strip() for part in stripped.split(",") if part.strip()]
        if self.kind == BASE_OR_PATH:
            return stripped if stripped == "base" else os.path.abspath(
                os.path.expanduser(stripped))
        if self.kind == BYTES:
            size = bytes_from_text(stripped)
            return stripped if size is None else size
        if self.kind == COUNT_OR_FILE:
            plain = stripped.replace("_", "")
            if INT_TEXT.match(plain):
                return int(plain)
            return os.path.abspath(os.path.expanduser(stripped))  # from where it was typed
        if self.kind == COUNT_OR_OFF:
            plain = stripped.replace("_", "")
            if INT_TEXT.match(plain):
                return int(plain)
            word = stripped.lower()
            return word if word in (OFF_TEXT, AUTO_TEXT) else stripped
        if self.kind == FOLDER and not os.path.exists(os.path.expanduser(stripped)):
            return stripped  # a model's name (`zyquo-tui models`), which the draft resolves
        if self.kind in (FILE, FOLDER):
            return os.path.abspath(os.path.expanduser(stripped))
        if self.kind == CHOICE and self.optional and stripped == NONE_TEXT:
            return None
        return stripped

    def problems(self, value: Any) -> list[Problem]:
        if value is None and self.optional:
            return []
        return [Problem(self.key, sentence, severity)
                for severity, sentence in self.check(self.spoken, value)]


SETTINGS: dict[str, Setting] = {setting.key: setting for setting in (
    Setting("iters", "iters", INT, 1000, "Iterations", "training steps", BASIC, "--iters",
            WholeNumber()),
    # zyquo-tui's own (mlx-lm counts iterations only; mlx-lm-lora's config key is `epochs`):
    # the RunDraft turns it into iters from the dataset's rows (core/runs/epochs.py).
    Setting("epochs", f"{OWN_KEY}.epochs", INT, None, "Epochs",
            "passes over train.jsonl, made into iterations from its rows and the batch size; "
            "unset, iterations decide", BASIC, "--epochs", WholeNumber(), optional=True,
            called="epochs"),
    Setting("batch_size", "batch_size", INT, 4, "Batch size",
            "rows per step; memory grows with it", BASIC, "--batch-size", WholeNumber()),
    Setting("learning_rate", "learning_rate", FLOAT, 1e-5, "Learning rate",
            "the optimizer's step size (a schedule replaces it)", BASIC, "--learning-rate",
            LearningRate()),
    Setting("num_layers", "num_layers", INT, 16, "Layers",
            "blocks trained, counted from the last; -1 trains all", BASIC, "--num-layers",
            WholeNumber(also=(-1,))),
    Setting("max_seq_length", "max_seq_length", INT, 2048, "Max seq length",
            "tokens a row may have; longer rows are cut", BASIC, "--max-seq-length",
            WholeNumber()),
    Setting("rank", "lora_parameters.rank", INT, 8, "LoRA rank",
            "adapter size: capacity and memory grow with it", BASIC, "--rank", WholeNumber(),
            lora_only=True, called="rank (lora_parameters.rank)"),
    Setting("grad_checkpoint", "grad_checkpoint", BOOL, False, "Grad checkpoint",
            "recompute activations: far less memory, slower steps", BASIC, "--grad-checkpoint",
            TrueOrFalse()),
    Setting("mask_prompt", "mask_prompt", BOOL, False, "Mask prompt",
            "train on the completions only, not the prompts", BASIC, "--mask-prompt",
            TrueOrFalse()),
    # zyquo-tui's own: each batch's rows packed into fewer positions (core/runs/packing.py).
    Setting("pack", f"{OWN_KEY}.pack", BOOL, False, "Pack rows",
            "place each batch's rows into as few positions as pay, attention kept inside "
            "each row: far less padding, the same rows a step and the same per-token losses; "
            "attention-only models (llama, qwen, gemma, phi3...) only", BASIC,
            "--pack", TrueOrFalse(), objectives=("sft",), called="pack"),
    Setting("optimizer", "optimizer", CHOICE, "adam", "Optimizer",
            "how updates are made from gradients", ADVANCED, "--optimizer", OneOf(OPTIMIZERS),
            choices=OPTIMIZERS),
    Setting("weight_decay", "optimizer_config.{optimizer}.weight_decay", FLOAT, None,
            "Weight decay",
            f"decoupled weight decay of {', '.join(WEIGHT_DECAY_DEFAULTS)}; unset, MLX's own "
            f"({', '.join(f'{k} {v:g}' for k, v in WEIGHT_DECAY_DEFAULTS.items())})",
            ADVANCED, "--weight-decay", NumberFromZero(), optional=True, in_form=False),
    Setting("grad_accumulation_steps", "grad_accumulation_steps", INT, 1, "Grad accum steps",
            "batches summed per update: a bigger effective batch in the same memory", ADVANCED,
            "--grad-accumulation-steps", WholeNumber()),
    # zyquo-tui's own: each batch's rows computed in N slices, their gradients summed into the
    # batch's before the update (trainer/loop.py): the same update, a fraction of the
    # activations. The out-of-memory ladder's second rung doubles it (memory_ladder.py).
    Setting("micro_batches", f"{OWN_KEY}.micro_batches", INT, 1, "Micro-batches",
            "compute each batch's rows in N slices, their gradients summed before the update: "
            "the same update as the whole batch, with the activations of a slice", ADVANCED,
            "--micro-batches", WholeNumber(), in_form=False, objectives=("sft",),
            called="micro_batches"),
    Setting("lora_scale", "lora_parameters.scale", FLOAT, 20.0, "LoRA scale",
            "multiplies the adapter's output", ADVANCED, "--lora-scale", AnyNumber(),
            lora_only=True, called="lora_parameters.scale"),
    Setting("lora_dropout", "lora_parameters.dropout", FLOAT, 0.0, "LoRA dropout",
            "dropout on the adapter's input, from 0 up to 1", ADVANCED, "--lora-dropout",
            Fraction(), lora_only=True, called="lora_parameters.dropout"),
    Setting("lora_keys", "lora_parameters.keys", NAMES, None, "LoRA keys",
            "the layers of each trained block given adapters, comma-separated (e.g. "
            "self_attn.q_proj,self_attn.v_proj); unset, every Linear", ADVANCED, "--lora-keys",
            LayerNames(), lora_only=True, optional=True, in_form=False,
            called="lora_parameters.keys"),
    Setting("steps_per_report", "steps_per_report", INT, 10, "Report every",
            "steps between training-loss reports", ADVANCED, "--steps-per-report",
            WholeNumber()),
    Setting("steps_per_eval", "steps_per_eval", INT, 200, "Validate every",
            "steps between validation losses", ADVANCED, "--steps-per-eval", WholeNumber()),
    Setting("val_batches", "val_batches", INT, 25, "Val batches",
            "batches per validation; -1 uses the whole set", ADVANCED, "--val-batches",
            WholeNumber(also=(-1,))),
    Setting("save_every", "save_every", INT, 100, "Save every", "steps between checkpoints",
            ADVANCED, "--save-every", WholeNumber()),
    Setting("seed", "seed", INT, 0, "Seed", "same seed, same data order and init", ADVANCED,
            "--seed", WholeNumber(minimum=0)),
    Setting("schedule", "lr_schedule.name", CHOICE, None, "Schedule",
            "how the learning rate changes; none keeps it constant", SCHEDULE, "--lr-schedule",
            OneOf(LR_SCHEDULES), choices=LR_SCHEDULES, optional=True, called="lr_schedule"),
    Setting("schedule_arguments", "lr_schedule.arguments", NUMBERS, None, "Arguments",
            "comma-separated; the first is the initial learning rate", SCHEDULE,
            "--lr-schedule-arguments", ScheduleArguments(), called="lr_schedule.arguments"),
    Setting("warmup", "lr_schedule.warmup", INT, 0, "Warmup steps",
            "steps rising linearly to the initial learning rate", SCHEDULE, "--warmup",
            WholeNumber(minimum=0)),
    Setting("warmup_init", "lr_schedule.warmup_init", FLOAT, 0.0, "Warmup start",
            "the learning rate the warmup starts from", SCHEDULE, "--warmup-init",
            NumberFromZero(noun="a learning rate")),
    # zyquo-tui's own: the trainer reads them; mlx-lm never sees them.
    Setting("early_stopping_patience", f"{OWN_KEY}.early_stopping_patience", INT, None,
            "Stop after", "validations without improvement before the run stops; unset, "
            "never", ADVANCED, "--early-stopping-patience", WholeNumber(), optional=True,
            called="early_stopping_patience"),
    Setting("early_stopping_min_delta", f"{OWN_KEY}.early_stopping_min_delta", FLOAT, 0.0,
            "Min improvement", "how much lower a validation loss must be to count as better",
            ADVANCED, "--early-stopping-min-delta", NumberFromZero(),
            called="early_stopping_min_delta"),
    Setting("sample_prompts", f"{OWN_KEY}.sample_prompts", COUNT_OR_FILE, None,
            "Sample prompts", "at each validation, answers to N validation prompts, or to a "
            "file's prompts (one a line); unset, none", ADVANCED, "--sample-prompts",
            CountOrFile(), optional=True, called="sample_prompts"),
    # In-run evaluation (trainer/evaluation.py, as `zyquo-tui eval` computes it): the current
    # adapter on eval_data every eval_every steps and at the last, written as `eval` events.
    Setting("eval_every", f"{OWN_KEY}.eval_every", INT, None, "Evaluate every",
            "steps between evaluations of the adapter on eval_data (and at the last step); "
            "unset, none", ADVANCED, "--eval-every", WholeNumber(), optional=True,
            in_form=False, called="eval_every"),
    Setting("eval_data", f"{OWN_KEY}.eval_data", FILE, None, "Eval data",
            "the rows evaluated: completions, chat or {prompt, answer} rows (.jsonl)",
            ADVANCED, "--eval-data", ExistingFile("a .jsonl file of rows with answers"),
            optional=True, in_form=False, called="eval_data"),
    Setting("eval_exact", f"{OWN_KEY}.eval_exact", BOOL, False, "Eval exact match",
            "score the greedy answers by exact match with the reference", ADVANCED,
            "--eval-exact", TrueOrFalse(), in_form=False, called="eval_exact"),
    Setting("eval_reward", f"{OWN_KEY}.eval_reward", NAMES, None, "Eval reward",
            "score the greedy answers with a reward: exact_answer, format, length, or "
            "FILE.py:FUNCTION (mlx-lm-lora's signature)", ADVANCED, "--eval-reward",
            RewardFunctions(BUILTIN_REWARDS), optional=True, in_form=False,
            called="eval_reward"),
    Setting("eval_max_rows", f"{OWN_KEY}.eval_max_rows", INT, None, "Eval rows",
            "evaluate the first N rows of eval_data only; unset, all", ADVANCED,
            "--eval-max-rows", WholeNumber(), optional=True, in_form=False,
            called="eval_max_rows"),
    Setting("best_by", f"{OWN_KEY}.best_by", CHOICE, "val_loss", "Best by",
            "what picks the best checkpoint: val_loss, or eval (the evaluation's score, else "
            "its answer NLL; each evaluated step is saved)", ADVANCED, "--best-by",
            OneOf(BEST_BY), choices=BEST_BY, in_form=False, called="best_by"),
    Setting("objective", f"{OWN_KEY}.objective", CHOICE, "sft", "Objective",
            "sft learns the responses; dpo and orpo learn to prefer chosen over rejected "
            "(preference data); grpo learns from rewards of its own answers (prompts with "
            "answers); distill learns a teacher's distribution", BASIC, "--objective", OneOf(OBJECTIVES), choices=OBJECTIVES,
            in_form=False),
    Setting("beta", f"{OWN_KEY}.beta", FLOAT, 0.1, "Beta",
            "dpo: how far the policy may move from the reference; orpo: the weight of the "
            "odds-ratio term", PREFERENCE, "--beta", LearningRate(high=math.inf),
            objectives=PREFERENCE_OBJECTIVES),
    Setting("dpo_loss", f"{OWN_KEY}.dpo_loss", CHOICE, "sigmoid", "DPO loss",
            "sigmoid (DPO), ipo or hinge", PREFERENCE, "--dpo-loss", OneOf(DPO_LOSSES),
            choices=DPO_LOSSES, objectives=("dpo",)),
    Setting("reference", f"{OWN_KEY}.reference", BASE_OR_PATH, "base", "Reference",
            "dpo's reference: base (the model before training; for full fine-tuning a frozen "
            "copy in memory) or a model folder", PREFERENCE, "--reference",
            BaseOrModelFolder(), objectives=("dpo",)),
    # Reinforcement learning (GRPO, as mlx-lm-lora defines it; docs/CLI.md).
    Setting("reward_functions", f"{OWN_KEY}.reward_functions", NAMES, ["exact_answer"],
            "Rewards", "what scores each sampled answer: exact_answer, format, length, or "
            "FILE.py:FUNCTION (mlx-lm-lora's signature)", REINFORCEMENT, "--reward",
            RewardFunctions(BUILTIN_REWARDS), objectives=("grpo",),
            called="reward_functions"),
    Setting("reward_weights", f"{OWN_KEY}.reward_weights", NUMBERS, None, "Reward weights",
            "each reward's weight in the total, in the order of the rewards; unset, 1 each",
            REINFORCEMENT, "--reward-weights", NumberList(), optional=True,
            objectives=("grpo",), called="reward_weights"),
    Setting("group_size", f"{OWN_KEY}.group_size", INT, 4, "Group size",
            "answers sampled for each prompt; each is judged against its group's mean",
            REINFORCEMENT, "--group-size", WholeNumber(minimum=2), objectives=("grpo",),
            called="group_size"),
    Setting("max_completion_tokens", f"{OWN_KEY}.max_completion_tokens", INT, 64,
            "Answer length", "at most this many tokens in each sampled answer",
            REINFORCEMENT, "--max-completion-tokens", WholeNumber(),
            objectives=SAMPLING_OBJECTIVES, called="max_completion_tokens"),
    Setting("sampling_temperature", f"{OWN_KEY}.sampling_temperature", FLOAT, 0.8,
            "Temperature", "how varied the sampled answers are (0: always the likeliest)",
            REINFORCEMENT, "--sampling-temperature", NumberFromZero(), objectives=("grpo",),
            called="sampling_temperature"),
    Setting("kl_beta", f"{OWN_KEY}.kl_beta", FLOAT, 0.1, "KL weight",
            "how strongly the policy is held near the reference (0: no KL term)",
            REINFORCEMENT, "--kl-beta", NumberFromZero(), objectives=("grpo",),
            called="kl_beta"),
    Setting("clip_epsilon", f"{OWN_KEY}.clip_epsilon", FLOAT, 0.2, "Clip epsilon",
            "how far one step may move an answer's probability ratio (PPO's clip)",
            REINFORCEMENT, "--clip-epsilon", NumberFromZero(), objectives=("grpo",),
            called="clip_epsilon"),
    # TRL's num_iterations and the GRPO paper's mu: each batch of sampled answers trains this
    # many iterations (optimizer steps, each counted in iters) against the log-probabilities
    # of the policy that sampled them, so from the second on the ratio moves and the clip acts.
    Setting("grpo_iterations", f"{OWN_KEY}.grpo_iterations", INT, 1, "Reuses",
            "iterations each batch of sampled answers trains (TRL's num_iterations, mu); "
            "each counts in iters; 1: each answer trained once, as mlx-lm-lora does",
            REINFORCEMENT, "--grpo-iterations", WholeNumber(), in_form=False,
            objectives=("grpo",), called="grpo_iterations"),
    Setting("reward_timeout", f"{OWN_KEY}.reward_timeout", FLOAT, 60.0, "Reward timeout",
            "seconds a reward function may take for one step's answers; a reward still "
            "running then fails the run", REINFORCEMENT, "--reward-timeout", LearningRate(
                high=math.inf), in_form=False, objectives=("grpo",),
            called="reward_timeout"),
    # Distillation from a teacher that shares the student's tokenizer.
    Setting("teacher", f"{OWN_KEY}.teacher", FOLDER, None, "Teacher",
            "the model whose distribution the run learns (same tokenizer): its name or folder",
            DISTILLATION, "--teacher", ModelFolder(), optional=True, objectives=("distill",),
            called="teacher"),
    Setting("distill_temperature", f"{OWN_KEY}.distill_temperature", FLOAT, 1.0,
            "Temperature", "softens both distributions before they are compared",
            DISTILLATION, "--temperature", LearningRate(high=math.inf),
            objectives=("distill",), called="distill_temperature"),
    Setting("on_policy", f"{OWN_KEY}.on_policy", BOOL, False, "On policy",
            "the teacher scores the student's own sampled answers, not the dataset's",
            DISTILLATION, "--on-policy", TrueOrFalse(), objectives=("distill",),
            called="on_policy"),
    Setting("sample_max_tokens", f"{OWN_KEY}.sample_max_tokens", INT, 64, "Sample length",
            "at most this many tokens in each sample answer", ADVANCED, "--sample-max-tokens",
            WholeNumber(), in_form=False, called="sample_max_tokens"),
    Setting("loss_chunk_tokens", f"{OWN_KEY}.loss_chunk_tokens", COUNT_OR_OFF, AUTO_TEXT,
            "Loss slice", "auto computes the loss's logits 256 tokens at a time where that "
            "lowers the estimated peak memory (large vocabularies) and the whole batch's "
            "elsewhere; N always slices N tokens at a time; off computes the whole batch's, "
            "as mlx-lm does. The same losses either way", ADVANCED,
            "--loss-chunk-tokens", CountOrOff(), in_form=False, called="loss_chunk_tokens"),
    # Running out of memory (docs/unattended.md): the run's limit, what a death by it does,
    # and checkpoints by the clock besides those by the step, so a death loses little.
    Setting("memory_limit", f"{OWN_KEY}.memory_limit", BYTES, None, "Memory limit",
            "the most memory the run may use, e.g. 12GB (MLX's limit is set to it; a step whose "
            "peak passes it ends as out of memory); unset, config.toml [memory] limit, else "
            "the machine's budget", ADVANCED, "--memory-limit", ByteSize(), optional=True,
            in_form=False, called="memory_limit"),
    Setting("on_oom", f"{OWN_KEY}.on_oom", CHOICE, "step-down", "On out of memory",
            "step-down resumes the run from its last checkpoint one rung down (gradient "
            "checkpointing, then half the micro-batch, then loss slices; at most three); stop "
            "ends it", ADVANCED, "--on-oom", OneOf(ON_OOM), choices=ON_OOM, in_form=False,
            called="on_oom"),
    Setting("save_every_minutes", f"{OWN_KEY}.save_every_minutes", FLOAT, 10.0,
            "Save every (minutes)", "also save a checkpoint when this many minutes have "
            "passed since the last one, whatever save_every says", ADVANCED,
            "--save-every-minutes", LearningRate(high=math.inf), in_form=False,
            called="save_every_minutes"),
    # Experiment trackers, with mlx-lm's own keys (docs/CLI.md): our trainer sends a run's
    # metrics through each tracker's library (trainer/trackers.py).
    Setting("report_to", "report_to", TEXT, None, "Report to",
            "experiment trackers that get the run's metrics: wandb, swanlab, trackio, "
            "comma-separated (each needs its library installed)", ADVANCED, "--report-to",
            TrackerNames(TRACKERS), optional=True, in_form=False),
    Setting("project_name", "project_name", TEXT, None, "Project",
            "the trackers' project; unset, zyquo-tui", ADVANCED, "--project-name",
            SomeText(), optional=True, in_form=False),
    # One run across several processes with mlx.launch (core/runs/hosts.py, docs/distributed.md).
    Setting("ranks", f"{OWN_KEY}.ranks", INT, None, "Ranks",
            "N processes on this machine train one run (mlx.launch -n N): a way to test "
            "distributed training here, useful nowhere else", ADVANCED, "--ranks",
            WholeNumber(), optional=True, in_form=False, called="ranks"),
    Setting("hosts", f"{OWN_KEY}.hosts", NAMES, None, "Hosts",
            "Macs that train one run together, one process each, this one first (reachable "
            "by SSH without a password; `zyquo-tui hosts check`)", ADVANCED, "--hosts",
            HostNames(), optional=True, in_form=False, called="hosts"),
    Setting("hostfile", f"{OWN_KEY}.hostfile", FILE, None, "Hostfile",
            "mlx.launch's hostfile (as mlx.distributed_config writes it), this machine first",
            ADVANCED, "--hostfile", HostfileCheck(), optional=True, in_form=False,
            called="hostfile"),
    Setting("backend", f"{OWN_KEY}.backend", CHOICE, None, "Backend",
            "MLX's distributed backend: ring (Ethernet or Thunderbolt), jaccl (RDMA over "
            "Thunderbolt) or mpi; unset, ring", ADVANCED, "--backend", OneOf(BACKENDS),
            choices=BACKENDS, optional=True, in_form=False, called="backend"),
)}


def default_of(key: str) -> Any:
    """The default of one setting, as the definition has it now."""
    return SETTINGS[key].default_value()


def nested_defaults(top: str) -> dict[str, Any]:
    """The defaults of the settings nested in `top` (lora_parameters), as mlx-lm lists them."""
    found = {}
    for setting in SETTINGS.values():
        parts = setting.name.split(".")
        if parts[0] == top and len(parts) == 2 and setting.default is not None:
            found[parts[1]] = setting.default_value()
    return found


def form_settings() -> list[Setting]:
    """The settings the new-run form has a field for, in the form's order."""
    return [setting for setting in SETTINGS.values() if setting.in_form]


def _from_definition(key: str) -> Any:
    """A dataclass default read from the definition at each construction (not copied here)."""
    return field(default_factory=lambda: default_of(key))


# -- the settings of a run -----------------------------------------------------------------------


@dataclass
class Hyperparameters:
    """The training settings of a run, with mlx-lm's names; defaults come from SETTINGS.

    Nested settings live where mlx-lm has them: lora_parameters (rank, scale, dropout, keys),
    lr_schedule (name, arguments, warmup, warmup_init; None: a constant learning rate) and
    optimizer_config (per optimizer, keyword arguments of its MLX class, weight_decay among
    them).
    """

    optimizer: str = _from_definition("optimizer")
    optimizer_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    num_layers: int = _from_definition("num_layers")
    batch_size: int = _from_definition("batch_size")
    iters: int = _from_definition("iters")
    val_batches: int = _from_definition("val_batches")
    learning_rate: float = _from_definition("learning_rate")
    steps_per_report: int = _from_definition("steps_per_report")
    steps_per_eval: int = _from_definition("steps_per_eval")
    save_every: int = _from_definition("save_every")
    max_seq_length: int = _from_definition("max_seq_length")
    grad_checkpoint: bool = _from_definition("grad_checkpoint")
    grad_accumulation_steps: int = _from_definition("grad_accumulation_steps")
    report_to: str | None = None
    project_name: str | None = None
    mask_prompt: bool = _from_definition("mask_prompt")
    seed: int = _from_definition("seed")
    lora_parameters: dict[str, Any] = field(
        default_factory=lambda: nested_defaults("lora_parameters"))
    lr_schedule: dict[str, Any] | None = None
    # zyquo-tui's own settings (early stopping, samples), by their names under OWN_KEY.
    zyquo_tui: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # LoRA's settings that are not given are mlx-lm's defaults, as in its own config.
        if self.lora_parameters is None or isinstance(self.lora_parameters, dict):
            self.lora_parameters = {**nested_defaults("lora_parameters"),
                                    **(self.lora_parameters or {})}

    @property
    def rank(self) -> Any:
        return SETTINGS["rank"].get(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Hyperparameters":
        return cls(**{k: v for k, v in data.items() if k in _HYPERPARAMETER_FIELDS})

    def problems(self, method: Method | None = None, *,
                 only: frozenset[str] | set[str] | None = None) -> list[Problem]:
        """Every problem of these settings on their own, one sentence each (see checks.py
        for the model and the dataset). `only` keeps the checks of those keys alone (the
        memory estimate checks the settings it holds)."""
        def wanted(key: str) -> bool:
            return only is None or key in only

        found: list[Problem] = []
        schedule_shaped = _schedule_shaped(self.lr_schedule)
        for setting in SETTINGS.values():
            if not wanted(setting.key) or not setting.applies_to(method):
                continue
            if setting.group == SCHEDULE and not schedule_shaped:
                continue  # no schedule, or one without a name (CROSS_CHECKS says so)
            found += setting.problems(setting.get(self))
        for check in CROSS_CHECKS:
            if all(wanted(key) and SETTINGS[key].applies_to(method) for key in check.involves):
                found += check.run(self)
        return found


_HYPERPARAMETER_FIELDS = frozenset(f.name for f in dataclasses.fields(Hyperparameters))
# Every field of Hyperparameters holds settings of the definition, and every setting lives in
# a field: a setting added to one and not the other fails here, at import.
if _HYPERPARAMETER_FIELDS != {s.name.split(".")[0] for s in SETTINGS.values()}:
    raise RuntimeError("Hyperparameters' fields and the names in SETTINGS disagree")


# -- checks that relate settings -----------------------------------------------------------------


@dataclass(frozen=True)
class CrossCheck:
    """A check of settings against one another; `involves` are their keys."""

    involves: tuple[str, ...]
    run: Callable[[Hyperparameters], list[Problem]]


def _schedule_shaped(schedule: Any) -> bool:
    return isinstance(schedule, dict) and schedule.get("name") is not None


def _schedule_shape(hp: Hyperparameters) -> list[Problem]:
    if hp.lr_schedule is not None and not _schedule_shaped(hp.lr_schedule):
        return [Problem("schedule", "lr_schedule needs a name and arguments, as in mlx-lm's "
                                    "config.")]
    return []


def _optimizer_config_shape(hp: Hyperparameters) -> list[Problem]:
    if not isinstance(hp.optimizer_config, dict):
        return [Problem("optimizer", "optimizer_config must map optimizer names to their "
                                     "settings.")]
    return []


def _lora_parameters_shape(hp: Hyperparameters) -> list[Problem]:
    if not isinstance(hp.lora_parameters, dict):
        return [Problem("rank", "lora_parameters must map rank, scale and dropout to their "
                                "values, as in mlx-lm's config.")]
    return []


def _weight_decay_needs_its_optimizer(hp: Hyperparameters) -> list[Problem]:
    decay = SETTINGS["weight_decay"].get(hp)
    if decay is not None and hp.optimizer in OPTIMIZERS \
            and hp.optimizer not in WEIGHT_DECAY_DEFAULTS:
        return [Problem("weight_decay", f"weight_decay needs an optimizer that has it "
                                        f"({', '.join(WEIGHT_DECAY_DEFAULTS)}), and "
                                        f"{hp.optimizer} has none; choose adamw for adam with "
                                        "weight decay.")]
    return []


def _interval_past_the_end(key: str, what: str) -> Callable[[Hyperparameters], list[Problem]]:
    def check(hp: Hyperparameters) -> list[Problem]:
        every, iters = getattr(hp, key), hp.iters
        if is_whole(every) and is_whole(iters) and 1 <= iters < every:
            return [Problem(key, f"{key} ({every}) is larger than iters ({iters}): {what}",
                            WARNING)]
        return []
    return check


def _batch_splits_across_ranks(hp: Hyperparameters) -> list[Problem]:
    return distribution_problems(hp.batch_size, hp.zyquo_tui)


def _micro_batches_of_rows(hp: Hyperparameters) -> list[Problem]:
    """Each micro-batch needs a row: at most the rows each process trains of a batch."""
    micro = SETTINGS["micro_batches"].get(hp)
    if not (is_whole(micro) and is_whole(hp.batch_size)) or micro <= 1:
        return []
    rows = hp.batch_size // max(world_size_of(hp.zyquo_tui), 1)
    if micro > rows:
        return [Problem("micro_batches", f"micro_batches ({micro}) is more than the {rows} "
                                         "rows each process trains of a batch; give at most "
                                         f"{rows}.")]
    return []


def _distillation_needs_a_teacher(hp: Hyperparameters) -> list[Problem]:
    if SETTINGS["objective"].get(hp) == "distill" and SETTINGS["teacher"].get(hp) is None:
        # Said so that it reads at the form's Teacher field as well as after `runs new`.
        return [Problem("teacher", "the distill objective needs a teacher (--teacher): a "
                                   "model with the same tokenizer, by its name as `zyquo-tui "
                                   "models` lists it or by its folder.")]
    return []


def _one_weight_per_reward(hp: Hyperparameters) -> list[Problem]:
    weights = SETTINGS["reward_weights"].get(hp)
    rewards = SETTINGS["reward_functions"].get(hp)
    if SETTINGS["objective"].get(hp) != "grpo" or not isinstance(weights, list) \
            or not isinstance(rewards, list) or len(weights) == len(rewards):
        return []
    return [Problem("reward_weights", f"reward_weights has {len(weights)} weights for "
                                      f"{len(rewards)} rewards; give one weight a reward, in "
                                      "the order of the rewards.")]


def _evaluation_needs_its_parts(hp: Hyperparameters) -> list[Problem]:
    every, data = SETTINGS["eval_every"].get(hp), SETTINGS["eval_data"].get(hp)
    exact, reward = SETTINGS["eval_exact"].get(hp), SETTINGS["eval_reward"].get(hp)
    found = []
    if every is not None and data is None:
        found.append(Problem("eval_data", "eval_every needs eval_data (--eval-data "
                                          "FILE.jsonl): the rows to evaluate on."))
    if every is None and (data is not None or exact is True or reward):
        found.append(Problem("eval_every", "eval_data, eval_exact and eval_reward need "
                                           "eval_every (--eval-every N): how often to "
                                           "evaluate."))
    if exact is True and reward:
        found.append(Problem("eval_reward", "give eval_exact or eval_reward, not both: one "
                                            "score of the answers."))
    if SETTINGS["best_by"].get(hp) == "eval" and every is None:
        found.append(Problem("best_by", "best_by eval needs an evaluation (--eval-every N "
                                        "--eval-data FILE.jsonl) to choose by."))
    return found


CROSS_CHECKS: tuple[CrossCheck, ...] = (
    CrossCheck(("eval_every", "eval_data", "eval_exact", "eval_reward", "best_by"),
               _evaluation_needs_its_parts),
    CrossCheck(("batch_size", "ranks", "hosts", "hostfile"), _batch_splits_across_ranks),
    CrossCheck(("micro_batches", "batch_size", "ranks", "hosts", "hostfile"),
               _micro_batches_of_rows),
    CrossCheck(("schedule",), _schedule_shape),
    CrossCheck(("objective", "teacher"), _distillation_needs_a_teacher),
    CrossCheck(("objective", "reward_functions", "reward_weights"), _one_weight_per_reward),
    CrossCheck(("optimizer",), _optimizer_config_shape),
    CrossCheck(("rank",), _lora_parameters_shape),
    CrossCheck(("optimizer", "weight_decay"), _weight_decay_needs_its_optimizer),
    CrossCheck(("save_every", "iters"),
               _interval_past_the_end("save_every", "only the final checkpoint will be saved.")),
    CrossCheck(("steps_per_eval", "iters"),
               _interval_past_the_end("steps_per_eval", "validation runs only at the first and "
                                                        "last step.")),
)
