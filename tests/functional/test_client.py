"""The step-level client on the sample model with real MLX: every operation, every loss, the
references (mlx-lm for SFT, mlx-lm-lora for DPO and ORPO), the identities, and each defect of
the seed client (../shared/seeds/README.md) with a test that fails on it."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
from conftest import SAMPLE_DATA, run_trainer
from helpers import make_run

from zyquo_tui.client import BatchError, TrainingBatch, TrainingClient
from zyquo_tui.client import worker as mlx_worker

PAIRS = [("What is 2 plus 2?", "2 plus 2 is 4."), ("What is 3 plus 1?", "3 plus 1 is 4."),
         ("What is 5 plus 2?", "5 plus 2 is 7."), ("What is 6 plus 3?", "6 plus 3 is 9.")]
PROMPTS = [p for p, _ in PAIRS]
ANSWERS = [a for _, a in PAIRS]


def on_mlx(fn, *args):
    """Run fn on the client's MLX thread (MLX's streams belong to the thread that made them)."""
    return mlx_worker.submit(fn, *args).result()


def weights_of(client) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in client.get_weights().result().weights.items()}


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


@pytest.fixture
def client(tiny_model):
    made = TrainingClient.from_model(tiny_model, method="lora", learning_rate=1e-3,
                                     num_layers=-1)
    yield made
    made.close()


def sft_batch(rows=PAIRS, **options) -> TrainingBatch:
    return TrainingBatch([p for p, _ in rows], [a for _, a in rows], **options)


# -- settings --------------------------------------------------------------------------------------

def test_from_model_checks_settings_as_runs_new_does(tiny_model, tiny_model_4bit):
    with pytest.raises(ValueError, match="learning_rate"):
        TrainingClient.from_model(tiny_model, learning_rate=-1)
    with pytest.raises(ValueError, match="qlora needs a quantized base model"):
        TrainingClient.from_model(tiny_model, method="qlora")
    with pytest.raises(ValueError, match="'rnak' is not a run setting"):
        TrainingClient.from_model(tiny_model, rnak=8)
    with pytest.raises(ValueError, match="No model"):
        TrainingClient.from_model(tiny_model.parent / "nowhere")
    with TrainingClient.from_model(tiny_model_4bit, rank=4) as quantized:
        assert quantized.method.value == "qlora"  # lora on a quantized base is qlora
        assert quantized.settings.rank == 4
        assert quantized.settings.learning_rate == 1e-5  # the run default


# -- SFT ----------------------------------------------------------------------------------------

MLX_LM_TRAIN = textwrap.dedent("""
    import json, sys, types
    import numpy as np
    from mlx_lm import load
    from mlx_lm.lora import CONFIG_DEFAULTS, train_model
    from mlx_lm.tuner.callbacks import TrainingCallback
    from mlx_lm.tuner.datasets import load_dataset

    args = types.SimpleNamespace(**{**CONFIG_DEFAULTS, **json.loads(sys.argv[1])})
    losses = []

    class Record(TrainingCallback):
        def on_train_loss_report(self, info):
            losses.append(info["train_loss"])

    np.random.seed(args.seed)
    model, tokenizer = load(args.model)
    train_set, valid_set, _ = load_dataset(args, tokenizer)
    train_model(args, model, train_set, valid_set, Record())
    print(json.dumps(losses))
""")


@pytest.mark.parametrize("mask_prompt", [True, False])
def test_sft_through_the_client_equals_mlx_lm_train(tiny_model, tmp_path, mask_prompt):
    # One batch of four rows is the whole dataset, so mlx-lm trains on it at every step.
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(
        json.dumps({"prompt": p, "completion": a}) + "\n" for p, a in PAIRS))
    config = {"model": str(tiny_model), "data": str(data), "train": True, "iters": 6,
              "batch_size": 4, "learning_rate": 1e-3, "num_layers": -1, "steps_per_report": 1,
              "steps_per_eval": 1000, "val_batches": 0, "save_every": 1000,
              "mask_prompt": mask_prompt, "adapter_path": str(tmp_path / "adapters")}
    done = subprocess.run([sys.executable, "-c", MLX_LM_TRAIN, json.dumps(config)],
                          capture_output=True, text=True, timeout=300, check=True,
                          stdin=subprocess.DEVNULL)
    theirs = json.loads(done.stdout.strip().splitlines()[-1])

    with TrainingClient.from_model(tiny_model, method="lora", learning_rate=1e-3,
                                   num_layers=-1) as client:
        ours = []
        for _ in range(6):
            ours.append(client.forward_backward(sft_batch(train_on_prompt=not mask_prompt)
                                                ).result().loss)
            client.optim_step().result()
    assert len(theirs) == 6
    assert ours == pytest.approx(theirs, abs=1e-5)
    assert ours[-1] < ours[0] - 0.5  # it learned


def test_two_half_batches_then_one_step_equal_one_whole_batch(tiny_model):
    # Seed defect: accumulation kept only the first batch's gradients.
    whole, halves = (TrainingClient.from_model(tiny_model, optimizer="sgd", learning_rate=0.1,
                                               num_layers=-1) for _ in range(2))
    try:
        first = halves.forward_backward(sft_batch(PAIRS[:2])).result()
        second = halves.forward_backward(sft_batch(PAIRS[2:])).result()
        assert first.num_tokens == second.num_tokens  # mlx-lm's averaging needs equal halves
        halves.optim_step().result()
        whole.forward_backward(sft_batch(PAIRS)).result()
        whole.optim_step().result()
        assert max_difference(weights_of(whole), weights_of(halves)) < 1e-6
    finally:
        whole.close()
        halves.close()


def test_accumulated_steps_keep_a_bfloat16_model_in_bfloat16(tiny_model, tmp_path):
    """Full fine-tuning of a bfloat16 model over two forward_backward calls and one step:
    the weights and adam's moments stay bfloat16 (the average's divisor once made the
    gradients float32, and through the optimizer the weights and moments, doubling them)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from zyquo_tui.trainer.sample_model import build_model

    model = build_model(tmp_path / "bf16", dtype="bfloat16", tokenizer_dir=tiny_model)
    client = TrainingClient.from_model(model, method="full", learning_rate=1e-3, num_layers=-1)
    try:
        client.forward_backward(sft_batch(PAIRS[:2])).result()
        client.forward_backward(sft_batch(PAIRS[2:])).result()
        client.optim_step().result()

        def dtypes():
            engine = client.engine
            weights = {v.dtype for _, v in tree_flatten(engine.model.trainable_parameters())}
            state = {v.dtype for k, v in tree_flatten(engine.optimizer.state)
                     if k.endswith((".m", ".v"))}
            return weights, state
        weights, state = on_mlx(dtypes)
        assert weights == {mx.bfloat16} and state == {mx.bfloat16}
    finally:
        client.close()


