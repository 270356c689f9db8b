"""Replicas (core/memory/replica.py): a config's graph with every width divided by k, whose
measured peak predicts the real one's. Planning here; measured against the calibration in
tests/unit/test_memory.py, through `plan` in tests/unit/test_plan_cli.py."""

from __future__ import annotations

import json

from zyquo_tui.core.memory.estimate import TrainingConfig, features
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.replica import (
    WHOLE_BYTES,
    Replica,
    can_measure_whole,
    plan_replica,
    why_no_replica,
)
from zyquo_tui.core.runs.settings import Method

LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
            "vocab_size": 128256, "head_dim": 128, "tie_word_embeddings": False}


def config(**changes) -> TrainingConfig:
    values = {"method": Method.LORA, "batch_size": 4, "max_seq_length": 2048, "num_layers": 16,
              "rank": 8, "longest_row_tokens": 2048, "loss_chunk_tokens": "off"}
    values.update(changes)
    return TrainingConfig(**values)


def test_a_replica_divides_every_width_and_keeps_the_graph():
    replica = plan_replica(LLAMA_8B, config())
    assert replica.scale == 8  # rank 8 allows no more
    scaled = replica.model_config
    assert (scaled["hidden_size"], scaled["intermediate_size"], scaled["head_dim"],
            scaled["vocab_size"]) == (512, 1792, 16, 16032)
    # the graph: layers, heads, batch, layers trained and every setting kept
    for key in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "tie_word_embeddings", "model_type"):
        assert scaled[key] == LLAMA_8B[key]
    real = config()
    assert replica.config.batch_size == real.batch_size
    assert replica.config.num_layers == real.num_layers
    assert replica.config.rank == 1
    # rows of exactly a scale-th of the real ones' tokens, not padded to a multiple of 32
    assert real.model_tokens == 2047 and replica.config.model_tokens == 256
    assert LLAMA_8B["hidden_size"] == 4096  # the model's own config is not changed


def test_full_fine_tuning_has_no_rank_to_keep_so_it_scales_further():
    assert plan_replica(LLAMA_8B, config(method=Method.FULL)).scale == 16
    assert plan_replica(LLAMA_8B, config(rank=16)).scale == 16
    assert plan_replica(LLAMA_8B, config(rank=4)).scale == 4


def test_a_quantized_replica_takes_a_group_its_inputs_allow():
    quantized = {**LLAMA_8B, "quantization": {"group_size": 64, "bits": 4}}
    replica = plan_replica(quantized, config(rank=16))
    # 4096 / 16 = 256 and 14336 / 16 = 896 both divide by 64: the model's own group
    assert replica.scale == 16 and replica.group_size == 64
    assert replica.model_config["quantization"] == {"group_size": 64, "bits": 4}
    small = {**LLAMA_8B, "hidden_size": 1024, "intermediate_size": 2816, "head_dim": 64,
             "num_attention_heads": 16, "quantization": {"group_size": 64, "bits": 4}}
    # 2816 / 16 = 176 takes no group MLX allows; 2816 / 8 = 352 takes 32, not the model's 64
    replica = plan_replica(small, config(rank=16))
    assert (replica.scale, replica.group_size) == (8, 32)


def test_a_qlora_suggestion_is_replicated_as_a_quantized_model():
    replica = plan_replica(LLAMA_8B, config(method=Method.QLORA, quantize_base=(4, 64)))
    assert replica.model_config["quantization"] == {"group_size": 64, "bits": 4}
    assert replica.config.quantize_base is None  # built quantized


def test_the_chunked_loss_keeps_its_number_of_slices():
    replica = plan_replica(LLAMA_8B, config(loss_chunk_tokens=512))
    assert replica.config.loss_chunk_tokens == 512 // replica.scale


def test_rows_too_short_for_sixteen_tokens_a_replica_get_half_scale_rows_of_eight_or_more():
    """Rows of 32 tokens (31 trained on) have no scale keeping 16 tokens; half scale with
    16-token rows stands for them (calibrated: the 13 short-row full fine-tuning configs);
    rows of under 16 tokens have none, and the sentence says so."""
    full = dict(method=Method.FULL, num_layers=-1)
    short = plan_replica(LLAMA_8B, config(max_seq_length=32, longest_row_tokens=32, **full))
    assert short.scale == 2 and short.config.model_tokens == 16
    assert why_no_replica(LLAMA_8B, config(max_seq_length=32, longest_row_tokens=32,
                                           **full)) is None
    # rows long enough for 16 tokens keep the largest scale that allows them, as before
    longer = plan_replica(LLAMA_8B, config(max_seq_length=256, longest_row_tokens=256, **full))
    assert longer.scale == 8 and longer.config.model_tokens == 32
    # the fallback is half scale only: scales asked for without 2 get none
    assert plan_replica(LLAMA_8B, config(max_seq_length=32, longest_row_tokens=32, **full),
                        scales=(4,)) is None
    tiny_rows = config(max_seq_length=16, longest_row_tokens=16, **full)
    assert plan_replica(LLAMA_8B, tiny_rows) is None
    assert why_no_replica(LLAMA_8B, tiny_rows) == "its rows (15 tokens) are too short to divide"


