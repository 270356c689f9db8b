"""What a grpo run costs in memory and time, as the estimate counts it: group_size sequences a
prompt, each as wide as the prompt and its longest answer; the sampling's KV cache as a phase
of its own; a frozen reference for full fine-tuning only; no replica; answers as a step's
tokens, slower a token than training alone."""

from __future__ import annotations

import dataclasses

import pytest
from test_memory import facts

from zyquo_tui.core.memory.duration import _tokens_per_step, grpo_share
from zyquo_tui.core.memory.estimate import (
    _WORKING,
    CPU_COEFFICIENTS,
    TrainingConfig,
    combine,
    features,
    generation_bytes,
)
from zyquo_tui.core.memory.replica import Replica, can_measure_whole, plan_replica, why_no_replica
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method


def grpo_hp(**settings) -> Hyperparameters:
    hp = Hyperparameters.from_dict({"batch_size": 4})
    for key, value in {"objective": "grpo", "group_size": 4, "max_completion_tokens": 64,
                       **settings}.items():
        SETTINGS[key].set(hp, value)
    return hp


def test_a_grpo_step_trains_group_size_sequences_of_prompt_and_answer():
    config = TrainingConfig.from_hyperparameters(Method.LORA, grpo_hp(), longest_row_tokens=17)
    assert config.sequences_per_row == 4 and config.completion_tokens == 64
    assert config.batch_width == 88  # 17 + 64 + the stop token, padded to a multiple of 8
    # The model reads the answers (up to 64 tokens, the stop token included) but their last
    # token and, once for its 4 answers, the prompt (17 padded to 24): a quarter of it a row.
    # The output head runs on the answers' positions only.
    assert config.model_tokens == 63 + 24 // 4
    assert config.predicted_tokens == 16 * 64
    model = facts()
    twice = TrainingConfig.from_hyperparameters(Method.LORA, grpo_hp(group_size=8),
                                                longest_row_tokens=17)
    assert twice.model_tokens == 63 + 24 // 8
    for name in ("kept_hidden", "kept_mlp"):
        assert features(model, config)[name] > 0
        assert features(model, twice)[name] == pytest.approx(
            features(model, config)[name] * (32 * 66) / (16 * 69))
    assert features(model, twice)["loss"] == 2 * features(model, config)["loss"] > 0
    # With grad checkpointing every sequence is prompt and answer whole.
    hp = grpo_hp()
    hp.grad_checkpoint = True
    checkpointed = TrainingConfig.from_hyperparameters(Method.LORA, hp, longest_row_tokens=17)
    assert checkpointed.model_tokens == 87
    assert checkpointed.predicted_tokens == 16 * 87


def test_the_kv_cache_of_every_answer_is_counted_and_only_for_grpo():
    model = facts()
    config = TrainingConfig.from_hyperparameters(Method.LORA, grpo_hp(), longest_row_tokens=17)
    per_token = 2 * model.num_layers * model.num_kv_heads * model.head_dim * model.compute_bytes
    logits = 2 * 16 * model.vocab_size * 4
    assert generation_bytes(model, config) == 16 * 88 * per_token + logits
    sft = TrainingConfig.from_hyperparameters(Method.LORA, Hyperparameters())
    assert generation_bytes(model, sft) == 0


def test_full_fine_tuning_keeps_a_frozen_reference_lora_switches_adapters_off():
    full = TrainingConfig.from_hyperparameters(Method.FULL, grpo_hp())
    assert full.reference_copy
    assert not TrainingConfig.from_hyperparameters(Method.LORA, grpo_hp()).reference_copy
    assert not TrainingConfig.from_hyperparameters(Method.FULL, grpo_hp(kl_beta=0.0)
                                                   ).reference_copy


def test_no_replica_stands_for_a_grpo_run():
    config = TrainingConfig.from_hyperparameters(Method.LORA, grpo_hp(), longest_row_tokens=17)
    model_config = {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16,
                    "vocab_size": 32000, "num_hidden_layers": 4}
    assert plan_replica(model_config, config) is None
    assert "answers are sampled" in why_no_replica(model_config, config)


def test_a_small_grpo_run_is_measured_whole_its_prompts_as_long_as_the_longest():
    config = TrainingConfig.from_hyperparameters(Method.LORA, grpo_hp(), longest_row_tokens=17)
    assert can_measure_whole(config, 20 * 2**20)
    whole = Replica.whole({}, config)
    # every setting kept; its synthetic prompts as long as the longest (the answers are
    # sampled to max_completion_tokens by trainer/measure.py)
    assert whole.scale == 1 and whole.config == config and whole.config.synthetic_row_tokens == 17


def test_a_grpo_step_counts_its_answers_and_their_cost_beside_training():
    hp = grpo_hp()
    per_step, source = _tokens_per_step(hp, "/data", [17, 20], None)
    assert (per_step, source) == (4 * 4 * 65, "answers")
    share = grpo_share(hp, [17, 19])
    # Each prompt is computed once for its group of 4 answers.
    assert share == pytest.approx(65 / ((18 / 4 + 65) * 4 / 3 + 65 / 3))
    assert grpo_share(grpo_hp(kl_beta=0.0), [18]) > share  # no reference's forward pass


def test_a_grpo_step_with_shared_prompts_scales_its_layers_working_memory_and_nothing_else():
    model = facts()
    shared = TrainingConfig.from_hyperparameters(Method.LORA, grpo_hp(), longest_row_tokens=17)
    hp = grpo_hp()
    hp.grad_checkpoint = True  # whole sequences: the SFT terms as they are
    whole = TrainingConfig.from_hyperparameters(Method.LORA, hp, longest_row_tokens=17)
    sft = TrainingConfig.from_hyperparameters(Method.LORA, Hyperparameters.from_dict(
        {"batch_size": 4}), longest_row_tokens=80)
    half = dataclasses.replace(CPU_COEFFICIENTS, grpo_shared_working=0.5)
    for config, scaled in ((shared, True), (whole, False), (sft, False)):
        quantities = features(model, config)
        if scaled:  # the working terms halved, as if each of their multipliers were
            every = {name: getattr(CPU_COEFFICIENTS, name) / 2 for name in _WORKING}
            want = combine(quantities, dataclasses.replace(CPU_COEFFICIENTS, **every,
                                                           grpo_shared_working=1.0))
        else:
            want = combine(quantities, CPU_COEFFICIENTS)
        have = combine(quantities, half)
        assert have == pytest.approx(want)
        assert have["loss"] == pytest.approx(combine(quantities, CPU_COEFFICIENTS)["loss"])
    unscaled = dataclasses.replace(CPU_COEFFICIENTS, grpo_shared_working=1.0)
    assert sum(combine(features(model, shared), half).values()) < sum(
        combine(features(model, shared), unscaled).values())