def test_first_batch_only_would_differ(tiny_model):
    """The check above can fail: a step on the first half alone lands elsewhere."""
    with TrainingClient.from_model(tiny_model, optimizer="sgd", learning_rate=0.1,
                                   num_layers=-1) as one, \
         TrainingClient.from_model(tiny_model, optimizer="sgd", learning_rate=0.1,
                                   num_layers=-1) as whole:
        one.forward_backward(sft_batch(PAIRS[:2])).result()
        one.optim_step().result()
        whole.forward_backward(sft_batch(PAIRS)).result()
        whole.optim_step().result()
        assert max_difference(weights_of(whole), weights_of(one)) > 1e-4


def test_grad_norm_is_the_norm_of_the_applied_gradient(tiny_model):
    # Seed defect: grad_norm was always None. With plain SGD, Δw = -lr · g.
    with TrainingClient.from_model(tiny_model, optimizer="sgd", learning_rate=0.1,
                                   num_layers=-1) as client:
        before = weights_of(client)
        client.forward_backward(sft_batch()).result()
        step = client.optim_step().result()
        after = weights_of(client)
    moved = math.sqrt(sum(float(((after[k] - before[k]) ** 2).sum()) for k in before))
    assert step.step == 1 and step.learning_rate == pytest.approx(0.1)
    assert isinstance(step.grad_norm, float) and step.grad_norm > 0
    assert step.grad_norm == pytest.approx(moved / 0.1, rel=1e-3)


def test_optim_step_reports_the_scheduled_rate_that_step_applied(tiny_model):
    """With a schedule, step k applies schedule(k - 1) (MLX writes it into the optimizer's
    state inside the update): reported both with optim_step submitted before the wait
    (compiled with its forward_backward) and after it (compiled apart). With plain SGD the
    weights move by exactly that rate times the gradient."""
    schedule = {"name": "linear_schedule", "arguments": [0.04, 0.01, 3], "warmup": 0}
    expected = [0.04, 0.03, 0.02, 0.01]  # schedule(0) .. schedule(3)
    for together in (True, False):
        with TrainingClient.from_model(tiny_model, optimizer="sgd", lr_schedule=schedule,
                                       num_layers=-1) as client:
            rates = []
            for _ in expected:
                before = weights_of(client)
                loss = client.forward_backward(sft_batch())
                if not together:
                    loss.result()
                step = client.optim_step().result()
                moved = math.sqrt(sum(float(((weights_of(client)[k] - before[k]) ** 2).sum())
                                      for k in before))
                assert moved / step.grad_norm == pytest.approx(step.learning_rate, rel=1e-3)
                rates.append(step.learning_rate)
            assert rates == pytest.approx(expected, rel=1e-6), f"together={together}"


def test_an_optim_step_submitted_before_waiting_is_compiled_with_its_forward_backward(
        tiny_model):
    """forward_backward, then optim_step, then wait: the engine compiles the two as one step,
    as a run's step is (less memory: docs/memory.md). Waiting on the forward_backward first
    compiles them apart. Same weights, norms and learning rates, over two steps (the moments
    carry over), and with accumulation submitted the same way."""
    with TrainingClient.from_model(tiny_model, method="full", learning_rate=1e-3) as apart, \
         TrainingClient.from_model(tiny_model, method="full", learning_rate=1e-3) as together:
        together_steps, apart_steps = [], []
        for rows in (PAIRS[:2], PAIRS[2:]):
            loss = together.forward_backward(sft_batch(rows))
            assert repr(loss) == "<Future pending>"  # printing it does not make it run alone
            together_steps.append(together.optim_step().result())
            assert loss.done() and loss.result().num_tokens > 0
            apart.forward_backward(sft_batch(rows)).result()
            apart_steps.append(apart.optim_step().result())
        assert on_mlx(lambda: together.engine._steps) and not on_mlx(
            lambda: apart.engine._steps)  # the compiled-together path ran, and only there
        assert max_difference(weights_of(together), weights_of(apart)) == 0.0
        assert [s.grad_norm for s in together_steps] == [s.grad_norm for s in apart_steps]
        assert [s.learning_rate for s in together_steps] == [s.learning_rate
                                                            for s in apart_steps]
        assert [s.step for s in together_steps] == [1, 2]
        # Two forward_backward calls then the step: accumulated, never compiled with it.
        together.forward_backward(sft_batch(PAIRS[:2]))
        together.forward_backward(sft_batch(PAIRS[2:]))
        accumulated = together.optim_step()
        apart.forward_backward(sft_batch(PAIRS[:2])).result()
        apart.forward_backward(sft_batch(PAIRS[2:])).result()
        assert accumulated.result().grad_norm == apart.optim_step().result().grad_norm
        assert max_difference(weights_of(together), weights_of(apart)) == 0.0


