"""GRPO runs (objective grpo) end to end with the real trainer on the sample model: events,
exact resume with sampling, a failing reward, a reward file written for mlx-lm-lora, and the
command line's flags."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from conftest import SAMPLE_DATA, cancel_mid_run_then_resume, run_trainer, zyquo_cli
from helpers import losses_by_iteration, make_run

from zyquo_tui.core.events.protocol import GRPO_METRICS, read_events
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.runs.settings import SETTINGS
from zyquo_tui.core.store.store import RunStore

RL = SAMPLE_DATA / "rl"
# Short answers and small groups: seconds a run. Two rewards, so that even the random sample
# model's answers differ in reward within a group (length) and every step learns something.
FAST_GRPO = dict(iters=10, batch_size=2, steps_per_report=1, steps_per_eval=5, save_every=100,
                 val_batches=1, learning_rate=1e-3)
GRPO_SETTINGS = {"objective": "grpo", "reward_functions": ["exact_answer", "length"],
                 "group_size": 4, "max_completion_tokens": 12}


def grpo_run(model, store=None, grpo=None, data=RL, **settings):
    store, run = make_run(model, data, store=store, **{**FAST_GRPO, **settings})

    def set_grpo(r):
        for key, value in {**GRPO_SETTINGS, **(grpo or {})}.items():
            SETTINGS[key].set(r.hyperparameters, value)
    store.update(run.id, set_grpo)
    return store, store.get(run.id)


def events_of(store, run) -> list[dict]:
    return read_events(store.run_dir(run.id) / "events.jsonl")


def test_a_grpo_run_reports_rewards_kl_length_and_samples(tiny_model):
    # Each batch of answers trains two iterations (grpo_iterations): the second against the
    # policy that sampled them, one update ago, so its ratios have moved and some are clipped.
    store, run = grpo_run(tiny_model, grpo={"grpo_iterations": 2})
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    events = events_of(store, run)
    trains = [e for e in events if e["type"] == "train"]
    assert [e["iteration"] for e in trains] == list(range(1, 11))
    for e in trains:
        assert set(GRPO_METRICS) <= set(e), e
        assert set(e["reward_means"]) == {"exact_answer", "length"}
        assert 0 < e["completion_length"] <= 12 + 1  # the stop token is an answer's too
        if e["iteration"] % 2:  # answers just sampled: the policy that sampled them
            assert e["clip_fraction"] == 0, e
    # Reused answers: one update later, some ratios are past the clip.
    assert any(e["clip_fraction"] > 0 for e in trains if e["iteration"] % 2 == 0), trains
    # A reusing step reports the figures of the answers it trains, those of the step before.
    for fresh, reused in zip(trains[::2], trains[1::2]):
        assert reused["reward_mean"] == fresh["reward_mean"]
        assert reused["completion_length"] == fresh["completion_length"]
    assert trains[0]["kl"] == 0  # fresh adapters: the policy is its reference
    assert any(e["kl"] > 0 for e in trains[1:])
    vals = [e for e in events if e["type"] == "val"]
    assert [e["iteration"] for e in vals] == [1, 5, 10] and all("reward_mean" in e for e in vals)
    samples = [e for e in events if e["type"] == "sample"]
    assert len(samples) == 3 * 2  # the first two validation prompts (a batch of 2), 3 times
    assert {"prompt", "text", "answer", "reward", "rewards"} <= set(samples[0])
    record = store.get(run.id)
    assert record.state is RunState.COMPLETED
    assert record.summary["reward_mean"] == trains[-1]["reward_mean"]
    listed = json.loads(zyquo_cli("runs", "list", "--json").stdout)
    assert [r["reward_mean"] for r in listed if r["id"] == run.id] == [trains[-1]["reward_mean"]]
    shown = json.loads(zyquo_cli("runs", "show", run.id, "--json").stdout)
    assert shown["progress"]["reward_mean"] == trains[-1]["reward_mean"]


@pytest.mark.parametrize("iterations, accumulation, cancel_at", [(1, 1, 7), (2, 1, 7), (2, 2, 6)],
                         ids=["trained_once", "reused", "reused_accumulated"])
def test_cancel_and_resume_of_a_grpo_run_equals_the_straight_run(tiny_model, iterations,
                                                                 accumulation, cancel_at):
    """Sampling included: the resumed run draws the answers the straight run drew. Reused
    (grpo_iterations 2), the cancel at step 7 falls between a batch's two iterations: the
    resumed step 8 trains the answers step 7 sampled, kept in step 7's checkpoint. With two
    batches accumulated, steps 5 and 6 sample them and 7 and 8 reuse them: both are kept in
    step 6's checkpoint."""
    settings = dict(iters=12, lora_parameters={"rank": 8, "dropout": 0.1, "scale": 20.0},
                    grad_accumulation_steps=accumulation)
    grpo = {"grpo_iterations": iterations}
    store, straight = grpo_run(tiny_model, grpo=grpo, **settings)
    assert run_trainer(store.run_dir(straight.id)).returncode == 0
    _, interrupted = grpo_run(tiny_model, store=store, grpo=grpo, **settings)
    cancel_mid_run_then_resume(store, interrupted.id, cancel_at)
    want, have = events_of(store, straight), events_of(store, interrupted)
    for kind, key in [("train", "train_loss"), ("val", "val_loss"), ("val", "reward_mean"),
                      *[("train", m) for m in GRPO_METRICS]]:
        expected = losses_by_iteration(want, kind, key)
        got = losses_by_iteration(have, kind, key)
        assert sorted(got) == sorted(expected) and expected, (kind, key)
        for step in expected:
            assert got[step] == pytest.approx(expected[step], abs=1e-5), (kind, key, step)
    assert losses_by_iteration(have, "sample", "text") == losses_by_iteration(want, "sample",
                                                                              "text")


