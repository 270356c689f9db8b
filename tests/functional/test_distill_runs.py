"""Distillation runs (objective distill) end to end: the loss is the step-level client's
distillation loss on the same rows, a teacher with another tokenizer is refused at `runs new`,
and on-policy runs (the student's own answers, scored by the teacher) resume exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA, cancel_mid_run_then_resume, run_trainer, zyquo_cli
from helpers import losses_by_iteration, make_run

from zyquo_tui.core.events.protocol import read_events
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.runs.settings import SETTINGS
from zyquo_tui.core.store.store import RunStore

COMPLETIONS = SAMPLE_DATA / "completions"


def distill_run(model, teacher, data=COMPLETIONS, **settings):
    """A distill run of the sample model from `teacher`; settings by key over the tests'
    fast ones."""
    own = {key: settings.pop(key) for key in ("distill_temperature", "on_policy",
                                              "max_completion_tokens") if key in settings}
    store, run = make_run(model, data, **settings)

    def to_distill(r):
        SETTINGS["objective"].set(r.hyperparameters, "distill")
        SETTINGS["teacher"].set(r.hyperparameters, str(teacher))
        for key, value in own.items():
            SETTINGS[key].set(r.hyperparameters, value)

    store.update(run.id, to_distill)
    return store, store.get(run.id)


def one_batch_of_rows(folder: Path, rows: list[dict]) -> Path:
    """A dataset whose train split is exactly `rows` (one batch: every step trains them all)."""
    folder.mkdir()
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (folder / "train.jsonl").write_text(text)
    (folder / "valid.jsonl").write_text(text)
    return folder


def test_a_distill_runs_losses_are_the_clients_distillation_losses(tiny_model, teacher_model,
                                                                  tmp_path):
    from zyquo_tui.client import TrainingBatch, TrainingClient

    rows = [json.loads(line) for line in
            (COMPLETIONS / "train.jsonl").read_text().splitlines()[:4]]
    data = one_batch_of_rows(tmp_path / "four", rows)
    store, run = distill_run(tiny_model, teacher_model, data, iters=4, batch_size=4,
                             steps_per_report=1, steps_per_eval=1000, save_every=1000,
                             mask_prompt=True, distill_temperature=2.0)
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 0, done.stdout[-2000:]
    trained = losses_by_iteration(read_events(store.run_dir(run.id) / "events.jsonl"),
                                  "train", "train_loss")

    # The same rows through the client, step by step, with the same settings and seed.
    batch = TrainingBatch([r["prompt"] for r in rows], [r["completion"] for r in rows],
                          loss_type="distill",
                          extra={"teacher": str(teacher_model), "temperature": 2.0})
    client_losses = {}
    with TrainingClient.from_model(tiny_model, method="lora", learning_rate=1e-3,
                                   num_layers=-1) as client:
        for step in range(1, 5):
            result = client.forward_backward(batch)
            client.optim_step().result()
            client_losses[step] = result.result().loss
    assert set(trained) == {1, 2, 3, 4}
    for step, loss in client_losses.items():
        assert trained[step] == pytest.approx(loss, abs=1e-5), (step, trained, client_losses)
    # It learns: the KL from the teacher falls.
    assert trained[4] < trained[1]
    assert store.get(run.id).state is RunState.COMPLETED


def test_runs_new_refuses_a_teacher_with_another_tokenizer(models, teacher_model, tmp_path):
    # A model like the sample's, with a tokenizer trained to another vocabulary size.
    other = tmp_path / "other-vocabulary"
    code = ("import sys; from zyquo_tui.trainer.sample_model import build_model, "
            "build_tokenizer; build_tokenizer(sys.argv[2], vocab_size=400); "
            "build_model(sys.argv[1], tokenizer_dir=sys.argv[2])")
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", code, str(other), str(tmp_path / "tok")], check=True)
    refused = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(COMPLETIONS),
                        "--objective", "distill", "--teacher", str(other))
    assert refused.returncode == 2
    assert ("the teacher other-vocabulary has another tokenizer than the model zyquo-tiny"
            in refused.stderr), refused.stderr
    assert "Traceback" not in refused.stderr
    assert RunStore().list() == []
    planned = zyquo_cli("plan", "--model", "zyquo-tiny", "--data", str(COMPLETIONS),
                        "--objective", "distill", "--teacher", str(other), "--no-replica")
    assert planned.returncode == 2 and "has another tokenizer" in planned.stderr
    # The sample's teacher shares the tokenizer; a name as `zyquo-tui models` lists it will do.
    import shutil

    installed = shutil.copytree(teacher_model, models["zyquo-tiny"].parent / teacher_model.name)
    made = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(COMPLETIONS),
                     "--objective", "distill", "--teacher", "zyquo-tiny-teacher",
                     "--temperature", "2")
    assert made.returncode == 0, made.stderr
    run = RunStore().get(made.stdout.strip())
    assert run.objective == "distill"
    assert SETTINGS["teacher"].get(run.hyperparameters) == str(Path(installed).resolve())
    assert SETTINGS["distill_temperature"].get(run.hyperparameters) == 2.0
    no_teacher = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(COMPLETIONS),
                           "--objective", "distill")
    assert no_teacher.returncode == 2 and "needs a teacher" in no_teacher.stderr
    unknown = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(COMPLETIONS),
                        "--objective", "distill", "--teacher", "no-such-teacher")
    assert unknown.returncode == 2 and "teacher: no-such-teacher is no model folder" in \
        unknown.stderr


def test_an_on_policy_run_trains_the_students_own_answers_and_resumes_exactly(
        tiny_model, teacher_model):
    settings = dict(iters=6, steps_per_report=1, steps_per_eval=3, save_every=1000,
                    on_policy=True, max_completion_tokens=12)
    store, straight = distill_run(tiny_model, teacher_model, **settings)
    assert run_trainer(store.run_dir(straight.id)).returncode == 0
    _, resumed = distill_run(tiny_model, teacher_model, **settings)
    cancel_mid_run_then_resume(store, resumed.id, step=3)

    def losses(run):
        events = read_events(store.run_dir(run.id) / "events.jsonl")
        return (losses_by_iteration(events, "train", "train_loss"),
                losses_by_iteration(events, "train", "trained_tokens"),
                losses_by_iteration(events, "val", "val_loss"))

    (train_a, tokens_a, val_a), (train_b, tokens_b, val_b) = losses(straight), losses(resumed)
    assert set(train_a) == set(train_b) == set(range(1, 7))
    for step in train_a:
        assert train_b[step] == pytest.approx(train_a[step], abs=1e-5), (step, train_a, train_b)
    assert tokens_b == tokens_a  # the same answers were sampled, of the same lengths
    assert val_b == pytest.approx(val_a, abs=1e-5)

    # The answers are the student's, not the dataset's: off policy trains other tokens.
    _, off = distill_run(tiny_model, teacher_model, **{**settings, "on_policy": False})
    assert run_trainer(store.run_dir(off.id)).returncode == 0
    tokens_off = losses_by_iteration(read_events(store.run_dir(off.id) / "events.jsonl"),
                                     "train", "trained_tokens")
    assert tokens_off != tokens_a


def padded_wider(teacher: Path, folder: Path, extra: int = 24) -> Path:
    """A copy of `teacher` whose output layer has `extra` more rows than its tokenizer has
    tokens (its embedding, tied to its output, or its lm_head padded with random rows, as a
    bigger sibling's output is padded to a round width: Qwen2.5-7B's 152,064 beside
    Qwen2.5-0.5B's 151,936, one tokenizer)."""
    import shutil

    import mlx.core as mx

    shutil.copytree(teacher, folder)
    weights = mx.load(str(folder / "model.safetensors"))
    mx.random.seed(9)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        if name in weights:
            rows = weights[name]
            padding = mx.random.normal((extra, rows.shape[1])).astype(rows.dtype)
            weights[name] = mx.concatenate([rows, padding])
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    config = json.loads((folder / "config.json").read_text())
    config["vocab_size"] += extra
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("chunk_tokens", ["off", 8], ids=["logits", "sliced"])
def test_a_teacher_padded_wider_than_the_student_distills_over_the_shared_vocabulary(
        tiny_model, teacher_model, tmp_path, chunk_tokens):
    """The teacher's output is cut to the student's width and its distribution taken over
    those tokens: whatever its padding rows hold, the losses are the unpadded teacher's (as
    the logits or, sliced, from its hidden states and output head)."""
    wider = padded_wider(teacher_model, tmp_path / "wider-teacher")
    fast = dict(iters=3, batch_size=4, steps_per_report=1, steps_per_eval=1000,
                save_every=1000, mask_prompt=True, distill_temperature=2.0)
    trained = {}
    for name, teacher in (("same", teacher_model), ("wider", wider)):
        store, run = distill_run(tiny_model, teacher, **fast)
        store.update(run.id, lambda r: SETTINGS["loss_chunk_tokens"].set(r.hyperparameters,
                                                                          chunk_tokens))
        done = run_trainer(store.run_dir(run.id))
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        trained[name] = losses_by_iteration(read_events(store.run_dir(run.id) / "events.jsonl"),
                                            "train", "train_loss")
    assert sorted(trained["wider"]) == [1, 2, 3]
    for step, loss in trained["same"].items():
        assert trained["wider"][step] == pytest.approx(loss, rel=1e-5, abs=1e-6), trained