def test_the_engine_refuses_a_second_forward_backward_after_an_applied_one(tiny_model):
    """The run trainer sets update_with_next itself (trainer/loop.py): a forward_backward
    whose update is applied, then another before optim_step, would lose its gradients."""
    with TrainingClient.from_model(tiny_model, method="full", learning_rate=1e-3) as client:
        on_mlx(client._forward_backward, sft_batch(PAIRS[:2]), True)
        with pytest.raises(RuntimeError, match="call optim_step"):
            on_mlx(client._forward_backward, sft_batch(PAIRS[2:]))
        assert client.optim_step().result().step == 1


def test_a_non_finite_step_compiled_with_its_update_leaves_nothing_behind(tiny_model):
    """A batch whose loss is not finite raises, and its update is kept out of the weights and
    the optimizer's moments: after the weights are set back, the next step is the one a client
    that never saw that batch takes."""
    import mlx.core as mx

    with TrainingClient.from_model(tiny_model, learning_rate=1e-2, num_layers=-1) as hit, \
         TrainingClient.from_model(tiny_model, learning_rate=1e-2, num_layers=-1) as clean:
        start = hit.get_weights().result().weights
        name = next(k for k in start if k.endswith("lora_b"))
        broken = dict(start)
        broken[name] = on_mlx(lambda: mx.add(start[name], float("inf")))  # on its thread
        hit.set_weights(broken).result()
        failed = hit.forward_backward(sft_batch())
        step = hit.optim_step()
        with pytest.raises(FloatingPointError, match="gradients were discarded"):
            failed.result()
        with pytest.raises(RuntimeError, match="no gradients"):
            step.result()
        assert on_mlx(lambda: hit.engine._steps)  # it was compiled with its update
        assert not np.isfinite(weights_of(hit)[name]).all()  # as set, not updated
        hit.set_weights(start).result()
        for client in (hit, clean):
            client.forward_backward(sft_batch())
            client.optim_step().result()
        assert max_difference(weights_of(hit), weights_of(clean)) == 0.0


def test_a_waiting_forward_backward_runs_when_looked_at(client):
    """It waits on the worker for the next operation; looking at its future runs it, and so
    does any other operation or closing the client."""
    polled = client.forward_backward(sft_batch())
    deadline = time.monotonic() + 120
    while not polled.done():  # done() alone must get it run
        assert time.monotonic() < deadline, "a polled forward_backward never ran"
        time.sleep(0.01)
    client.optim_step().result()
    before = client.forward_backward(sft_batch())
    weights = client.get_weights()  # another operation runs it first, alone
    assert weights.result().weights and before.done() and before.result().loss > 0
    assert client.optim_step().result().step == 2
    chained = client.forward_backward(sft_batch()).then(lambda r: r.loss)
    client.close()
    assert chained.result(timeout=120) > 0


def test_text_rows_without_responses_train_every_token(client):
    # Seed defect: no responses zipped into nothing and a loss of 0.0.
    result = client.forward_backward(TrainingBatch(["The sky is blue.", "Two and two."])).result()
    assert result.loss > 1.0 and result.num_tokens > 6


def test_chat_messages_render_as_the_plain_prompt(client):
    plain = client.forward_backward(sft_batch(PAIRS[:1])).result()
    chat = client.forward_backward(TrainingBatch(
        [[{"role": "user", "content": PROMPTS[0]}]],
        [[{"role": "assistant", "content": ANSWERS[0]}]])).result()
    assert chat.loss == pytest.approx(plain.loss, abs=1e-6)
    assert chat.num_tokens == plain.num_tokens


def test_long_rows_are_cut_with_a_warning(client):
    with pytest.warns(UserWarning, match="longer than max_seq_len"):
        result = client.forward_backward(sft_batch(PAIRS[:1], max_seq_len=8,
                                                   train_on_prompt=True)).result()
    assert result.num_tokens == 7


# -- errors --------------------------------------------------------------------------------------

def test_bad_batches_raise_one_sentence():
    # Seed defect: zip() silently truncated prompts and responses of different lengths.
    with pytest.raises(BatchError, match="responses has 1 entries and prompts has 2"):
        TrainingBatch(["a", "b"], ["c"])
    with pytest.raises(BatchError, match="needs rejected_responses"):
        TrainingBatch(["a"], ["b"], loss_type="dpo")
    with pytest.raises(BatchError, match="needs advantages"):
        TrainingBatch(["a"], ["b"], loss_type="reinforce")
    with pytest.raises(BatchError, match="advantages has 1 entries"):
        TrainingBatch(["a", "b"], ["c", "d"], advantages=[1.0], loss_type="grpo")
    with pytest.raises(BatchError, match="not a single string"):
        TrainingBatch("a", "b")
    with pytest.raises(BatchError, match="'gamma'"):
        TrainingBatch(["a"], ["b"], ["c"], loss_type="dpo", extra={"gamma": 1})
    with pytest.raises(BatchError, match="variant"):
        TrainingBatch(["a"], ["b"], ["c"], loss_type="dpo", extra={"variant": "nope"})
    with pytest.raises(BatchError, match="teacher"):
        TrainingBatch(["a"], ["b"], loss_type="distill")
    with pytest.raises(BatchError, match="loss_type 'ppo'"):
        TrainingBatch(["a"], ["b"], loss_type="ppo")