FAILING_REWARD = textwrap.dedent("""
    import os

    def flaky(prompts, completions, answer, types=None):
        # Fails from its fourth call on while the file BROKEN exists beside this one.
        flaky.calls = getattr(flaky, "calls", 0) + 1
        if flaky.calls >= 4 and os.path.exists(os.path.join(os.path.dirname(__file__), "BROKEN")):
            raise ZeroDivisionError("the reward divided by zero")
        return [float(len(c) % 3) for c in completions]
""")


def test_a_reward_that_raises_fails_the_run_at_its_step_and_the_run_resumes(tiny_model,
                                                                             tmp_path):
    rewards = tmp_path / "rewards.py"
    rewards.write_text(FAILING_REWARD)
    (tmp_path / "BROKEN").write_text("")
    # Calls: validation at step 1, steps 1 and 2, then step 3's: the run fails at step 3,
    # having saved step 2.
    store, run = grpo_run(tiny_model, save_every=2,
                          grpo={"reward_functions": [f"{rewards}:flaky"]})
    run_dir = store.run_dir(run.id)
    done = run_trainer(run_dir)
    assert done.returncode == 1
    failed = read_events(run_dir / "events.jsonl")[-1]
    assert failed["type"] == "failed" and failed["cause"] == "reward", failed
    assert failed["iteration"] == 3 and "At step 3" in failed["message"], failed
    assert f"{rewards}:flaky raised ZeroDivisionError" in failed["message"]
    # The reward's own traceback, its line in the user's file, is in the trainer's output.
    assert 'rewards.py", line 8, in flaky' in done.stderr
    assert "ZeroDivisionError: the reward divided by zero" in done.stderr
    (tmp_path / "BROKEN").unlink()  # fixed: the run resumes from its last good checkpoint
    resumed = zyquo_cli("runs", "resume", run.id, "--wait")
    assert resumed.returncode == 0, resumed.stderr
    record = RunStore().get(run.id)
    assert record.state is RunState.COMPLETED, record.failure


def test_a_reward_returning_the_wrong_count_fails_the_run(tiny_model, tmp_path):
    rewards = tmp_path / "short.py"
    rewards.write_text("def one(prompts, completions, answer, types=None):\n    return [1.0]\n")
    store, run = grpo_run(tiny_model, grpo={"reward_functions": [f"{rewards}:one"]})
    assert run_trainer(store.run_dir(run.id)).returncode == 1
    failed = events_of(store, run)[-1]
    assert failed["cause"] == "reward" and "At step 1" in failed["message"]
    assert "returned 1 values for 8 answers" in failed["message"], failed["message"]


