"""The sliced loss (trainer/chunked_loss.py) gives the losses and gradients of the whole-batch
one, for every output layer mlx-lm models have, and trains runs to the same losses."""

from __future__ import annotations

import pytest
from conftest import SAMPLE_DATA, run_trainer
from helpers import losses_by_iteration, make_run

from zyquo_tui.core.events.protocol import read_events

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")


def _lora_model(path):
    from mlx_lm import load
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model, _ = load(str(path))
    model.freeze()
    mx.random.seed(1)  # A is drawn at random too: the same adapters every time
    linear_to_lora_layers(model, 2, {"rank": 4, "dropout": 0.0, "scale": 20.0})
    for _, module in model.named_modules():
        if hasattr(module, "lora_b"):  # B = 0 would make every adapter gradient but B's 0
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.01
    return model


def _batch(vocab: int, rows: int = 4, width: int = 40):
    mx.random.seed(2)
    tokens = mx.random.randint(0, vocab, (rows, width))
    # a prompt of 5 tokens in odd rows, rows of different lengths (padding after them)
    lengths = mx.array([[5 * (i % 2), width - 4 * i] for i in range(rows)])
    return tokens, lengths


def _loss_and_gradients(model, objective, tokens, lengths):
    from mlx.utils import tree_flatten

    (loss, _, _), grads = nn.value_and_grad(model, objective)(model, tokens, lengths)
    return loss.item(), dict(tree_flatten(grads))


def _assert_same(model, objective, sliced_objective, vocab):
    tokens, lengths = _batch(vocab)
    loss, grads = _loss_and_gradients(model, objective, tokens, lengths)
    sliced_loss, sliced_grads = _loss_and_gradients(model, sliced_objective, tokens, lengths)
    assert sliced_loss == pytest.approx(loss, abs=1e-5)
    assert grads.keys() == sliced_grads.keys() and grads
    for name, grad in grads.items():
        scale = mx.abs(grad).max().item()
        assert scale > 0, name
        assert mx.abs(grad - sliced_grads[name]).max().item() <= 1e-4 * scale, name


@pytest.mark.parametrize("which", ["zyquo-tiny", "zyquo-tiny-4bit"])
def test_sliced_sft_and_logprobs_equal_the_whole_batch(sample_models, which):
    """Tied embeddings, float and quantized (QuantizedEmbedding.as_linear)."""
    from functools import partial

    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.chunked_loss import sliced_cross_entropy

    model = _lora_model(sample_models[which])
    sliced = sliced_cross_entropy(model, 16)
    assert sliced is not None
    vocab = model.args.vocab_size
    _assert_same(model, losses.sft_objective, partial(losses.sft_objective, sliced=sliced),
                 vocab)
    advantages = mx.array([1.0, -0.5, 0.25, 2.0])
    _assert_same(model, partial(losses.policy_gradient_objective, advantages=advantages),
                 partial(losses.policy_gradient_objective, advantages=advantages,
                         sliced=sliced), vocab)
    _assert_same(model, partial(losses.orpo_objective, beta=0.1),
                 partial(losses.orpo_objective, beta=0.1, sliced=sliced), vocab)
    # validation: the loss without the gradient's work
    tokens, lengths = _batch(vocab)
    whole, ntoks, _ = losses.sft_objective(model, tokens, lengths)
    loss, count = losses.sft_validation_loss(model, tokens, lengths, sliced)
    assert loss.item() == pytest.approx(whole.item(), abs=1e-5) and count.item() == ntoks.item()
    # DPO, with its reference scored in slices too (the base: adapters off)
    from zyquo_tui.trainer.objectives import Reference

    references = [Reference(model, str(sample_models[which]), "base", chunk)
                  .scores(tokens, lengths, "sigmoid") for chunk in ("off", 16)]
    assert mx.abs(references[0] - references[1]).max().item() <= 1e-4
    _assert_same(model, partial(losses.dpo_objective, reference_scores=references[0], beta=0.1,
                                variant="sigmoid"),
                 partial(losses.dpo_objective, reference_scores=references[0], beta=0.1,
                         variant="sigmoid", sliced=sliced), vocab)