def test_failures_raise_from_the_future(client, tmp_path):
    # Seed defect: failures came back as success=False or as a false success.
    with pytest.raises(RuntimeError, match="call forward_backward first"):
        client.optim_step().result()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        client.load_state(tmp_path / "empty").result()
    with pytest.raises(BatchError, match="takes a TrainingBatch"):
        client.forward_backward({"prompts": ["a"]})


def test_a_closed_client_refuses_work(tiny_model):
    client = TrainingClient.from_model(tiny_model)
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.optim_step()


# -- futures -----------------------------------------------------------------------------------

def test_futures_run_in_submission_order_and_chain(client):
    first = client.forward_backward(sft_batch())
    step = client.optim_step()
    second = client.forward_backward(sft_batch())
    assert second.result(timeout=120).loss < first.result().loss  # the step came in between
    assert step.done() and step.result().step == 1
    # A continuation runs off the MLX thread, so it may wait on more operations.
    chained = second.then(lambda r: (r.loss, client.optim_step().result().step))
    loss, steps = chained.result(timeout=120)
    assert loss == second.result().loss and steps == 2
    failing = client.optim_step().then(lambda r: r.step)
    with pytest.raises(RuntimeError, match="no gradients"):
        failing.result(timeout=120)


def test_a_wait_on_a_continuation_runs_the_waiting_forward_backward(client):
    """No operation follows the forward_backward: waiting on a continuation of it (chained
    once or twice, or awaited) runs it, as waiting on its own future does, instead of waiting
    for an optim_step that never comes."""
    assert client.forward_backward(sft_batch()).then(lambda r: r.loss).result(timeout=120) > 0
    assert client.optim_step().result().step == 1
    twice = client.forward_backward(sft_batch()).then(lambda r: r.num_tokens).then(str)
    assert twice.result(timeout=120).isdigit()
    assert client.optim_step().result().step == 2

    async def awaited():
        tokens = await asyncio.wait_for(
            client.forward_backward(sft_batch()).then(lambda r: r.num_tokens), 120)
        step = await asyncio.wait_for(client.optim_step(), 120)
        return tokens, step.step

    tokens, steps = asyncio.run(awaited())
    assert tokens > 0 and steps == 3


OPEN_CLIENTS_AT_EXIT = textwrap.dedent("""
    import sys
    from zyquo_tui.client import TrainingBatch, TrainingClient

    batch = TrainingBatch(["What is 2 plus 2?"], ["2 plus 2 is 4."])
    clients = [TrainingClient.from_model(sys.argv[1], learning_rate=1e-3) for _ in range(3)]
    for client in clients:  # none closed, and work still queued when the script ends
        client.forward_backward(batch)
        client.optim_step()
        client.forward_backward(batch)
        client.sample(["What is"], max_tokens=8)
    print("done")
""")