def test_a_run_whose_rewards_tell_no_answer_apart_is_warned_at_step_10(tiny_model, tmp_path):
    """Equal rewards within every group: all advantages 0, nothing learnt. The run says so
    once, at step 10, in a warning event (the dashboard's events list shows it)."""
    rewards = tmp_path / "flat.py"
    rewards.write_text("def flat(prompts, completions, answer, types=None):\n"
                       "    return [0.5] * len(completions)\n")
    store, run = grpo_run(tiny_model, iters=12, grpo={"reward_functions": [f"{rewards}:flat"],
                                                      "group_size": 2,
                                                      "max_completion_tokens": 4})
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    warnings = [e for e in events_of(store, run)
                if e["type"] == "warning" and e["code"] != "dataset"]  # the sample's repeats
    assert [(w["code"], w["iteration"]) for w in warnings] == [("no_reward_signal", 10)]
    assert "needs an sft warm-up first" in warnings[0]["message"]


MLX_LM_LORA_REWARDS = textwrap.dedent("""
    # A reward file as mlx-lm-lora's users write them: its registry, its signature.
    from mlx_lm_lora.trainer.grpo_reward_functions import (
        r1_extract_xml_answer,
        register_reward_function,
    )


    @register_reward_function()
    def says_a_number(prompts: list, completions: list, answer: list, types=None) -> list[float]:
        return [0.5 if any(ch.isdigit() for ch in r1_extract_xml_answer(c)) else 0.0
                for c in completions]
""")


def test_a_reward_file_written_for_mlx_lm_lora_trains_unchanged(models, tmp_path,
                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(MLX_LM_LORA_REWARDS)
    made = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(RL),
                     "--objective", "grpo", "--reward", "mine.py:says_a_number",
                     "--reward", "length", "--reward-weights", "1,0.5", "--group-size", "2",
                     "--max-completion-tokens", "8", "--iters", "3", "--batch-size", "2",
                     "--steps-per-eval", "100", "--save-every", "100",
                     "--steps-per-report", "1")
    assert made.returncode == 0, made.stderr
    run = RunStore().get(made.stdout.strip())
    # The file's path is made absolute with the run: the trainer runs elsewhere.
    assert SETTINGS["reward_functions"].get(run.hyperparameters) == [
        f"{tmp_path / 'mine.py'}:says_a_number", "length"]
    monkeypatch.chdir(SAMPLE_DATA)
    started = zyquo_cli("runs", "start", run.id, "--wait")
    assert started.returncode == 0, started.stderr
    trains = [e for e in read_events(RunStore().run_dir(run.id) / "events.jsonl")
              if e["type"] == "train"]
    assert len(trains) == 3
    assert set(trains[0]["reward_means"]) == {f"{tmp_path / 'mine.py'}:says_a_number",
                                              "length"}


