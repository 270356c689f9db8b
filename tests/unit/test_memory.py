"""The memory advisor: each term of the estimate, each method, the verdict, suggestions, the gate,
the machine's history, the budget, and the estimate against real measured peaks."""

from __future__ import annotations

import dataclasses
import json
import socket
import statistics
import time
from pathlib import Path

import pytest

from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE, UserError
from zyquo_tui.core.memory import budget as memory_budget
from zyquo_tui.core.memory.advisor import TIGHT_FRACTION, MemoryAdvisor, Verdict, gate
from zyquo_tui.core.memory.budget import MemoryBudget, budget_from, cached_probe
from zyquo_tui.core.memory.estimate import (
    _EXACT,
    _KEPT,
    CPU_COEFFICIENTS,
    GPU_COEFFICIENTS,
    MIN_SLICING_GAIN,
    TrainingConfig,
    combine,
    features,
    resolved_slicing,
)
from zyquo_tui.core.memory.facts import LORA_BYTES, ModelFacts
from zyquo_tui.core.memory.history import HISTORY_FILE, MemoryHistory, training_peak
from zyquo_tui.core.memory.measure import Measurement
from zyquo_tui.core.memory.replica import REPLICA_ERROR, plan_replica
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method

REPO = Path(__file__).resolve().parents[2]


CALIBRATION = REPO / "bench" / "memory_calibration"


MIB = 1024 * 1024


GIB = 1024 * MIB


# A llama-shaped model: hidden 256, 4 layers, 8 heads of 32, 2 kv heads, MLP 512, vocab 1000.
HIDDEN, LAYERS, HEADS, KV_HEADS, MLP, VOCAB = 256, 4, 8, 2, 512, 1000


HEAD_DIM = HIDDEN // HEADS


KV = KV_HEADS * HEAD_DIM


# (name, out, in) of each Linear in a block
MATRICES = [("self_attn.q_proj", HIDDEN, HIDDEN), ("self_attn.k_proj", KV, HIDDEN),
            ("self_attn.v_proj", KV, HIDDEN), ("self_attn.o_proj", HIDDEN, HIDDEN),
            ("mlp.gate_proj", MLP, HIDDEN), ("mlp.up_proj", MLP, HIDDEN),
            ("mlp.down_proj", HIDDEN, MLP)]


IN_PLUS_OUT = sum(o + i for _, o, i in MATRICES)  # LoRA parameters per rank, per block


OUTPUTS = sum(o for _, o, _ in MATRICES)


BLOCK_PARAMETERS = sum(o * i for _, o, i in MATRICES) + 2 * HIDDEN


def llama_config(**changes) -> dict:
    config = {"model_type": "llama", "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "intermediate_size": MLP, "vocab_size": VOCAB, "torch_dtype": "bfloat16",
              "tie_word_embeddings": True}
    config.update(changes)
    return config