def test_a_script_that_leaves_clients_open_exits_0_every_time(tiny_model):
    """mlx 0.32 aborts the process at exit (134, "terminate called without an active
    exception") when the clients' MLX thread still runs, or ends too late: the exit hook closes
    the clients and joins the thread. Eight runs, two at a time: on a busy 2-core machine this
    script aborted in 37 of 48 runs without the exit hook (2 of 6 in the worst batch), and in
    every run without the thread's clear_streams (32 of 32) or without the join (6 of 6). Eight
    runs miss a missing hook about once in 10^5 at that rate (once in 25 at the worst
    batch's)."""
    def start():
        return subprocess.Popen([sys.executable, "-c", OPEN_CLIENTS_AT_EXIT, str(tiny_model)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    outcomes = []
    for _ in range(4):
        pair = [start(), start()]
        for process in pair:
            out, err = process.communicate(timeout=300)
            outcomes.append((process.returncode, out.strip(), err.strip()[-300:]))
    assert [code for code, _, _ in outcomes] == [0] * 8, outcomes
    assert all(out == "done" and "terminate" not in err for _, out, err in outcomes)


# -- state --------------------------------------------------------------------------------------

def test_save_then_load_resumes_exactly(tiny_model, tmp_path):
    # Seed defect: load_state restored the step counter only. Dropout makes the RNG matter,
    # and a pending forward_backward is saved with the state.
    settings = {"learning_rate": 1e-3, "num_layers": -1, "lora_dropout": 0.1}
    with TrainingClient.from_model(tiny_model, **settings) as straight:
        for _ in range(3):
            straight.forward_backward(sft_batch()).result()
            straight.optim_step().result()
        straight.forward_backward(sft_batch(PAIRS[:2])).result()
        saved = straight.save_state(tmp_path / "state", {"epoch": 1}).result()
        straight.forward_backward(sft_batch(PAIRS[2:])).result()
        straight.optim_step().result()
        expected = [straight.forward_backward(sft_batch()).result().loss]
        expected.append(straight.optim_step().result().grad_norm)
        expected_weights = weights_of(straight)
    assert saved.step == 3 and (tmp_path / "state" / "adapter_config.json").is_file()

    with TrainingClient.from_model(tiny_model, **settings) as resumed:
        loaded = resumed.load_state(tmp_path / "state").result()
        assert loaded.step == 3 and loaded.metadata == {"epoch": 1}
        resumed.forward_backward(sft_batch(PAIRS[2:])).result()
        resumed.optim_step().result()
        got = [resumed.forward_backward(sft_batch()).result().loss]
        got.append(resumed.optim_step().result().grad_norm)
        assert got == pytest.approx(expected, rel=1e-6)
        assert max_difference(weights_of(resumed), expected_weights) < 1e-7


@pytest.mark.parametrize(("method", "settings", "message"), [
    ("lora", {"rank": 4},
     r"adapters have rank 8 and this model's have rank 4; make the client \(or run\) with rank=8"),
    ("dora", {}, r"holds LoRA weights and this model is trained by DoRA; .* method=lora"),
    ("full", {}, r"holds LoRA weights and this model is trained by full fine-tuning"),
    ("lora", {"num_layers": 1}, r"weights this model does not train .* num_layers"),
])
def test_load_state_refuses_a_checkpoint_of_another_rank_method_or_layers(
        tiny_model, tmp_path, method, settings, message):
    """load_weights(strict=False) skips every shape check: a checkpoint of another rank or
    method would load silently. It raises one sentence instead, and leaves the client as it
    was."""
    with TrainingClient.from_model(tiny_model, learning_rate=1e-3, num_layers=-1) as saver:
        saver.forward_backward(sft_batch())
        saver.optim_step().result()
        saver.save_state(tmp_path / "state").result()
    with TrainingClient.from_model(tiny_model, method, learning_rate=1e-3,
                                   **{"num_layers": -1, **settings}) as other:
        before = weights_of(other)
        with pytest.raises(ValueError, match=message) as raised:
            other.load_state(tmp_path / "state").result()
        assert str(tmp_path / "state" / "0000001_adapters.safetensors") in str(raised.value)
        assert str(raised.value).count(". ") == 0  # one sentence
        assert other.step == 0 and max_difference(weights_of(other), before) == 0


def test_a_runs_checkpoint_loads_into_a_client(tiny_model):
    store, run = make_run(tiny_model, SAMPLE_DATA / "completions", iters=10, save_every=5,
                          steps_per_eval=1000)
    assert run_trainer(store.run_dir(run.id)).returncode == 0
    adapters = store.adapters_dir(run.id)
    with TrainingClient.from_model(tiny_model, learning_rate=1e-3, num_layers=-1,
                                   batch_size=4) as client:
        assert client.load_state(adapters, step=5).result().step == 5
        loaded = weights_of(client)

        def saved_weights():
            import mlx.core as mx
            return {k: np.array(v) for k, v in
                    mx.load(str(adapters / "0000005_adapters.safetensors")).items()}

        assert max_difference(loaded, on_mlx(saved_weights)) == 0
        assert on_mlx(lambda: int(client.engine.optimizer.state["step"].item())) == 5
        client.forward_backward(sft_batch()).result()
        assert client.optim_step().result().step == 6


def test_get_and_set_weights(tiny_model, client):
    for _ in range(2):
        client.forward_backward(sft_batch()).result()
        client.optim_step().result()
    trained = client.get_weights().result()
    assert trained.step == 2 and all("lora" in name for name in trained.weights)
    with TrainingClient.from_model(tiny_model, learning_rate=1e-3, num_layers=-1) as other:
        before = other.forward_backward(sft_batch()).result().loss
        other.set_weights(trained).result()
        after = other.forward_backward(sft_batch()).result().loss
        assert after == pytest.approx(client.forward_backward(sft_batch()).result().loss,
                                      abs=1e-6)
        assert after < before
        with pytest.raises(KeyError, match="not a trainable weight"):
            other.set_weights({"nope": trained.weights[next(iter(trained.weights))]}).result()


# -- sampling -----------------------------------------------------------------------------------

def test_sample_is_repeatable_and_leaves_training_as_it_was(tiny_model):
    settings = {"learning_rate": 1e-3, "num_layers": -1, "lora_dropout": 0.1}
    with TrainingClient.from_model(tiny_model, **settings) as plain, \
         TrainingClient.from_model(tiny_model, **settings) as sampling:
        losses = {"plain": [], "sampling": []}
        for name, client in (("plain", plain), ("sampling", sampling)):
            for _ in range(3):
                losses[name].append(client.forward_backward(sft_batch()).result().loss)
                client.optim_step().result()
                if name == "sampling":
                    client.sample(PROMPTS[:2], max_tokens=8, temperature=1.0, seed=1).result()
        assert losses["plain"] == losses["sampling"]
        one = sampling.sample(PROMPTS[:2], max_tokens=8, temperature=1.0, seed=7).result()
        two = sampling.sample(PROMPTS[:2], max_tokens=8, temperature=1.0, seed=7).result()
        assert one.texts == two.texts and len(one.texts) == 2
        assert all(len(t) == len(lp) for t, lp in zip(one.tokens, one.logprobs, strict=True))
        assert all(-50 < lp <= 0 for row in one.logprobs for lp in row)
        chat = sampling.sample([[{"role": "user", "content": PROMPTS[0]}]], max_tokens=8).result()
        greedy = sampling.sample(PROMPTS[:1], max_tokens=8).result()
        assert chat.texts == greedy.texts


# -- preference losses ----------------------------------------------------------------------------

PREFERENCE = [("What is 8 minus 3?", "8 minus 3 is 5.", "8 minus 3 is 6."),
              ("What is 7 plus 5?", "7 plus 5 is 12.", "7 plus 5 is 13.")]


def preference_batch(loss_type, **extra) -> TrainingBatch:
    return TrainingBatch([p for p, _, _ in PREFERENCE], [c for _, c, _ in PREFERENCE],
                         [r for _, _, r in PREFERENCE], loss_type=loss_type, extra=extra or None)


def test_dpo_at_step_zero_is_ln_2(client):
    result = client.forward_backward(preference_batch("dpo")).result()
    assert result.loss == pytest.approx(math.log(2), abs=1e-6)
    assert result.metrics["reward_margin"] == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize("method", ["dora", "qlora", "full"])
def test_dpo_at_step_zero_is_ln_2_for_every_method(tiny_model, tiny_model_4bit, method):
    # dora and qlora switch their adapters off for the reference; full loads a frozen copy.
    model = tiny_model_4bit if method == "qlora" else tiny_model
    with TrainingClient.from_model(model, method=method, num_layers=1,
                                   learning_rate=1e-4) as client:
        first = client.forward_backward(preference_batch("dpo")).result()
        assert first.loss == pytest.approx(math.log(2), abs=1e-6)
        client.optim_step().result()
        assert client.forward_backward(preference_batch("dpo")).result().loss < first.loss


def test_dpo_learns_the_preference(client):
    first = client.forward_backward(preference_batch("dpo", beta=0.5)).result()
    for _ in range(8):
        client.optim_step().result()
        last = client.forward_backward(preference_batch("dpo", beta=0.5)).result()
    assert last.loss < first.loss
    assert last.metrics["reward_margin"] > 0 and last.metrics["reward_accuracy"] == 1.0


MLX_LM_LORA_DPO = """
def reference_losses(model, base, tokenizer, rows, beta, variant):
    import mlx.core as mx
    from mlx_lm_lora.trainer.dpo_trainer import compute_score, dpo_loss, get_token_scores
    from zyquo_tui.trainer.encoding import encode_row, pad_rows

    def arrays(side):
        encoded = [encode_row(tokenizer, p, r, False) for p, r in side]
        tokens, lengths, _ = pad_rows(encoded, 2048)
        mask = mx.zeros(tokens.shape)
        spans = lengths.tolist()
        mask = mx.array([[1.0 if off <= j < ln else 0.0 for j in range(tokens.shape[1])]
                         for off, ln in spans])
        return tokens, mask

    chosen, chosen_mask = arrays([(p, c) for p, c, _ in rows])
    rejected, rejected_mask = arrays([(p, r) for p, _, r in rows])
    score = lambda m, x, k: compute_score(get_token_scores(m, x, k), k, variant)
    loss, reward, _, metrics = dpo_loss(
        score(model, chosen, chosen_mask), score(model, rejected, rejected_mask),
        score(base, chosen, chosen_mask), score(base, rejected, rejected_mask),
        chosen_mask, rejected_mask, beta, 0.0, variant)
    return loss.item(), reward.tolist()
"""


@pytest.mark.parametrize("variant", ["sigmoid", "ipo", "hinge"])
def test_dpo_equals_mlx_lm_lora(tiny_model, client, variant):
    namespace: dict = {}
    exec(MLX_LM_LORA_DPO, namespace)  # noqa: S102 - the reference, in the test's own text
    for _ in range(3):  # move the policy away from the reference first
        client.forward_backward(sft_batch()).result()
        client.optim_step().result()
    ours = client.forward_backward(preference_batch("dpo", beta=0.2, variant=variant)).result()

    def theirs():
        from mlx_lm import load
        base, _ = load(str(tiny_model))
        return namespace["reference_losses"](client.engine.model, base, client.tokenizer,
                                             PREFERENCE, 0.2, variant)

    loss, (chosen_reward, rejected_reward) = on_mlx(theirs)
    assert ours.loss == pytest.approx(loss, rel=1e-5, abs=1e-6)
    # mlx-lm-lora reports rewards as batch means, as ours are (its accuracy compares the means,
    # ours is per row: not compared).
    assert ours.metrics["chosen_reward"] == pytest.approx(chosen_reward, rel=1e-5, abs=1e-6)
    assert ours.metrics["rejected_reward"] == pytest.approx(rejected_reward, rel=1e-5,
                                                            abs=1e-6)


def test_orpo_equals_mlx_lm_lora(client):
    for _ in range(2):
        client.forward_backward(sft_batch()).result()
        client.optim_step().result()
    ours = client.forward_backward(preference_batch("orpo", beta=0.3)).result()

    def theirs():
        import mlx.core as mx
        from mlx_lm_lora.trainer.orpo_trainer import get_logps, orpo_loss

        from zyquo_tui.trainer.encoding import encode_row, pad_rows

        def arrays(side):
            encoded = [encode_row(client.tokenizer, p, r, False) for p, r in side]
            tokens, lengths, _ = pad_rows(encoded, 2048)
            mask = mx.array([[1.0 if off <= j < ln else 0.0 for j in range(tokens.shape[1])]
                             for off, ln in lengths.tolist()])
            return tokens, mask

        model = client.engine.model
        chosen, cmask = arrays([(p, c) for p, c, _ in PREFERENCE])
        rejected, rmask = arrays([(p, r) for p, _, r in PREFERENCE])
        c_logp, c_mean = get_logps(model, chosen, cmask)
        r_logp, r_mean = get_logps(model, rejected, rmask)
        loss, reward, _, _ = orpo_loss(c_logp, c_mean, r_logp, r_mean, cmask, rmask,
                                       mx.array(1.0), beta=0.3)
        return loss.item(), reward.tolist()

    loss, (chosen_reward, rejected_reward) = on_mlx(theirs)
    assert ours.loss == pytest.approx(loss, rel=1e-5)
    assert ours.metrics["chosen_reward"] == pytest.approx(chosen_reward, rel=1e-5)
    assert ours.metrics["rejected_reward"] == pytest.approx(rejected_reward, rel=1e-5)


# -- RL -------------------------------------------------------------------------------------------

def rl_batch(advantages, loss_type="reinforce"):
    return TrainingBatch(PROMPTS[:2], ANSWERS[:2], advantages=advantages, loss_type=loss_type)


def test_zero_advantages_change_no_weight(tiny_model):
    # Seed defect: advantages scaled the reported loss after the gradients were taken.
    with TrainingClient.from_model(tiny_model, optimizer="sgd", learning_rate=0.5,
                                   num_layers=-1) as client:
        before = weights_of(client)
        result = client.forward_backward(rl_batch([0.0, 0.0])).result()
        step = client.optim_step().result()
        assert result.loss == 0 and step.grad_norm == 0
        assert max_difference(weights_of(client), before) == 0


def test_zero_advantages_still_move_the_weights_under_adam(tiny_model):
    """What docs/client.md says: with Adam (the default), a step on all-zero advantages moves
    the weights once the moments hold an earlier step's gradient. The caller skips it by
    submitting neither the batch nor the step: optim_step with nothing pending raises and
    changes nothing."""
    with TrainingClient.from_model(tiny_model, learning_rate=1e-3, num_layers=-1) as client:
        client.forward_backward(sft_batch()).result()
        client.optim_step().result()
        before = weights_of(client)
        result = client.forward_backward(rl_batch([0.0, 0.0])).result()
        step = client.optim_step().result()
        assert result.loss == 0 and step.grad_norm == 0
        moved = weights_of(client)
        assert max_difference(moved, before) > 1e-5  # momentum
        with pytest.raises(RuntimeError, match="no gradients to apply"):
            client.optim_step().result()
        assert client.step == 2 and max_difference(weights_of(client), moved) == 0


def test_advantages_weigh_the_gradient(tiny_model):
    norms = {}
    for scale in (1.0, 2.0):
        with TrainingClient.from_model(tiny_model, optimizer="sgd", learning_rate=0.1,
                                       num_layers=-1) as client:
            client.forward_backward(rl_batch([scale, 0.0])).result()
            norms[scale] = client.optim_step().result().grad_norm
    assert norms[2.0] == pytest.approx(2 * norms[1.0], rel=1e-4)


def test_reinforce_raises_the_likelihood_of_rewarded_answers(client):
    batch = rl_batch([1.0, -1.0])
    first = client.forward_backward(batch).result()
    for _ in range(5):
        client.optim_step().result()
        client.forward_backward(batch).result()
    # The rewarded answer's likelihood rose, the punished one's fell.
    with_reward = client.forward_backward(sft_batch(PAIRS[:1])).result().loss
    assert first.loss != 0
    with TrainingClient.from_model(client.model_path, num_layers=-1) as fresh:
        assert with_reward < fresh.forward_backward(sft_batch(PAIRS[:1])).result().loss


def test_grpo_normalizes_advantages_within_each_prompts_group(tiny_model):
    from zyquo_tui.trainer.losses import group_normalized

    assert group_normalized([1.0, 3.0, 5.0, 5.0], [0, 0, 1, 1]) == pytest.approx(
        [-1.0, 1.0, 0.0, 0.0], abs=1e-5)
    same = TrainingBatch([PROMPTS[0]] * 2, ANSWERS[:2], advantages=[10.0, 12.0],
                         loss_type="grpo")
    shifted = TrainingBatch([PROMPTS[0]] * 2, ANSWERS[:2], advantages=[0.0, 2.0],
                            loss_type="grpo")
    with TrainingClient.from_model(tiny_model, num_layers=-1) as client:
        assert client.forward_backward(same).result().loss == pytest.approx(
            client.forward_backward(shifted).result().loss, abs=1e-6)


# -- distillation ---------------------------------------------------------------------------------

def test_distilling_a_model_from_itself_has_kl_zero(tiny_model, client):
    batch = TrainingBatch(PROMPTS, ANSWERS, loss_type="distill",
                          extra={"teacher": str(tiny_model), "temperature": 2.0})
    assert client.forward_backward(batch).result().loss == pytest.approx(0, abs=1e-5)


def test_a_teacher_with_another_tokenizer_is_refused_in_one_sentence(tiny_model, client,
                                                                   tmp_path):
    other = tmp_path / "other-vocabulary"
    shutil.copytree(tiny_model, other)
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = list(vocab)[-2:]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # same shapes, another vocabulary
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    batch = TrainingBatch(PROMPTS, ANSWERS, loss_type="distill", extra={"teacher": str(other)})
    with pytest.raises(ValueError, match=r"has another tokenizer than the student; .* \(Or "
                                         r"give teacher_logprobs instead\.\)"):
        client.forward_backward(batch).result()
    assert client.forward_backward(sft_batch()).result().loss > 0  # the client goes on


def test_distillation_uses_the_teachers_logprobs(tiny_model, client):
    # Seed defect: the teacher's log-probabilities were never used. Train the client away from
    # the base, then distill it back: the KL is positive and falls.
    for _ in range(4):
        client.forward_backward(sft_batch()).result()
        client.optim_step().result()
    batch = TrainingBatch(PROMPTS, ANSWERS, loss_type="distill",
                          extra={"teacher": str(tiny_model)})
    first = client.forward_backward(batch).result().loss
    for _ in range(4):
        client.optim_step().result()
        last = client.forward_backward(batch).result().loss
    assert first > 1e-3 and last < first


def test_teacher_top_k_logprobs_over_the_whole_vocabulary_equal_the_teacher_model(tiny_model,
                                                                                client):
    for _ in range(2):
        client.forward_backward(sft_batch()).result()
        client.optim_step().result()

    def teacher_top_k():
        """The base's log-probabilities of every token, per response token, as given ones."""
        import mlx.core as mx
        from mlx_lm import load

        from zyquo_tui.trainer.encoding import encode_row
        base, tokenizer = load(str(tiny_model))
        rows = []
        for prompt, answer in PAIRS[:2]:
            tokens, offset = encode_row(tokenizer, prompt, answer, False)
            logits = base(mx.array([tokens[:-1]]))[0].astype(mx.float32)
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            rows.append([dict(enumerate(logprobs[j].tolist()))
                         for j in range(offset - 1, len(tokens) - 1)])
        return rows

    given = TrainingBatch(PROMPTS[:2], ANSWERS[:2], loss_type="distill",
                          extra={"teacher_logprobs": on_mlx(teacher_top_k)})
    model = TrainingBatch(PROMPTS[:2], ANSWERS[:2], loss_type="distill",
                          extra={"teacher": str(tiny_model)})
    assert client.forward_backward(given).result().loss == pytest.approx(
        client.forward_backward(model).result().loss, rel=1e-4)
    with pytest.raises(BatchError, match="entries and row 0 has"):
        client.forward_backward(TrainingBatch(
            PROMPTS[:2], ANSWERS[:2], loss_type="distill",
            extra={"teacher_logprobs": [[{1: -0.1}], [{1: -0.1}]]})).result()


def test_sliced_distillation_takes_the_teacher_a_slice_at_a_time(tiny_model, client):
    """With the student's loss sliced, the teacher's full-vocabulary log-probabilities are made
    a slice at a time from its last hidden states too: the same loss and gradients as from the
    teacher's whole-batch log-probabilities (1e-5)."""
    from functools import partial

    for _ in range(2):  # move the student off the teacher: a KL and gradients worth comparing
        client.forward_backward(sft_batch()).result()
        client.optim_step().result()

    def both_ways():
        import mlx.core as mx
        import mlx.nn as nn
        from mlx.utils import tree_flatten
        from mlx_lm import load

        from zyquo_tui.trainer import losses
        from zyquo_tui.trainer.chunked_loss import output_head, sliced_cross_entropy
        from zyquo_tui.trainer.encoding import encode

        teacher, _ = load(str(tiny_model))
        teacher.freeze()  # as the client holds a teacher: no trained head
        tokens, lengths = encode(client.tokenizer, PROMPTS, ANSWERS, False, 2048)
        temperature = 2.0
        logits = teacher(tokens[:, :-1]).astype(mx.float32) / temperature
        whole = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        backbone, head = output_head(teacher)
        model, sliced = client.engine.model, sliced_cross_entropy(client.engine.model, 8)
        assert sliced.worth_it(tokens)
        results = []
        for objective, teacher_side in (
                (partial(losses.distill_objective, temperature=temperature), whole),
                (partial(losses.distill_objective, temperature=temperature, sliced=sliced,
                         teacher_head=head), backbone(tokens[:, :-1]))):
            (loss, _, _), grad = nn.value_and_grad(model, objective)(model, tokens, lengths,
                                                                      teacher_side)
            results.append((loss.item(), {k: np.array(v) for k, v in tree_flatten(grad)}))
        return results

    (whole_loss, whole_grad), (sliced_loss, sliced_grad) = on_mlx(both_ways)
    assert whole_loss > 1e-3
    assert sliced_loss == pytest.approx(whole_loss, abs=1e-5)
    assert max(float(np.abs(g).max()) for g in whole_grad.values()) > 1e-4
    assert max_difference(sliced_grad, whole_grad) < 1e-5


def test_a_sliced_distillation_step_holds_no_teacher_array_as_wide_as_the_vocabulary(
        tiny_model):
    """What the client hands the step from the teacher: its hidden states, (B, T - 1, H), not
    its (B, T - 1, V) float32 log-probabilities; unsliced, the log-probabilities as before."""
    batch = TrainingBatch(PROMPTS, ANSWERS, loss_type="distill",
                          extra={"teacher": str(tiny_model), "temperature": 2.0})
    for chunk in (16, "off"):
        with TrainingClient.from_model(tiny_model, learning_rate=1e-3,
                                       loss_chunk_tokens=chunk) as made:
            engine, handed = made.engine, []
            step = engine.forward_backward

            def spy(objective, *arrays, key=None, step=step):
                handed.append([tuple(a.shape) for a in arrays])
                return step(objective, *arrays, key=key)

            engine.forward_backward = spy
            assert made.forward_backward(batch).result().loss == pytest.approx(0, abs=1e-5)
        (tokens, _, teacher), = handed
        config = json.loads((tiny_model / "config.json").read_text())
        width = config["hidden_size"] if chunk == 16 else config["vocab_size"]
        assert teacher == (tokens[0], tokens[1] - 1, width), f"loss_chunk_tokens={chunk}"


def test_the_client_slices_its_losses_where_a_run_would(tiny_model):
    """loss_chunk_tokens as a run has it: N slices every batch, auto only where that lowers
    the estimated peak (not for these batches, one slice's worth each), off never; the same
    losses."""
    batches = [sft_batch(),
               TrainingBatch(PROMPTS, ANSWERS, ANSWERS[::-1], loss_type="dpo"),
               TrainingBatch(PROMPTS, ANSWERS, loss_type="distill",
                             extra={"teacher": str(tiny_model), "temperature": 2.0}),
               sft_batch(loss_type="reinforce", advantages=[1.0, -1.0, 0.5, 0.0])]
    curves, decided = {}, {}
    for chunk in ("off", 16, "auto"):
        with TrainingClient.from_model(tiny_model, learning_rate=1e-3,
                                       loss_chunk_tokens=chunk) as made:
            curve = []
            for _ in range(2):
                for batch in batches:
                    curve.append(made.forward_backward(batch).result().loss)
                    made.optim_step().result()
            curves[chunk], decided[chunk] = curve, set(made._chunk_tokens.values())
    assert decided == {"off": {"off"}, 16: {16}, "auto": {"off"}}
    assert curves["auto"] == curves["off"]
    assert curves[16] == pytest.approx(curves["off"], abs=1e-4)


def test_no_warning_without_truncation(client):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.forward_backward(sft_batch()).result()