def test_runs_new_takes_grpo_flags_and_refuses_data_without_answers(models, tmp_path):
    refused = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data",
                        str(SAMPLE_DATA / "completions"), "--objective", "grpo")
    assert refused.returncode == 2
    assert "the grpo objective needs prompt rows with the answer a reward checks" in \
        refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    sft_on_prompts = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(RL),
                               "--objective", "sft")
    assert sft_on_prompts.returncode == 2 and "train the grpo objective" in sft_on_prompts.stderr
    # No objective given: the data's (grpo).
    made = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(RL),
                     "--reward", "exact_answer,format", "--reward", "length",
                     "--reward-weights", "1,0.2,0.1", "--group-size", "6",
                     "--max-completion-tokens", "32", "--sampling-temperature", "0.7",
                     "--kl-beta", "0.05", "--clip-epsilon", "0.3")
    assert made.returncode == 0, made.stderr
    run_id = made.stdout.strip()
    own = json.loads(zyquo_cli("runs", "show", run_id, "--json").stdout)[
        "hyperparameters"]["zyquo_tui"]
    assert own == {"objective": "grpo", "reward_functions": ["exact_answer", "format", "length"],
                   "reward_weights": [1, 0.2, 0.1], "group_size": 6,
                   "max_completion_tokens": 32, "sampling_temperature": 0.7,
                   "kl_beta": 0.05, "clip_epsilon": 0.3}
    # The YAML of the run makes the same run again.
    out = tmp_path / "grpo.yaml"
    assert zyquo_cli("runs", "export-config", run_id, "-o", str(out)).returncode == 0
    assert yaml.safe_load(out.read_text())["zyquo_tui"] == own
    imported = zyquo_cli("runs", "import-config", str(out), "--json")
    assert imported.returncode == 0, imported.stderr
    again = json.loads(zyquo_cli("runs", "show", json.loads(imported.stdout)["id"],
                                 "--json").stdout)["hyperparameters"]["zyquo_tui"]
    assert again == own
    weights = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(RL),
                        "--reward", "exact_answer", "--reward-weights", "1,2")
    assert weights.returncode == 2 and "reward_weights has 2 weights for 1 rewards" in \
        weights.stderr
    planned = zyquo_cli("plan", "--model", "zyquo-tiny", "--data", str(RL), "--group-size", "8",
                        "--json")
    assert planned.returncode in (0, 1), planned.stderr


def test_on_the_sample_data_grpo_after_an_sft_warm_up_raises_the_mean_reward(models):
    """What sample_data/README.md tells a first-time user to do, from the command line: SFT
    teaches the random sample model the form of an answer, its export is the model a grpo run
    starts from, and the exact_answer reward over the last 10 steps beats the first 10's."""
    warm = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data",
                     str(SAMPLE_DATA / "completions"), "--method", "full", "--iters", "200",
                     "--learning-rate", "1e-3", "--batch-size", "8", "--steps-per-eval", "1000",
                     "--save-every", "200", "--name", "warm-up")
    assert warm.returncode == 0, warm.stderr
    warm_id = warm.stdout.strip()
    assert zyquo_cli("runs", "start", warm_id, "--wait", timeout=600).returncode == 0
    exported = zyquo_cli("runs", "export", warm_id, "--json", timeout=600)
    assert exported.returncode == 0, exported.stderr
    model = json.loads(exported.stdout)["output"]
    made = zyquo_cli("runs", "new", "--model", model, "--data", str(RL), "--method", "full",
                     "--iters", "40", "--learning-rate", "2e-4", "--batch-size", "4",
                     "--group-size", "8", "--max-completion-tokens", "12", "--kl-beta", "0",
                     "--steps-per-report", "1", "--steps-per-eval", "1000", "--val-batches", "1")
    assert made.returncode == 0, made.stderr
    run_id = made.stdout.strip()
    assert zyquo_cli("runs", "start", run_id, "--wait", timeout=600).returncode == 0
    trains = [e for e in read_events(RunStore().run_dir(run_id) / "events.jsonl")
              if e["type"] == "train"]
    assert not any("kl" in e for e in trains)  # --kl-beta 0: no reference, so no KL to show
    rewards = [e["reward_mean"] for e in trains]
    assert len(rewards) == 40
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first, (first, last, rewards)