def llama_tensors(dtype: str = "BF16", bits: int | None = None, group: int = 64) -> list:
    """[name, dtype, shape, nbytes] of every tensor, as a safetensors header lists them."""
    size = {"BF16": 2, "F16": 2, "F32": 4}[dtype]
    tensors = []

    def add(name, shape, quantize=False):
        if quantize and bits:
            out, inp = shape
            tensors.append([f"{name}.weight", "U32", [out, inp * bits // 32],
                            out * inp * bits // 8])
            for aux in ("scales", "biases"):
                tensors.append([f"{name}.{aux}", dtype, [out, inp // group],
                                out * inp // group * size])
        else:
            n = 1
            for d in shape:
                n *= d
            tensors.append([f"{name}.weight", dtype, list(shape), n * size])

    add("model.embed_tokens", [VOCAB, HIDDEN], quantize=True)
    add("model.norm", [HIDDEN])
    for layer in range(LAYERS):
        for name, out, inp in MATRICES:
            add(f"model.layers.{layer}.{name}", [out, inp], quantize=True)
        add(f"model.layers.{layer}.input_layernorm", [HIDDEN])
        add(f"model.layers.{layer}.post_attention_layernorm", [HIDDEN])
    return tensors


def facts(dtype: str = "BF16", bits: int | None = None, **config_changes) -> ModelFacts:
    config = llama_config(**config_changes)
    if bits:
        config["quantization"] = {"bits": bits, "group_size": 64, "mode": "affine"}
    return ModelFacts.from_record({"config": config, "tensors": llama_tensors(dtype, bits)},
                                  path="/models/test")


def write_model(folder: Path, config: dict | None = None, tensors: list | None = None) -> Path:
    """A model folder whose safetensors file has a real header and sparse (unwritten) data."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or llama_config()))
    header, offset = {}, 0
    for name, dtype, shape, nbytes in tensors or llama_tensors():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    with open(folder / "model.safetensors", "wb") as handle:
        handle.write(len(raw).to_bytes(8, "little") + raw)
        handle.truncate(8 + len(raw) + offset)
    return folder


def advisor(budget_bytes: int = 64 * GIB, available: int | None = None, device: str = "cpu",
            history: MemoryHistory | None = None) -> MemoryAdvisor:
    budget = MemoryBudget.fixed(budget_bytes, device=device, available_bytes=available,
                                total_bytes=max(budget_bytes, available or 0))
    return MemoryAdvisor(budget, history=history or MemoryHistory())


def config(**changes) -> TrainingConfig:
    values = {"method": Method.LORA, "batch_size": 4, "max_seq_length": 512, "num_layers": 4}
    values.update(changes)
    return TrainingConfig(**values)


def test_base_weights_are_the_exact_bytes_of_every_tensor_in_the_headers(tmp_path):
    folder = write_model(tmp_path / "m")
    model = ModelFacts.from_folder(folder)
    expected = sum(t[3] for t in llama_tensors())
    assert model.weights_bytes == expected
    assert advisor().estimate(model, config()).breakdown["base_weights"] == expected


def test_quantized_weights_count_packed_words_scales_and_biases(tmp_path):
    tensors = llama_tensors("BF16", bits=4)
    cfg = llama_config(quantization={"bits": 4, "group_size": 64})
    model = ModelFacts.from_folder(write_model(tmp_path / "q", cfg, tensors))
    assert model.quantized and model.quantization_bits == 4
    assert model.weights_bytes == sum(t[3] for t in tensors)
    # 4 bits plus a bf16 scale and bias per 64 weights: 0.5625 bytes a weight
    dense = facts()
    matrices = dense.quantizable_elements
    assert model.weights_bytes == pytest.approx(
        dense.weights_bytes - dense.quantizable_bytes + matrices * 0.5625, rel=1e-6)
    # the layers' shapes come out unpacked
    assert model.layers[0].in_plus_out == IN_PLUS_OUT


def test_float32_weights_take_four_bytes_and_activations_follow_the_dtype():
    f32, bf16 = facts("F32"), facts("BF16")
    assert f32.weights_bytes == 2 * bf16.weights_bytes
    assert f32.compute_dtype == "float32" and bf16.compute_dtype == "bfloat16"
    a = advisor()
    assert a.estimate(f32, config()).breakdown["loss"] == 2 * a.estimate(
        bf16, config()).breakdown["loss"]


def test_a_folder_without_config_json_is_not_a_model(tmp_path):
    folder = write_model(tmp_path / "m")
    (folder / "config.json").unlink()
    with pytest.raises(UserError, match="no config.json") as caught:
        ModelFacts.from_folder(folder)
    assert caught.value.exit_status == EXIT_USAGE


def test_a_folder_without_safetensors_says_to_convert(tmp_path):
    folder = write_model(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no model\\*.safetensors"):
        ModelFacts.from_folder(folder)


def test_a_truncated_safetensors_file_is_reported(tmp_path):
    folder = write_model(tmp_path / "m")
    with open(folder / "model.safetensors", "r+b") as handle:
        handle.truncate(100)
    with pytest.raises(UserError, match="model.safetensors"):
        ModelFacts.from_folder(folder)


def test_an_unknown_architecture_is_estimated_from_config_json_and_says_so(tmp_path):
    folder = write_model(tmp_path / "m", llama_config(model_type="zyquo-unknown-arch"))
    model = ModelFacts.from_folder(folder)
    assert not model.architecture_known
    estimate = advisor().estimate(model, config())
    assert estimate.total_bytes > model.weights_bytes
    assert any("does not know model_type 'zyquo-unknown-arch'" in n for n in estimate.notes)


def test_layers_missing_from_the_headers_are_built_from_config_json():
    tensors = [t for t in llama_tensors() if ".layers." not in t[0]]
    model = ModelFacts.from_record({"config": llama_config(), "tensors": tensors})
    assert len(model.layers) == LAYERS
    assert model.layers[0].in_plus_out == IN_PLUS_OUT
    assert model.layers[0].parameters == BLOCK_PARAMETERS


def test_model_facts_are_cached_until_the_files_change(tmp_path):
    folder = write_model(tmp_path / "m")
    first = ModelFacts.from_folder(folder)
    assert ModelFacts.from_folder(folder) is first
    time.sleep(0.01)
    write_model(folder, llama_config(vocab_size=VOCAB))  # rewritten: a new mtime
    assert ModelFacts.from_folder(folder) is not first


def test_lora_trains_rank_times_inputs_plus_outputs_in_float32_per_trained_layer():
    model = facts()
    for layers, rank in ((4, 8), (2, 8), (1, 16)):
        estimate = advisor().estimate(model, config(num_layers=layers, rank=rank))
        parameters = layers * rank * IN_PLUS_OUT
        assert estimate.trainable_parameters == parameters
        assert estimate.breakdown["trainable_parameters"] == parameters * LORA_BYTES
        assert estimate.breakdown["gradients"] == parameters * LORA_BYTES


def test_num_layers_minus_one_trains_every_layer():
    estimate = advisor().estimate(facts(), config(num_layers=-1))
    assert estimate.trained_layers == LAYERS
    assert estimate.trainable_parameters == LAYERS * 8 * IN_PLUS_OUT


def test_dora_adds_a_magnitude_per_output():
    estimate = advisor().estimate(facts(), config(method=Method.DORA, num_layers=2))
    assert estimate.trainable_parameters == 2 * (8 * IN_PLUS_OUT + OUTPUTS)
    lora = advisor().estimate(facts(), config(num_layers=2))
    assert estimate.breakdown["activations"] > lora.breakdown["activations"]


def test_dora_magnitudes_are_a_phase_of_their_own_on_the_overhead_line():
    """Computed before the first step, one layer's copies sit beside the weights and the
    adapters only. A quantized layer is dequantized, copied to float32 and squared (10 bytes a
    weight): on short rows that tops the backward pass, and the overhead line shows the
    difference. A 16-bit layer's float32 copy (4 bytes a weight) is no more than what every
    step's forward pass rebuilds, so the backward pass stays the peak."""
    a = advisor()
    layer = BLOCK_PARAMETERS - 2 * HIDDEN  # the adapted matrices' weights
    short = config(method=Method.DORA, batch_size=1, max_seq_length=8)
    quantized = a.estimate(facts(bits=4), short)
    phase = (quantized.breakdown["base_weights"] + quantized.breakdown["trainable_parameters"]
             + CPU_COEFFICIENTS.fixed_bytes + layer * 10)
    assert quantized.total_bytes == pytest.approx(phase, abs=4)
    assert quantized.breakdown["overhead"] > CPU_COEFFICIENTS.fixed_bytes + 1
    assert sum(quantized.breakdown.values()) == quantized.total_bytes
    for model, rows in ((facts(bits=4), config(method=Method.DORA)), (facts(), short)):
        assert a.estimate(model, rows).breakdown["overhead"] == round(
            CPU_COEFFICIENTS.fixed_bytes)


def test_dora_adapted_weights_are_a_forward_phase_not_working_memory():
    """Every step's forward pass rebuilds each adapted weight in float32 for DoRA's norm, under
    stop_gradient: the copies meet the kept activations, never the backward's working memory.
    On long rows the backward pass is the peak and they add nothing; on short rows their
    phase is the peak: the exact terms, every kept activation and one layer's copies."""
    a = advisor()
    model = facts()
    for rows, copies_add in ((config(method=Method.DORA), False),
                             (config(method=Method.DORA, batch_size=1, max_seq_length=8), True)):
        q = features(model, rows)
        assert q["dora_adapted"] == (BLOCK_PARAMETERS - 2 * HIDDEN) * LORA_BYTES
        with_copies = sum(combine(q, CPU_COEFFICIENTS).values())
        without = sum(combine({**q, "dora_adapted": 0}, CPU_COEFFICIENTS).values())
        assert (with_copies > without) is copies_add
        if copies_add:
            kept = sum(getattr(CPU_COEFFICIENTS, name) * q[name] for name in _KEPT)
            exact = sum(q[name] for name in _EXACT)
            assert with_copies == pytest.approx(
                exact + kept + q["dora_adapted"] + CPU_COEFFICIENTS.fixed_bytes)
        assert a.estimate(model, rows).total_bytes == pytest.approx(with_copies, abs=1)


def test_grad_checkpointings_extra_counts_for_16_bit_models_only():
    """From one checkpointed layer to four a float32 model adds only the layers' inputs and the
    layer below's attention, measured; a bfloat16 one more (checkpoint_mlp)."""
    checkpointed = config(grad_checkpoint=True)
    assert features(facts("F32"), checkpointed)["checkpoint_mlp"] == 0
    assert features(facts(), checkpointed)["checkpoint_mlp"] == (
        4 * 511 * MLP * LORA_BYTES)
    assert features(facts(bits=4), checkpointed)["checkpoint_mlp"] > 0  # bfloat16 scales
    assert features(facts(), config())["checkpoint_mlp"] == 0


def test_full_fine_tuning_trains_the_blocks_in_the_model_dtype():
    estimate = advisor().estimate(facts(), config(method=Method.FULL, num_layers=2))
    assert estimate.trainable_parameters == 2 * BLOCK_PARAMETERS
    assert estimate.breakdown["trainable_parameters"] == 0  # already in base_weights
    # bf16; the share of them alive at once (the step updates a layer as its gradients arrive)
    assert estimate.breakdown["gradients"] == pytest.approx(
        CPU_COEFFICIENTS.full_gradients * 2 * BLOCK_PARAMETERS * 2, abs=1)
    adafactor = advisor().estimate(facts(), config(method=Method.FULL, num_layers=2,
                                                   optimizer="adafactor"))
    assert adafactor.breakdown["gradients"] == pytest.approx(
        CPU_COEFFICIENTS.full_gradients_adafactor * 2 * BLOCK_PARAMETERS * 2, abs=1)
    sgd = advisor().estimate(facts(), config(method=Method.FULL, num_layers=2, optimizer="sgd"))
    assert sgd.breakdown["gradients"] == pytest.approx(
        CPU_COEFFICIENTS.full_gradients_sgd * 2 * BLOCK_PARAMETERS * 2, abs=1)
    # accumulating: the share of the summed gradients and the new ones together
    accumulating = config(method=Method.FULL, num_layers=2, grad_accumulation_steps=2)
    summed = advisor().estimate(facts(), accumulating)
    assert summed.breakdown["gradients"] == pytest.approx(
        CPU_COEFFICIENTS.full_gradients * 2 * (2 * BLOCK_PARAMETERS * 2), abs=1)
    lora = advisor().estimate(facts(), config(num_layers=2))
    assert lora.breakdown["gradients"] == lora.breakdown["trainable_parameters"]  # all alive
    assert estimate.breakdown["optimizer_state"] == 2 * 2 * BLOCK_PARAMETERS * 2  # adam: m, v


def test_qlora_estimates_a_quantized_models_weights_as_stored():
    q4 = facts(bits=4)
    estimate = advisor().estimate(q4, config(method=Method.QLORA))
    assert not estimate.problems
    assert estimate.breakdown["base_weights"] == q4.weights_bytes
    assert estimate.breakdown["base_weights"] < facts().weights_bytes / 3
    assert estimate.trainable_parameters == LAYERS * 8 * IN_PLUS_OUT


@pytest.mark.parametrize("optimizer, moments", [("adam", 2), ("adamw", 2), ("sgd", 1),
                                                ("muon", 1)])
def test_optimizer_state_by_optimizer(optimizer, moments):
    estimate = advisor().estimate(facts(), config(optimizer=optimizer))
    parameters = LAYERS * 8 * IN_PLUS_OUT
    assert estimate.breakdown["optimizer_state"] == moments * parameters * LORA_BYTES


def test_adafactor_keeps_a_row_and_a_column_per_matrix():
    estimate = advisor().estimate(facts(), config(optimizer="adafactor", method=Method.FULL))
    rows_and_cols = LAYERS * (IN_PLUS_OUT + 2 * HIDDEN)  # the norms are vectors: kept whole
    assert estimate.breakdown["optimizer_state"] == rows_and_cols * 2
    adam = advisor().estimate(facts(), config(method=Method.FULL))
    assert estimate.breakdown["optimizer_state"] < adam.breakdown["optimizer_state"] / 50
    with_beta1 = advisor().estimate(
        facts(), config(optimizer="adafactor", method=Method.FULL, adafactor_first_moment=True))
    assert (with_beta1.breakdown["optimizer_state"] - estimate.breakdown["optimizer_state"]
            == LAYERS * BLOCK_PARAMETERS * 2)


def test_adafactor_beta_1_comes_from_optimizer_config():
    hp = Hyperparameters(optimizer="adafactor", optimizer_config={"adafactor": {"beta_1": 0.9}})
    assert TrainingConfig.from_hyperparameters("full", hp).adafactor_first_moment
    assert not TrainingConfig.from_hyperparameters("full", Hyperparameters()).adafactor_first_moment


def test_grad_accumulation_keeps_a_second_gradient():
    one = advisor().estimate(facts(), config())
    two = advisor().estimate(facts(), config(grad_accumulation_steps=2))
    assert two.breakdown["gradients"] == 2 * one.breakdown["gradients"]


def test_activations_grow_with_batch_and_with_trained_layers():
    a = advisor()
    model = facts()
    b2, b4 = (a.estimate(model, config(batch_size=b)).breakdown["activations"] for b in (2, 4))
    assert b4 == pytest.approx(2 * b2, rel=0.01)
    by_layers = [a.estimate(model, config(num_layers=n)).breakdown["activations"]
                 for n in (1, 2, 3, 4)]
    steps = [later - earlier for earlier, later in zip(by_layers, by_layers[1:])]
    assert all(step > 0 for step in steps)
    assert max(steps) == pytest.approx(min(steps), rel=0.01)  # the same per trained layer


def test_grad_checkpointing_keeps_only_each_layers_input():
    a = advisor()
    model = facts(num_hidden_layers=16)  # layers 4-15 take their shape from config.json
    plain = a.estimate(model, config(num_layers=16)).breakdown["activations"]
    checkpointed = a.estimate(model, config(num_layers=16, grad_checkpoint=True))
    assert checkpointed.breakdown["activations"] < plain / 3
    two = a.estimate(model, config(grad_checkpoint=True, num_layers=2)).breakdown["activations"]
    # each further layer keeps its input only: one hidden-size vector per token
    tokens = 4 * 511
    per_layer = CPU_COEFFICIENTS.checkpoint_hidden * tokens * HIDDEN * 2
    assert checkpointed.breakdown["activations"] - two == pytest.approx(14 * per_layer, rel=0.01)
    # from two checkpointed layers on, the layer below starts its recomputation early: a share
    # of one more attention matrix
    attention = features(model, config(grad_checkpoint=True, num_layers=2))["kept_attention"]
    one, two = (features(model, config(grad_checkpoint=True, num_layers=n))
                for n in (1, 2))
    assert one["checkpoint_attention"] == 0 and two["checkpoint_attention"] == attention


def test_attention_grows_with_the_square_of_the_sequence():
    # (the whole-batch loss: the chunked one's term does not grow with the batch)
    short, long = (features(facts(), config(max_seq_length=n, loss_chunk_tokens="off"))
                   for n in (257, 513))
    for name in ("kept_attention", "working_attention"):
        assert long[name] / short[name] == pytest.approx((512 / 256) ** 2, rel=0.01)
    for name in ("kept_hidden", "kept_mlp", "working_hidden", "loss"):
        assert long[name] / short[name] == pytest.approx(2, rel=0.01)
    # the breakdown's attention line at least quadruples (its share of the layer's working
    # memory above the loss grows faster still)
    a = advisor()
    before, after = (a.estimate(facts(), config(max_seq_length=n)).breakdown["attention"]
                     for n in (257, 513))
    assert after / before >= 4 * 0.99


def test_the_attention_term_is_per_device_and_metal_is_marked_uncalibrated():
    # MLX differentiates attention unfused on Metal too (mlx PR 2054): the CPU fit is the prior.
    a = advisor(device="cpu").estimate(facts(), config())
    gpu_advisor = advisor(device="gpu")
    gpu = gpu_advisor.estimate(facts(), config())
    assert gpu_advisor.coefficients is GPU_COEFFICIENTS and not GPU_COEFFICIENTS.calibrated
    assert gpu.breakdown["attention"] == a.breakdown["attention"]
    assert any("not calibrated" in note for note in gpu.notes)
    assert not any("not calibrated" in note for note in a.notes)
    # a device whose attention backward is fused keeps no matrix per layer
    fused = MemoryAdvisor(MemoryBudget.fixed(64 * GIB, device="gpu"), history=MemoryHistory(),
                          coefficients=dataclasses.replace(GPU_COEFFICIENTS, kept_attention=0))
    assert fused.estimate(facts(), config()).breakdown["attention"] < gpu.breakdown["attention"]


def test_the_loss_term_is_batch_times_tokens_times_vocabulary():
    a = advisor()
    whole = config(loss_chunk_tokens="off")
    small = a.estimate(facts(), whole).breakdown["loss"]
    big_vocab = a.estimate(facts(vocab_size=2 * VOCAB), whole).breakdown["loss"]
    assert big_vocab == pytest.approx(2 * small, rel=1e-6)
    assert small == pytest.approx(CPU_COEFFICIENTS.loss * 4 * 511 * VOCAB * 2, rel=1e-6)


def test_with_the_chunked_loss_the_loss_term_is_the_slices_alive_at_once():
    a = advisor()
    tokens = 4 * 511
    sliced = a.estimate(facts(), config(loss_chunk_tokens=256)).breakdown["loss"]
    # 8 slices, about 6.5 of them queued at once, two logit-sized arrays each; and the
    # gradient of every hidden state
    assert sliced == pytest.approx(6.5 * 2 * 256 * VOCAB * 2 + tokens * HIDDEN * 2, rel=1e-6)
    # fewer slices than that: all of them
    few = a.estimate(facts(), config(loss_chunk_tokens=1024)).breakdown["loss"]
    assert few == pytest.approx(2 * 2 * 1024 * VOCAB * 2 + tokens * HIDDEN * 2, rel=1e-6)
    # a batch of no more predictions than a slice is not sliced: the whole batch's term
    short = config(loss_chunk_tokens=4096)
    assert a.estimate(facts(), short).breakdown["loss"] == pytest.approx(
        CPU_COEFFICIENTS.loss * tokens * VOCAB * 2, rel=1e-6)


def test_the_chunked_loss_phase_holds_no_share_of_the_top_layers_working_memory():
    """The whole-batch loss's backward is interleaved with the top layer's (loss_overlap of
    its working memory is alive with the logits' copies); the chunked loss's slices take
    their gradients in the forward pass, so its phase is the kept activations and the slices
    alone."""
    from zyquo_tui.core.memory.estimate import _KEPT, _WORKING, combine, features

    model = facts(vocab_size=151_936)  # the loss's phase sets the peak, sliced or not
    for chunk, overlap in (("off", CPU_COEFFICIENTS.loss_overlap), (256, 0.0)):
        q = features(model, config(loss_chunk_tokens=chunk))
        kept = sum(getattr(CPU_COEFFICIENTS, name) * q[name] for name in _KEPT)
        layer = sum(getattr(CPU_COEFFICIENTS, name) * q[name] for name in _WORKING)
        loss = CPU_COEFFICIENTS.loss * q["loss"] + q["chunked_loss"]
        assert loss > layer > 0
        b = combine(q, CPU_COEFFICIENTS)
        assert b["activations"] + b["attention"] + b["loss"] == pytest.approx(
            kept + loss + overlap * layer, rel=1e-9)


def test_auto_slices_the_loss_only_where_that_lowers_the_peak():
    a = advisor()
    assert config().loss_chunk_tokens == "auto"  # the default
    # vocabulary 1,000: slices would shrink the loss term, but the layers' backward pass sets
    # the peak, so auto keeps the whole batch's loss (mlx-lm's, at its speed)
    small = a.estimate(facts(), config())
    whole, sliced = (a.estimate(facts(), config(loss_chunk_tokens=value))
                     for value in ("off", 256))
    assert sliced.breakdown["loss"] < whole.breakdown["loss"]
    assert sliced.total_bytes > (1 - MIN_SLICING_GAIN) * whole.total_bytes
    assert small.loss_chunk_tokens == "off" and small.total_bytes == whole.total_bytes
    # a Qwen-sized vocabulary: the loss sets the peak, and slices lower it
    big = facts(vocab_size=151_936)
    auto = a.estimate(big, config())
    assert auto.loss_chunk_tokens == 256 and auto.to_json()["loss_chunk_tokens"] == 256
    assert auto.total_bytes == a.estimate(big, config(loss_chunk_tokens=256)).total_bytes
    assert auto.total_bytes < 0.5 * a.estimate(big, config(loss_chunk_tokens="off")).total_bytes
    # no more predictions than one slice: nothing to slice
    assert a.estimate(big, config(batch_size=1, max_seq_length=200)).loss_chunk_tokens == "off"
    # the trainer and the client decide with the same function, for one rank's batch
    assert resolved_slicing(big, config(), CPU_COEFFICIENTS).loss_chunk_tokens == 256
    assert resolved_slicing(facts(), config(), CPU_COEFFICIENTS).loss_chunk_tokens == "off"


def test_chunked_loss_is_the_first_suggestion_when_it_is_off_and_would_make_the_run_fit():
    model = facts(vocab_size=151_936)
    off = config(loss_chunk_tokens="off", max_seq_length=2048)
    need_on = advisor().estimate(model, off.replace(loss_chunk_tokens=256)).total_bytes
    need_off = advisor().estimate(model, off).total_bytes
    assert need_on < need_off / 2
    # a budget the chunked run fits (below the tight share) and the whole-batch one does not
    tight = advisor(budget_bytes=int(need_on / (1 - CPU_COEFFICIENTS.held_out_error) * 1.02))
    assert tight.judge(tight.estimate(model, off)).verdict is Verdict.WONT_FIT
    first = tight.suggest(model, off)[0]
    assert first.changes == {"loss_chunk_tokens": "auto"}
    assert first.title.startswith("chunked loss")
    assert first.verdict is Verdict.FITS


def test_the_overhead_is_fixed_plus_what_the_optimizer_step_needs_beyond_the_backward_pass():
    a = advisor()
    small = a.estimate(facts(), config(batch_size=1, max_seq_length=64))
    big = a.estimate(facts(), config(batch_size=8, max_seq_length=1024))
    assert small.breakdown["overhead"] == big.breakdown["overhead"]
    assert small.breakdown["overhead"] == round(CPU_COEFFICIENTS.fixed_bytes)
    # Full fine-tuning with adam on short rows: the step's new weights and moments outweigh
    # the activations; it writes them a layer at a time
    short = config(method=Method.FULL, batch_size=1, max_seq_length=33)
    estimate = a.estimate(facts(), short)
    layer = BLOCK_PARAMETERS * 2  # bf16
    backward = sum(estimate.breakdown[t] for t in ("activations", "attention", "loss"))
    step = CPU_COEFFICIENTS.update_full * 3 * layer  # new weights, m and v of one layer
    assert step > backward
    assert estimate.breakdown["overhead"] == pytest.approx(
        CPU_COEFFICIENTS.fixed_bytes + step - backward, abs=2)
    # sgd without momentum rewrites no state, only the layer's new weights
    sgd = a.estimate(facts(), short.replace(optimizer="sgd"))
    sgd_backward = sum(sgd.breakdown[t] for t in ("activations", "attention", "loss"))
    assert sgd.breakdown["overhead"] == pytest.approx(CPU_COEFFICIENTS.fixed_bytes + max(
        CPU_COEFFICIENTS.update_full * layer - sgd_backward, 0), abs=2)
    assert sgd.breakdown["overhead"] < estimate.breakdown["overhead"]
    momentum = a.estimate(facts(), short.replace(optimizer="sgd", sgd_momentum=True))
    assert momentum.breakdown["overhead"] > sgd.breakdown["overhead"]


def test_every_fitted_quantity_has_a_multiplier_on_every_device():
    quantities = features(facts(), config(method=Method.DORA, grad_checkpoint=True))
    fields = {f.name for f in dataclasses.fields(CPU_COEFFICIENTS)} - {
        "calibrated", "held_out_error", "loss_overlap",  # not multipliers of a quantity
        "grpo_shared_working"}  # of the working_* multipliers, for a grpo step
    fitted = {k for k in quantities if not k.startswith("_")} - {
        "base_weights", "trainable_parameters", "gradients", "optimizer_state",
        "reference",  # exact: a DPO reference's frozen copy of the weights
        "teacher",  # exact weights, and arrays of the batch's shape (core/memory/teacher.py)
        "generation",  # derived: a grpo run's KV cache (estimate.generation_bytes)
        "chunked_loss"}  # derived: the chunked loss's slices (estimate.chunked_loss_bytes)
    assert fitted == fields
    for name in fields:
        assert getattr(GPU_COEFFICIENTS, name) >= 0 and getattr(CPU_COEFFICIENTS, name) >= 0


def test_the_breakdown_adds_up_to_the_total():
    estimate = advisor().estimate(facts(), config(method=Method.DORA, grad_checkpoint=True))
    assert sum(estimate.breakdown.values()) == estimate.total_bytes


def test_the_longest_row_not_the_cap_sets_the_width():
    cap_only = config(max_seq_length=2048)
    assert cap_only.batch_width == 2048
    short_rows = config(max_seq_length=2048, longest_row_tokens=300)
    assert short_rows.batch_width == 1 + 32 * 10  # padded like trainer/batches.py
    assert config(max_seq_length=256, longest_row_tokens=300).batch_width == 256
    a = advisor()
    assert a.estimate(facts(), short_rows).total_bytes < a.estimate(facts(), cap_only).total_bytes
    notes = a.estimate(facts(), cap_only).notes
    assert any("row lengths unknown" in note for note in notes)


@pytest.mark.parametrize("field, value", [("batch_size", 0), ("batch_size", -2),
                                          ("max_seq_length", 0), ("grad_accumulation_steps", 0),
                                          ("num_layers", 0), ("rank", 0), ("optimizer", "lion")])
def test_impossible_settings_are_problems_not_estimates(field, value):
    estimate = advisor().estimate(facts(), config(**{field: value}))
    assert estimate.problems and field.split("_")[0] in estimate.problems[0]
    assert estimate.total_bytes == 0


def test_more_layers_than_the_model_has_is_a_problem():
    problems = advisor().estimate(facts(), config(num_layers=16)).problems
    assert problems and "has only 4 layers" in problems[0]


def test_verdict_thresholds():
    model = facts()
    need = advisor().estimate(model, config()).total_bytes
    fits = advisor(budget_bytes=int(need / TIGHT_FRACTION) + MIB).assess(model, config())
    assert fits.verdict is Verdict.FITS and "needs about" in fits.reason
    tight = advisor(budget_bytes=int(need / 0.95)).assess(model, config())
    assert tight.verdict is Verdict.TIGHT and "95%" in tight.reason
    wont = advisor(budget_bytes=need - 1).assess(model, config())
    assert wont.verdict is Verdict.WONT_FIT
    assert "more than the" in wont.reason and wont.reason.count(".") >= 1


def test_other_processes_using_the_memory_make_it_tight():
    model = facts()
    need = advisor().estimate(model, config()).total_bytes
    busy = advisor(budget_bytes=10 * need, available=need // 2).assess(model, config())
    assert busy.verdict is Verdict.TIGHT
    assert "other processes use" in busy.reason and "free" in busy.reason


def test_suggestions_keep_the_effective_batch_first_and_each_fits():
    model = facts()
    base = config(batch_size=4, max_seq_length=1024)
    need = advisor().estimate(model, base).total_bytes
    smaller = advisor().estimate(model, base.replace(batch_size=2,
                                                     grad_accumulation_steps=2)).total_bytes
    a = advisor(budget_bytes=int((smaller + need) / 2 / TIGHT_FRACTION))
    plan = a.plan(model, base)
    assert plan.assessment.verdict is not Verdict.FITS
    first = plan.suggestions[0]
    assert first.changes == {"batch_size": 2, "grad_accumulation_steps": 2}
    for suggestion in plan.suggestions:
        assert suggestion.verdict is Verdict.FITS
        assert a.judge(a.estimate(model, suggestion.config)).verdict is Verdict.FITS
        assert suggestion.estimate.total_bytes < need


def test_suggestions_go_on_to_checkpointing_shorter_rows_layers_and_quantization():
    model = facts()
    base = config(batch_size=4, max_seq_length=2048, num_layers=4)
    lengths = [100] * 90 + [700] * 8 + [1900, 2000]
    a = advisor(budget_bytes=int(advisor().estimate(model, base.replace(
        batch_size=1, grad_accumulation_steps=4, grad_checkpoint=True,
        max_seq_length=512, num_layers=1)).total_bytes / TIGHT_FRACTION) + MIB)
    plan = a.plan(model, base, lengths)
    titles = [s.title for s in plan.suggestions]
    assert plan.suggestions, titles
    shorter = [s for s in plan.suggestions if "max_seq_length" in s.changes]
    assert shorter, titles
    cut = shorter[0]
    expected_cut = sum(1 for n in lengths if n > cut.changes["max_seq_length"])
    assert cut.truncated_rows == expected_cut
    assert f"cuts {expected_cut} of 100 rows" in cut.title
    # later stages combine the earlier changes that were not enough alone
    assert cut.changes.get("grad_checkpoint") is True
    assert cut.changes.get("batch_size") == 1
    assert all(s.estimate.total_bytes <= a.budget.budget_bytes * TIGHT_FRACTION
               for s in plan.suggestions)


def test_a_quantized_base_is_suggested_when_the_weights_are_the_problem():
    model = facts()
    base = config(batch_size=1, max_seq_length=64, num_layers=1, rank=4)
    need = advisor().estimate(model, base).total_bytes
    quantized = base.replace(method=Method.QLORA, quantize_base=(4, 64))
    need_q = advisor().estimate(model, quantized).total_bytes
    assert need_q < need
    a = advisor(budget_bytes=int(need_q / TIGHT_FRACTION) + 1024)
    plan = a.plan(model, base)
    assert plan.suggestions[-1].changes["method"] == "qlora"
    assert plan.suggestions[-1].changes["quantize_base"] == {"bits": 4, "group_size": 64}
    assert "mlx_lm convert" in plan.suggestions[-1].title


def test_nothing_is_suggested_when_it_fits():
    assert advisor().plan(facts(), config()).suggestions == []


def _run(model_path: str, **hp) -> Run:
    values = {"batch_size": 4, "max_seq_length": 512, "num_layers": 4, **hp}
    return Run.new(model=model_path, data="/data",
                   hyperparameters=Hyperparameters.from_dict(values))


def test_a_run_that_wont_fit_needs_an_explicit_override(tmp_path):
    folder = write_model(tmp_path / "m")
    run = _run(str(folder))
    tiny = advisor(budget_bytes=MIB)
    with pytest.raises(UserError, match="won't fit") as caught:
        gate(run, tiny)
    assert caught.value.exit_status == EXIT_PROBLEMS
    assert run.memory["verdict"] == "won't fit" and run.memory["override"] is False

    assessment = gate(run, tiny, override=True)
    assert assessment.verdict is Verdict.WONT_FIT
    assert run.memory["override"] is True
    assert run.memory["estimate_bytes"] == assessment.estimate.total_bytes
    assert run.memory["budget_bytes"] == MIB
    assert set(run.memory["breakdown"]) >= {"base_weights", "activations", "attention", "loss"}
    # the record survives run.json
    assert Run.from_dict(json.loads(json.dumps(run.to_dict()))).memory == run.memory


def test_the_gate_refusal_names_the_mildest_changes_that_fit(tmp_path):
    folder = write_model(tmp_path / "m")
    run = _run(str(folder), batch_size=64, max_seq_length=2048)
    facts = ModelFacts.from_folder(folder)
    config = TrainingConfig.from_run(run)
    judge = advisor(budget_bytes=2 * advisor().estimate(facts, config.replace(
        batch_size=4, grad_accumulation_steps=16)).total_bytes)
    first, second = judge.suggest(facts, config)[:2]
    with pytest.raises(UserError) as caught:
        gate(run, judge)
    message = caught.value.message
    assert f"what would fit: {first.title} (" in message and f"; or {second.title} (" in message
    assert message.endswith("or start it with an explicit override (--override-memory).")
    assert "\n" not in message


def test_a_run_that_fits_passes_the_gate_and_records_it(tmp_path):
    run = _run(str(write_model(tmp_path / "m")))
    assessment = gate(run, advisor(), longest_row_tokens=200)
    assert assessment.verdict is Verdict.FITS
    assert run.memory["verdict"] == "fits" and run.memory["override"] is False
    assert run.memory["exact_sequence"] is True
    assert run.memory["settings"]["batch_size"] == 4


def test_measured_history_corrects_later_estimates_and_says_so(isolated_home):
    model = facts()
    cfg = config()
    raw = advisor().estimate(model, cfg)
    history = MemoryHistory.load(isolated_home)
    a = advisor(history=history)
    # Each more than HISTORY_ABSOLUTE_SLACK above the 251 MiB estimate: errors of scale.
    for ratio in (1.40, 1.45, 1.50):
        a.record_measurement(model, raw, Measurement(int(raw.model_bytes * ratio), 512, 1.0,
                                                     "cpu"))
    assert (isolated_home / HISTORY_FILE).is_file()

    again = advisor(history=MemoryHistory.load(isolated_home)).estimate(model, cfg)
    assert again.correction == pytest.approx(1.45, abs=1e-3)
    assert again.model_bytes == raw.model_bytes
    assert again.total_bytes == pytest.approx(raw.total_bytes * 1.45, rel=1e-3)
    assert again.breakdown["history_correction"] == again.total_bytes - raw.total_bytes
    assert any("measured run" in note for note in again.notes)


def test_a_measurement_within_a_fixed_amount_of_its_estimate_gives_no_correction():
    def record(estimate: int, measured: int) -> dict:
        return {"host": socket.gethostname(), "device": "cpu", "model": "/models/test",
                "estimate_bytes": estimate, "measured_peak_bytes": measured}

    # The sample model's measure: 9 MiB estimated, the process 29 MiB above its start (the
    # runtime's own), a ratio of 3.2 that is an offset, not an error of scale.
    small = MemoryHistory(records=[record(9 * MIB, 29 * MIB)])
    assert small.correction("cpu", "/models/test") is None
    # 100 MiB more than a 125 MiB estimate is no such offset: it still corrects.
    far = MemoryHistory(records=[record(125 * MIB, 225 * MIB)])
    assert far.correction("cpu", "/models/test").factor == pytest.approx(1.8)


def test_history_of_other_machines_and_damaged_lines_are_ignored(isolated_home):
    isolated_home.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"host": "another-mac", "device": "cpu", "model": "/models/test",
                         "estimate_bytes": 100, "measured_peak_bytes": 200}),
             "{not json", json.dumps({"host": socket.gethostname(), "device": "cpu"})]
    (isolated_home / HISTORY_FILE).write_text("\n".join(lines) + "\n")
    history = MemoryHistory.load(isolated_home)
    assert len(history.records) == 1
    assert history.correction("cpu", "/models/test") is None


def test_finished_runs_add_their_measured_peak_once(isolated_home):
    history = MemoryHistory.load(isolated_home)
    run = _run("/models/test")
    run.state = RunState.COMPLETED
    run.memory = {"model_estimate_bytes": 100 * MIB, "exact_sequence": True, "device": "cpu",
                  "settings": {}}
    run.summary = {"peak_memory_bytes": 110 * MIB}
    run.process = {"host": socket.gethostname()}
    unexact = _run("/models/test")
    unexact.state = RunState.COMPLETED
    unexact.memory = {**run.memory, "exact_sequence": False}
    unexact.summary = dict(run.summary)
    assert history.import_runs([run, unexact, run]) == 1
    record = MemoryHistory.load(isolated_home).records[0]
    assert record["source"] == "run" and record["run_id"] == run.id
    assert record["measured_peak_bytes"] == 110 * MIB


def test_the_history_compares_the_larger_of_mlx_peak_and_resident_peak_above_the_start(
        isolated_home):
    history = MemoryHistory.load(isolated_home)
    run = _run("/models/test")
    run.state = RunState.COMPLETED
    run.memory = {"model_estimate_bytes": 100 * MIB, "exact_sequence": True, "device": "cpu",
                  "settings": {}}
    # The process grew 130 MiB above its 300 MiB start while MLX counted 110 MiB.
    run.summary = {"peak_memory_bytes": 110 * MIB, "peak_rss_bytes": 430 * MIB,
                   "start_rss_bytes": 300 * MIB}
    run.process = {"host": socket.gethostname()}
    assert history.record_run(run)
    record = history.records[0]
    assert record["measured_peak_bytes"] == 130 * MIB
    assert (record["mlx_peak_bytes"], record["peak_rss_bytes"]) == (110 * MIB, 430 * MIB)
    # MLX's figure wins when it is the larger (here, and with the resident figures unknown).
    assert training_peak(110 * MIB, 350 * MIB, 300 * MIB) == 110 * MIB
    assert training_peak(110 * MIB, None, None) == 110 * MIB
    # Where the footprint ready to train is known (the tokenizer and the rows loaded, less
    # MLX's memory then), the resident peak counts from it, not from the start.
    assert training_peak(110 * MIB, 430 * MIB, 300 * MIB, 360 * MIB) == 110 * MIB
    assert training_peak(10 * MIB, 430 * MIB, 300 * MIB, 400 * MIB) == 30 * MIB
    ready = _run("/models/test")
    ready.state, ready.memory, ready.process = run.state, run.memory, run.process
    ready.summary = {**run.summary, "ready_rss_bytes": 360 * MIB}
    ready_history = MemoryHistory(records=[])
    assert ready_history.record_run(ready)
    assert ready_history.records[0]["measured_peak_bytes"] == 110 * MIB
    assert ready_history.records[0]["ready_rss_bytes"] == 360 * MIB
    # A run that stepped down the out-of-memory ladder trained two configs: no record.
    stepped = _run("/models/test")
    stepped.state, stepped.memory, stepped.process = run.state, run.memory, run.process
    stepped.summary = dict(run.summary)
    stepped.memory_steps = [{"setting": "grad_checkpoint", "value": True, "rung": 1}]
    assert not MemoryHistory(records=[]).record_run(stepped)
    a = advisor(history=history)
    model = facts()
    raw = a.estimate(model, config(), use_history=False)
    a.record_measurement(model, raw, Measurement(50 * MIB, 512, 1.0, "cpu",
                                                 peak_rss_bytes=400 * MIB,
                                                 start_rss_bytes=300 * MIB))
    assert history.records[-1]["measured_peak_bytes"] == 100 * MIB
    assert history.records[-1]["mlx_peak_bytes"] == 50 * MIB


def test_metal_budget_is_the_wired_limit_when_set_else_the_recommended_working_set():
    probe = {"device": "Device(gpu, 0)", "recommended_working_set_bytes": 48 * GIB,
             "memory_limit_bytes": 72 * GIB}
    recommended = budget_from(probe, total_bytes=64 * GIB, available_bytes=40 * GIB,
                              wired_limit=None)
    assert recommended.device == "gpu" and recommended.budget_bytes == 48 * GIB
    assert "recommended working set" in recommended.budget_source
    assert recommended.used_by_others_bytes == 24 * GIB
    wired = budget_from(probe, total_bytes=64 * GIB, available_bytes=40 * GIB,
                        wired_limit=56 * GIB)
    assert wired.budget_bytes == 56 * GIB and wired.budget_source == "iogpu.wired_limit_mb"


def test_cpu_budget_is_mlx_memory_limit_capped_by_ram():
    probe = {"device": "Device(cpu, 0)", "memory_limit_bytes": 20 * GIB,
             "recommended_working_set_bytes": None}
    budget = budget_from(probe, total_bytes=24 * GIB, available_bytes=23 * GIB, wired_limit=None)
    assert budget.device == "cpu" and budget.budget_bytes == 20 * GIB
    capped = budget_from({**probe, "memory_limit_bytes": 99 * GIB}, total_bytes=24 * GIB,
                         available_bytes=23 * GIB, wired_limit=None)
    assert capped.budget_bytes == 24 * GIB
    failed = budget_from(None, total_bytes=24 * GIB, available_bytes=23 * GIB, wired_limit=None)
    assert not failed.probed and "probe failed" in failed.budget_source


def test_the_probe_runs_once_per_machine_and_is_cached(isolated_home):
    calls = []

    def probe():
        calls.append(1)
        return {"device": "Device(cpu, 0)", "memory_limit_bytes": 8 * GIB}

    (isolated_home / memory_budget.PROBE_CACHE_FILE).unlink(missing_ok=True)  # a new machine
    assert cached_probe(isolated_home, probe=probe)["memory_limit_bytes"] == 8 * GIB
    assert cached_probe(isolated_home, probe=probe)["memory_limit_bytes"] == 8 * GIB
    assert len(calls) == 1
    cache = json.loads((isolated_home / memory_budget.PROBE_CACHE_FILE).read_text())
    assert cache["key"]["host"] == socket.gethostname()
    cache["key"]["mlx"] = "0.0.1"  # another MLX version: probe again
    (isolated_home / memory_budget.PROBE_CACHE_FILE).write_text(json.dumps(cache))
    cached_probe(isolated_home, probe=probe)
    assert len(calls) == 2


def _calibration_config(entry: dict) -> TrainingConfig:
    """A calibration matrix entry's training config (seq: every row's length)."""
    return TrainingConfig(
        method=Method(entry.get("method", "lora")), batch_size=entry["batch_size"],
        max_seq_length=entry["seq"], num_layers=entry.get("num_layers", 16),
        rank=entry.get("rank", 8), grad_checkpoint=entry.get("grad_checkpoint", False),
        optimizer=entry.get("optimizer", "adam"),
        grad_accumulation_steps=entry.get("grad_accumulation_steps", 1),
        longest_row_tokens=entry["seq"],
        # measured with the whole-batch loss unless the entry says otherwise
        loss_chunk_tokens=entry.get("loss_chunk_tokens", "off"))


def _replica_errors(folder: Path = CALIBRATION, name: str = "replica.json"
                    ) -> dict[str, dict[str, float]]:
    """{family: {config: (predicted - measured) / measured}}: each config's peak as its
    half-scale replica predicts it (bench/calibrate_memory.py --measure --replica, stored in
    replica.json beside the measurements), against its own measured peak."""
    matrix = json.loads((folder / "matrix.json").read_text())
    measured = json.loads((folder / "measurements.json").read_text())["measurements"]
    replicas = json.loads((folder / name).read_text())["replicas"]
    if name == "replica.json":  # every measured config has its replica, but those no replica
        # stands for: a grpo run's (its answers are sampled) and rows too short to divide
        # (core/memory/replica.py)
        models = json.loads((folder / "models.json").read_text())
        none = {entry["id"] for entry in matrix["configs"]
                if entry.get("objective") == "grpo" or plan_replica(
                    models[entry["model"]]["config"], _calibration_config(entry)) is None}
        assert none < set(measured) and set(replicas) == set(measured) - none
    errors: dict[str, dict[str, float]] = {}
    for entry in matrix["configs"]:
        if entry["id"] in measured and entry["id"] in replicas:
            peak = measured[entry["id"]]["peak_memory_bytes"]
            predicted = replicas[entry["id"]]["estimate_bytes"]
            errors.setdefault(entry["model"], {})[entry["id"]] = (predicted - peak) / peak
    return errors


def test_replicas_four_and_eight_times_narrower_predict_the_peak_too():
    """What real models use (a 4,096-wide model's replica is 8 or 16 times narrower): the
    matrix's widest models' configs by replicas with every width divided by 4 and by 8
    (replicas of 0.7 to 16 MiB); slightly more over-stated as the replica gets tiny."""
    for name, count in (("replica-x4.json", 9), ("replica-x8.json", 7)):
        errors = [e for family in _replica_errors(CALIBRATION, name).values()
                  for e in family.values()]
        assert len(errors) == count, name
        assert max(errors) <= 0.05 and min(errors) >= -REPLICA_ERROR, name


def test_with_the_chunked_loss_and_in_the_layers_study_replicas_hold_too():
    """The chunked loss's configs (a count of slices in flight, which a replica keeps), the
    layers study's (1-3 trained layers, where the schedule saves the most) and the small
    steps' (the sample model's shape, and rows of 16 to 128 tokens, which the terms
    over-state)."""
    for folder in ("chunked", "layers", "small"):
        errors = [e for family in _replica_errors(CALIBRATION / folder).values()
                  for e in family.values()]
        assert max(abs(e) for e in errors) <= 0.15, folder
        assert statistics.median(abs(e) for e in errors) <= 0.07, folder
        assert min(errors) >= -REPLICA_ERROR, folder


def test_a_preference_run_counts_two_sequences_per_row():
    hp = Hyperparameters(batch_size=4, max_seq_length=256, num_layers=-1)
    sft = TrainingConfig.from_hyperparameters(Method.LORA, hp, longest_row_tokens=200)
    SETTINGS["objective"].set(hp, "dpo")
    dpo = TrainingConfig.from_hyperparameters(Method.LORA, hp, longest_row_tokens=200)
    assert dpo.sequences_per_row == 2 and sft.sequences_per_row == 1
    assert not dpo.reference_copy
    assert TrainingConfig.from_hyperparameters(Method.FULL, hp).reference_copy


def test_a_packed_run_counts_wider_attention_and_no_more_positions():
    """A packed step's positions never exceed the unpacked batch's, but its sequences may hold
    several rows: the attention term spans the widest packed sequence; the rest is unchanged."""
    from zyquo_tui.core.memory.estimate import features
    from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters

    hp = Hyperparameters(batch_size=4, max_seq_length=1024)
    plain = TrainingConfig.from_hyperparameters(Method.LORA, hp, longest_row_tokens=74)
    SETTINGS["pack"].set(hp, True)
    packed = TrainingConfig.from_hyperparameters(Method.LORA, hp, longest_row_tokens=74)
    assert (plain.model_tokens, plain.attention_width) == (96, 96)
    assert (packed.model_tokens, packed.attention_width) == (96, 320)  # 4 x 74, in 32s
    a, b = features(facts(), plain), features(facts(), packed)
    assert b["kept_attention"] == a["kept_attention"] * 320 / 96
    assert b["kept_hidden"] == a["kept_hidden"]
    # Never wider than max_seq_length; unknown rows, every sequence that wide.
    SETTINGS["max_seq_length"].set(hp, 256)
    assert TrainingConfig.from_hyperparameters(Method.LORA, hp, 74).attention_width == 256
    assert TrainingConfig.from_hyperparameters(Method.LORA, hp, None).attention_width == 256