def test_sliced_distillation_equals_the_whole_batch(sample_models):
    """The per-token KL against a teacher's whole distribution and against its top k."""
    from functools import partial

    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.chunked_loss import sliced_cross_entropy

    model = _lora_model(sample_models["zyquo-tiny"])
    sliced = sliced_cross_entropy(model, 16)
    vocab = model.args.vocab_size
    tokens, _ = _batch(vocab)
    mx.random.seed(3)
    logits = 3 * mx.random.normal((tokens.shape[0], tokens.shape[1] - 1, vocab))
    at_two = logits / 2 - mx.logsumexp(logits / 2, axis=-1, keepdims=True)
    whole = partial(losses.distill_objective, teacher=at_two, temperature=2.0)
    _assert_same(model, whole, partial(whole, sliced=sliced), vocab)
    ids = mx.argsort(-logits, axis=-1)[..., :5]
    top = mx.take_along_axis(logits - mx.logsumexp(logits, axis=-1, keepdims=True), ids, -1)
    top_k = partial(losses.distill_topk_objective, teacher_ids=ids, teacher_logprobs=top,
                    temperature=2.0)
    _assert_same(model, top_k, partial(top_k, sliced=sliced), vocab)


def test_an_untied_quantized_lm_head_is_sliced_too():
    from functools import partial

    from mlx_lm.models import llama

    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.chunked_loss import output_head, sliced_cross_entropy

    args = llama.ModelArgs(model_type="llama", hidden_size=64, num_hidden_layers=2,
                           intermediate_size=128, num_attention_heads=4, rms_norm_eps=1e-5,
                           vocab_size=1000, num_key_value_heads=2, tie_word_embeddings=False)
    mx.random.seed(0)
    model = llama.Model(args)
    nn.quantize(model, group_size=64, bits=4)
    assert isinstance(model.lm_head, nn.QuantizedLinear)
    model.freeze()
    model.layers[1].mlp.down_proj.unfreeze(keys=["scales"], strict=False)
    assert output_head(model) is not None
    # a trained head would need its own gradient: then the whole-batch loss is kept
    model.lm_head.unfreeze(keys=["scales"], strict=False)
    assert output_head(model) is None
    model.lm_head.freeze()
    sliced = sliced_cross_entropy(model, 8)
    _assert_same(model, losses.sft_objective, partial(losses.sft_objective, sliced=sliced),
                 1000)


def test_a_model_whose_logits_are_not_a_plain_projection_keeps_the_whole_batch_loss(tiny_model):
    from mlx_lm import load

    from zyquo_tui.trainer.chunked_loss import loss_slicing

    model, _ = load(str(tiny_model))
    plain = type(model).__call__
    type(model).__call__ = lambda self, *a, **k: 30 * mx.tanh(plain(self, *a, **k) / 30)
    try:
        sliced, note = loss_slicing(model, 64)
    finally:
        type(model).__call__ = plain
    assert sliced is None and "whole batch" in note
    assert loss_slicing(model, "off") == (None, None)


@pytest.mark.parametrize("mask_prompt", [False, True])
def test_runs_train_to_the_same_losses_with_and_without_slices(tiny_model, mask_prompt):
    losses = {}
    for chunk in ("off", 16):
        store, run = make_run(tiny_model, SAMPLE_DATA / "completions", iters=100,
                              learning_rate=1e-4, steps_per_report=1, steps_per_eval=50,
                              save_every=1000, mask_prompt=mask_prompt,
                              zyquo_tui={"loss_chunk_tokens": chunk})
        done = run_trainer(store.run_dir(run.id))
        assert done.returncode == 0, done.stderr
        events = read_events(store.run_dir(run.id) / "events.jsonl")
        started = next(e for e in events if e["type"] == "started")
        assert started["loss_chunk_tokens"] == chunk
        losses[chunk] = (losses_by_iteration(events, "train", "train_loss"),
                         losses_by_iteration(events, "val", "val_loss"))
    (train_off, val_off), (train_sliced, val_sliced) = losses["off"], losses[16]
    assert len(train_off) == 100 and train_off.keys() == train_sliced.keys()
    for step, loss in train_off.items():
        assert train_sliced[step] == pytest.approx(loss, abs=1e-4), step
    assert val_off.keys() == val_sliced.keys() and val_off
    for step, loss in val_off.items():
        assert val_sliced[step] == pytest.approx(loss, abs=1e-4), step