def test_models_with_widths_a_replica_does_not_know_have_none_and_say_why():
    moe = {**LLAMA_8B, "num_local_experts": 8}
    assert plan_replica(moe, config()) is None
    assert "num_local_experts" in why_no_replica(moe, config())
    odd = {**LLAMA_8B, "hidden_size": 4097}
    assert plan_replica(odd, config()) is None
    assert "no common factor" in why_no_replica(odd, config())
    assert why_no_replica(LLAMA_8B, config()) is None


def test_the_real_peak_is_the_real_weights_plus_k_squared_times_the_rest():
    replica = plan_replica(LLAMA_8B, config())
    assert replica.real_peak(replica_peak=300, replica_weights=100, real_weights=5000) == \
        5000 + 64 * 200


def test_the_prediction_counts_the_real_models_exact_weights(tmp_path):
    from test_memory import write_model

    facts = ModelFacts.from_folder(write_model(tmp_path / "m"))
    model_config = json.loads((tmp_path / "m" / "config.json").read_text())
    real = config(num_layers=-1, max_seq_length=256, longest_row_tokens=256)
    replica = plan_replica(model_config, real)
    weights = features(facts, real)["base_weights"]
    assert replica.predicted_peak(facts, real, 1000, 400) == weights + replica.scale ** 2 * 600


def test_a_replicas_figure_replaces_the_terms_and_any_history_correction(isolated_home):
    """The replica measured this very config here: its figure is the estimate, the breakdown
    adds up to it, the history's correction is dropped, and the verdict's margin is the
    replica's (on a calibrated device; an uncalibrated one keeps its own wide margin)."""
    import dataclasses

    from test_memory import advisor, facts

    from zyquo_tui.core.memory.advisor import Verdict
    from zyquo_tui.core.memory.estimate import CPU_COEFFICIENTS, GPU_COEFFICIENTS
    from zyquo_tui.core.memory.measure import ReplicaMeasurement
    from zyquo_tui.core.memory.replica import REPLICA_ERROR

    model, real = facts(), config(num_layers=4, max_seq_length=512, longest_row_tokens=512)
    judge = advisor()
    terms = judge.estimate(model, real)
    corrected = dataclasses.replace(terms, total_bytes=terms.total_bytes * 2, correction=2.0,
                                    breakdown={**terms.breakdown,
                                               "history_correction": terms.total_bytes},
                                    notes=[*terms.notes, "corrected by this machine's history"])
    replica = plan_replica(LLAMA_8B, real)  # any plan: with_replica reads its scale
    measured = ReplicaMeasurement(replica, replica_peak_bytes=1 << 20,
                                  replica_weights_bytes=1 << 18,
                                  peak_bytes=int(terms.model_bytes * 0.8), seconds=2.0,
                                  device="cpu")
    estimate = judge.with_replica(corrected, measured)
    assert estimate.total_bytes == measured.peak_bytes
    assert sum(estimate.breakdown.values()) == estimate.total_bytes
    assert "history_correction" not in estimate.breakdown and estimate.correction is None
    assert estimate.breakdown["replica_correction"] == measured.peak_bytes - terms.model_bytes
    assert not any(note.startswith("corrected by") for note in estimate.notes)
    assert any(note.startswith("measured on a replica with every width divided by 8")
               for note in estimate.notes)
    assert estimate.replica["peak_bytes"] == measured.peak_bytes
    assert judge.margin(estimate) == REPLICA_ERROR < CPU_COEFFICIENTS.held_out_error
    assert judge.margin(terms) == CPU_COEFFICIENTS.held_out_error
    # Just under 95% of the budget the replica's figure fits (its margin is 5%), where the
    # terms' 6% would call it tight, and so does an uncalibrated device's 30%.
    budget = int(estimate.total_bytes / (1 - REPLICA_ERROR)) + (1 << 20)
    assert estimate.total_bytes / budget > 1 - CPU_COEFFICIENTS.held_out_error
    assert advisor(budget_bytes=budget).judge(estimate).verdict is Verdict.FITS
    uncalibrated = advisor(budget_bytes=budget, device="gpu")
    assert uncalibrated.margin(estimate) == GPU_COEFFICIENTS.held_out_error
    assert uncalibrated.judge(estimate).verdict is Verdict.TIGHT


def test_a_config_small_enough_is_measured_whole_rows_cut_at_its_widest_batch():
    small = config(max_seq_length=256, longest_row_tokens=55)
    assert can_measure_whole(small, WHOLE_BYTES)
    assert not can_measure_whole(small, WHOLE_BYTES + 1)
    whole = Replica.whole(LLAMA_8B, small)
    assert whole.scale == 1 and whole.whole_config and whole.model_config is LLAMA_8B
    # rows of exactly the widest batch's tokens (1 + a multiple of 32), cut there
    assert small.batch_width == 65
    assert whole.config.synthetic_row_tokens == 65 and whole.config.max_seq_length == 65
    assert whole.config.batch_width == 65 and whole.config.model_tokens == small.model_tokens
    # and at scale 1 the prediction is the measured peak, its weights the real model's
    assert whole.real_peak(10_000, 1_000, 1_000) == 10_000


def test_what_synthetic_rows_cannot_stand_for_is_not_measured_whole():
    assert not can_measure_whole(config(quantize_base=(4, 64)), 0)  # the base quantized first
    assert not can_measure_whole(config(packed=True), 0)  # equal rows pack one a sequence
    assert not can_measure_whole(config(objective="distill"), 0)  # another model, the teacher