def test_a_grpo_config_round_trips_through_mlx_lm_lora_keys(models, tmp_path):
    made = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(RL),
                     "--group-size", "6", "--max-completion-tokens", "48", "--kl-beta", "0.04",
                     "--clip-epsilon", "0.3", "--sampling-temperature", "0.9",
                     "--reward", "exact_answer,length", "--reward-weights", "1,0.5")
    assert made.returncode == 0, made.stderr
    out = tmp_path / "grpo.yaml"
    assert zyquo_cli("runs", "export-config", made.stdout.strip(), "-o", str(out)).returncode == 0
    config = yaml.safe_load(out.read_text())
    assert {key: config[key] for key in ("train_mode", "train_type", "beta", "epsilon",
                                         "group_size", "max_completion_length", "temperature",
                                         "reward_weights", "fuse")} == {
        "train_mode": "grpo", "train_type": "lora", "beta": 0.04, "epsilon": 0.3,
        "group_size": 6, "max_completion_length": 48, "temperature": 0.9,
        "reward_weights": [1, 0.5], "fuse": False}
    assert "dpo_cpo_loss_type" not in config  # a preference run's key, not grpo's
    # mlx-lm-lora's keys alone (ours removed but the rewards, which it names otherwise).
    own = config.pop("zyquo_tui")
    config["zyquo_tui"] = {"reward_functions": own["reward_functions"]}
    out.write_text(yaml.safe_dump(config))
    imported = zyquo_cli("runs", "import-config", str(out), "--json")
    assert imported.returncode == 0, imported.stderr
    shown = json.loads(zyquo_cli("runs", "show", json.loads(imported.stdout)["id"],
                                 "--json").stdout)
    assert shown["hyperparameters"]["zyquo_tui"] == own


def test_a_reward_that_never_returns_is_stopped_after_reward_timeout(tiny_model, tmp_path):
    """A reward that sleeps forever: the step waits reward_timeout seconds for it, then the
    run fails in one sentence and its trainer ends (the reward's thread left behind)."""
    rewards = tmp_path / "stuck.py"
    rewards.write_text("import time\n\n\ndef stuck(prompts, completions, answer, types=None):\n"
                       "    while True:\n        time.sleep(60)\n")
    store, run = grpo_run(tiny_model, iters=2,
                          grpo={"reward_functions": [f"{rewards}:stuck"],
                                "reward_timeout": 2.0})
    done = run_trainer(store.run_dir(run.id), timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    failed = events_of(store, run)[-1]
    assert failed["type"] == "failed" and failed["cause"] == "reward", failed
    assert failed["message"] == (
        f"At step 1, the reward function {rewards}:stuck was still running after 2 s "
        "(reward_timeout), so it was stopped; make it return sooner or raise "
        "--reward-timeout.")
    assert RunStore().get(run.id).state is RunState.FAILED


def test_a_reward_that_calls_sys_exit_fails_the_run_in_one_sentence(tiny_model, tmp_path):
    rewards = tmp_path / "quits.py"
    rewards.write_text("import sys\n\n\ndef quits(prompts, completions, answer, types=None):\n"
                       "    sys.exit(3)\n")
    store, run = grpo_run(tiny_model, iters=2,
                          grpo={"reward_functions": [f"{rewards}:quits"]})
    done = run_trainer(store.run_dir(run.id))
    assert done.returncode == 1, done.stderr[-2000:]
    failed = events_of(store, run)[-1]
    assert failed["type"] == "failed" and failed["cause"] == "reward", failed
    assert failed["message"] == (f"At step 1, the reward function {rewards}:quits called "
                                 "sys.exit (3); a reward must return its values.")
    assert 'quits.py", line 5, in quits' in done.stderr  # its traceback, in trainer.log
    assert RunStore().get(run.id).state is RunState.FAILED


def test_an_async_reward_is_refused_when_the_run_is_made(models, tmp_path):
    rewards = tmp_path / "later.py"
    rewards.write_text("async def later(prompts, completions, answer, types=None):\n"
                       "    return [1.0] * len(completions)\n")
    refused = zyquo_cli("runs", "new", "--model", "zyquo-tiny", "--data", str(RL),
                        "--reward", f"{rewards}:later")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"zyquo-tui: The run was not created: reward_functions: {rewards}:1: later is an "
        "async def; make it a plain "
        "def that returns one number per answer (asyncio.run inside it can await what it "
        "needs)."]
    assert RunStore().list() == []  # nothing stored