def test_auto_slices_a_run_where_the_plan_says_it_lowers_the_peak(tiny_model, tmp_path, capsys):
    """The default: the trainer decides as the memory estimate does, and `plan` says what."""
    import json

    from zyquo_tui.cli.main import main as cli_main
    from zyquo_tui.core.runs.settings import SETTINGS
    from zyquo_tui.trainer.sample_model import build_model

    def plan(*args: str) -> str:
        # In this process, with no replica: a replica corrects the peak, not the decision
        # (MemoryAdvisor.with_replica keeps the estimate's loss_chunk_tokens).
        assert cli_main(["plan", *args, "--no-replica"]) == 0
        return capsys.readouterr().out

    big_vocabulary = build_model(tmp_path / "big-vocab", hidden_size=32, vocab_size=151_936)
    # the sample at batch 4 x 64 predictions: one slice, nothing to slice; a Qwen-sized
    # vocabulary at batch 8: the loss sets the peak
    for model, batch, expected in ((tiny_model, 4, "off"), (big_vocabulary, 8, 256)):
        store, run = make_run(model, SAMPLE_DATA / "completions", iters=2, batch_size=batch,
                              steps_per_eval=50, save_every=1000)
        assert SETTINGS["loss_chunk_tokens"].get(run.hyperparameters) == "auto"
        done = run_trainer(store.run_dir(run.id))
        assert done.returncode == 0, done.stderr
        events = read_events(store.run_dir(run.id) / "events.jsonl")
        started = next(e for e in events if e["type"] == "started")
        assert started["loss_chunk_tokens"] == expected, model
        planned = plan("--model", str(model), "--data", str(SAMPLE_DATA / "completions"),
                       "--batch-size", str(batch), "--json")
        assert json.loads(planned)["loss_chunk_tokens"] == expected
    said = plan("--model", str(big_vocabulary), "--batch-size", "8")
    assert "loss in slices of 256 tokens" in said.splitlines()[1]  # the config line


def test_auto_slices_when_the_model_folder_cannot_be_read(tmp_path):
    """The decision needs the model's shape; without it auto takes the smaller footprint (the
    same losses), and a given count or off is kept as it is."""
    from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters
    from zyquo_tui.trainer.objectives import loss_chunk_tokens_for

    settings = Hyperparameters(batch_size=8)
    assert loss_chunk_tokens_for(settings, "lora", str(tmp_path / "gone"), 64) == 256
    for given in (16, "off"):
        SETTINGS["loss_chunk_tokens"].set(settings, given)
        assert loss_chunk_tokens_for(settings, "lora", str(tmp_path / "gone"), 64) == given


@pytest.mark.slow
def test_a_large_vocabulary_trains_to_the_same_losses_over_100_steps(tmp_path):
    """151,936 tokens (a Qwen-sized vocabulary), through the step engine."""
    from functools import partial

    import mlx.optimizers as optim

    from zyquo_tui.trainer import losses
    from zyquo_tui.trainer.chunked_loss import sliced_cross_entropy
    from zyquo_tui.trainer.engine import StepEngine
    from zyquo_tui.trainer.sample_model import build_model

    path = build_model(tmp_path / "big-vocab", hidden_size=32, vocab_size=151_936)
    curves = []
    for sliced_on in (False, True):
        model = _lora_model(path)
        # mlx-lm's default learning rate. The slices' gradient is the whole batch's summed in
        # another order; on fresh random tokens every step, Adam (which rescales every
        # gradient element to a step of about the learning rate) turns that rounding into
        # loss differences of up to 1.5e-4 by step 100 at a learning rate of 1e-4.
        engine = StepEngine(model, optim.Adam(learning_rate=1e-5))
        objective = losses.sft_objective
        if sliced_on:
            objective = partial(objective, sliced=sliced_cross_entropy(model, 16))
        curve = []
        for step in range(100):
            mx.random.seed(100 + step)
            tokens = mx.random.randint(0, 151_936, (2, 24))
            lengths = mx.array([[0, 24], [6, 20]])
            loss, _, _ = engine.forward_backward(objective, tokens, lengths)
            engine.optim_step()
            mx.eval(engine.state, loss)
            curve.append(loss.item())
        curves.append(curve)
    whole, sliced = curves
    assert max(abs(a - b) for a, b in zip(whole, sliced)) <= 1e-4