def test_reusing_answers_costs_no_memory_the_estimate_leaves_out(tiny_model, tmp_path):
    """grpo_iterations adds no term to the memory estimate: what reuse keeps (each answer
    token's old log-probability, a float) and the old policy's scoring (a forward pass
    without gradient, below the step's peak) leave a run's peak within 2% of a run that
    trains each answer once (measured: +0.3% at 3 iterations on the sample model). Every
    step of both is the same shape: one batch of prompts, and answers of at most 4 tokens
    (padded to 8 whatever was sampled)."""
    data = tmp_path / "one-batch"
    data.mkdir()
    rows = "".join(line + "\n" for line in (RL / "train.jsonl").read_text().splitlines()[:2])
    (data / "train.jsonl").write_text(rows)
    (data / "valid.jsonl").write_text(rows)
    peaks = {}
    for iterations in (1, 3):
        store, run = grpo_run(tiny_model, data=data, iters=4, steps_per_eval=100,
                              grpo={"grpo_iterations": iterations,
                                    "max_completion_tokens": 4})
        done = run_trainer(store.run_dir(run.id))
        assert done.returncode == 0, done.stderr[-2000:]
        peaks[iterations] = max(e["peak_memory_bytes"] for e in events_of(store, run)
                                if e["type"] == "train")
    assert peaks[3] <= peaks[1] * 1.02, peaks


def test_a_small_grpo_run_is_judged_by_its_own_measured_peak(models, tmp_path):
    """`plan` measures a config this small whole (core/memory/replica.py WHOLE_BYTES), each
    answer as long as it may be, and a run of it peaks where plan said. Answers of at most 4
    tokens are padded to 8 whatever was sampled, so every step of the run is the widest."""
    data = tmp_path / "one-batch"
    data.mkdir()
    rows = "".join(line + "\n" for line in (RL / "train.jsonl").read_text().splitlines()[:2])
    (data / "train.jsonl").write_text(rows)
    (data / "valid.jsonl").write_text(rows)
    flags = ["--model", "zyquo-tiny", "--data", str(data), "--objective", "grpo",
             "--reward", "exact_answer,length", "--group-size", "4",
             "--max-completion-tokens", "4", "--batch-size", "2", "--iters", "3",
             "--steps-per-report", "1", "--steps-per-eval", "100", "--save-every", "100",
             "--val-batches", "1"]
    planned = zyquo_cli("plan", *flags, "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["replica"]["scale"] == 1, plan["replica_skipped"]
    assert any(note.startswith("measured whole") for note in plan["notes"]), plan["notes"]
    made = zyquo_cli("runs", "new", *flags)
    assert made.returncode == 0, made.stderr
    run_id = made.stdout.strip()
    started = zyquo_cli("runs", "start", run_id, "--wait")
    assert started.returncode == 0, started.stderr
    events = read_events(RunStore().run_dir(run_id) / "events.jsonl")
    peak = max(e["peak_memory_bytes"] for e in events if e["type"] == "train")
    assert abs(plan["estimate_bytes"] - peak) <= 0.02 * peak, (plan["estimate_bytes"], peak)


def test_a_grpo_measurement_trains_the_widest_step_whatever_stops_the_answers(tiny_model,
                                                                             tmp_path):
    """A copy of the sample model for which every token ends a sequence: sampled as a run
    samples, each answer would stop at its first token. The measurement samples every answer
    to max_completion_tokens (trainer/measure.py), so the step it trains is as wide as the
    terms assume the widest can be."""
    import shutil

    from zyquo_tui.core.memory.estimate import TrainingConfig
    from zyquo_tui.core.memory.measure import measure_peak
    from zyquo_tui.core.runs.settings import Hyperparameters, Method

    model = tmp_path / "every-token-stops"
    shutil.copytree(tiny_model, model)
    config_json = json.loads((model / "config.json").read_text())
    config_json["eos_token_id"] = list(range(config_json["vocab_size"]))
    (model / "config.json").write_text(json.dumps(config_json))
    hp = Hyperparameters.from_dict({"batch_size": 2, "max_seq_length": 32, "num_layers": -1})
    for key, value in {**GRPO_SETTINGS, "max_completion_tokens": 20}.items():
        SETTINGS[key].set(hp, value)
    config = TrainingConfig.from_hyperparameters(Method.LORA, hp, longest_row_tokens=12)
    measured = measure_peak(str(model), config, hyperparameters=hp)
    # a prompt of 12 tokens, answers of 20, padded to 8: 40 (answers of one token: 16)
    assert measured.batch_width == config.batch_width == 40
