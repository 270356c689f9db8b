"""How long a run will take, from this machine's own measurements (`plan --iters`).

The basis is the nearest finished run on this machine (not a served Tinker session, whose
pace its program sets): one of the same objective before one of another (`OTHER_OBJECTIVE`),
the same model first, else the nearest model size, then the same method and the nearest
max_seq_length. From its events come its
training speed (tokens per second over its steps), its tokens per step, how long a validation
took, how long it took to start (imports and loading) and the rest of its time per step
(reports, checkpoints). The new run's duration is then

    startup + iters x tokens per step / tokens per second + validations x one validation's time
    + iters x the rest per step

with its tokens per step from the dataset's rows (or the basis run's, for the same data and
batch), and the speed scaled by the models' sizes when the basis is another model. Where the
basis run did not do the same work a step, the speed is scaled by what each step adds to
training: sampling the answers and the reference's forward pass (`grpo_share`), the teacher's
forward pass and, on-policy, sampling (`distill_share`): the basis's taken out, the planned
run's put in. `plan
--measure` replaces the speed with the one it measured (its steps are the run's own, sampling
and teacher included). Without either, the duration is unknown (None), and the basis says why.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.runs.hosts import world_size_of
from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method
from zyquo_tui.core.store.store import RunStore


@dataclass
class DurationEstimate:
    """Seconds from start to end (None when nothing measured says), and what they rest on."""

    seconds: float | None
    basis: dict[str, Any] = field(default_factory=dict)

    def sentence(self) -> str:
        return self.basis.get("sentence", "")


@dataclass
class _Speed:
    """What one finished run measured."""

    run: Run
    tokens_per_second: float
    tokens_per_step: float
    steps: int
    validation_seconds: float | None  # one validation, of its val_batches
    startup_seconds: float
    other_seconds_per_step: float


def model_size(facts: ModelFacts) -> float:
    """About the parameters a step computes with (llama-like blocks and the output layer)."""
    block = facts.hidden_size * (4 * facts.hidden_size + 3 * facts.intermediate_size)
    return float(facts.num_layers * block + facts.vocab_size * facts.hidden_size) or 1.0


def _facts(path: str, cache: dict[str, ModelFacts | None]) -> ModelFacts | None:
    if path not in cache:
        try:
            cache[path] = ModelFacts.from_folder(path)
        except Exception:  # a basis whose model is gone is no basis
            cache[path] = None
    return cache[path]


def _speed_of(store: RunStore, run: Run) -> _Speed | None:
    """The figures of a finished run's last session, from its events."""
    events = ev.read_events(store.events_path(run.id))
    starts = [i for i, e in enumerate(events) if e["type"] == ev.STARTED]
    if not starts:
        return None
    session = events[starts[-1]:]
    started, end = session[0], session[-1]
    if end["type"] != ev.COMPLETED:
        return None
    tokens = seconds = 0.0
    steps = 0
    previous_step = started.get("resumed_from_step") or 0
    previous_tokens = None
    for event in session:
        if event["type"] != ev.TRAIN:
            continue
        count = event["iteration"] - previous_step
        rate = event.get("iterations_per_second") or 0
        if count <= 0 or rate <= 0:
            continue
        step_seconds = count / rate
        done = event["tokens_per_second"] * step_seconds
        if previous_tokens is not None:
            done = event["trained_tokens"] - previous_tokens
        previous_step, previous_tokens = event["iteration"], event["trained_tokens"]
        tokens += done
        seconds += step_seconds
        steps += count
    if steps == 0 or seconds <= 0 or tokens <= 0:
        return None
    val_times = [e["val_time"] for e in session if e["type"] == ev.VAL]
    val_total = sum(val_times)
    # The runner stamps requested_at at every start, a resume's too; a stamp from before the
    # last session's events (an older record) says nothing about this session's start-up.
    requested = (run.process or {}).get("requested_at")
    before = events[starts[-1] - 1]["time"] if starts[-1] > 0 else None
    fresh = requested is not None and (before is None or requested >= before)
    startup = max(0.0, started["time"] - requested) if fresh else 0.0
    other = max(0.0, end["time"] - started["time"] - seconds - val_total)
    return _Speed(run, tokens / seconds, tokens / steps, steps,
                  val_total / len(val_times) if val_times else None, startup, other / steps)


# How much farther a finished run of another objective is than one of the same: more than a
# model of another size (1 + |log size ratio|), since its step does other work a token
# (sampling, a teacher's or a reference's forward pass) that grpo_share and distill_share
# only estimate; on the sample model an off-policy distillation run trained 939 tokens/s where
# SFT trained 3,011 (bench/bench_duration.py).
OTHER_OBJECTIVE = 3.0


def _distance(run: Run, model: str, size: float, method: Method, max_seq: int, world: int,
              objective: str, cache: dict[str, ModelFacts | None]) -> float | None:
    """How far a finished run is from the planned one (smaller is nearer)."""
    same_model = os.path.realpath(run.model) == os.path.realpath(model)
    if same_model:
        distance = 0.0
    else:
        facts = _facts(run.model, cache)
        if facts is None:
            return None
        distance = 1.0 + abs(math.log(model_size(facts) / size))
    if run.method is not method:
        distance += 0.5
    if SETTINGS["objective"].get(run.hyperparameters) != objective:
        distance += OTHER_OBJECTIVE
    if world_size_of(run.hyperparameters.zyquo_tui) != world:
        distance += 0.5  # several processes share the work differently
    hist_seq = run.hyperparameters.max_seq_length
    if isinstance(hist_seq, int) and hist_seq > 0 and max_seq > 0:
        distance += 0.25 * abs(math.log(hist_seq / max_seq))
    return distance


def validations(iters: int, steps_per_eval: int) -> int:
    """How many validations a run of `iters` steps makes (step 1, every steps_per_eval, last)."""
    if iters < 1 or steps_per_eval < 1:
        return 0
    return len({1, iters, *range(steps_per_eval, iters + 1, steps_per_eval)})


def estimate_duration(store: RunStore, model: str, facts: ModelFacts, method: Method,
                      hp: Hyperparameters, data: str | None, lengths: list[int] | None,
                      measured_tokens_per_second: float | None = None) -> DurationEstimate:
    """The planned run's duration in seconds, with its basis (see the module docstring)."""
    size = model_size(facts)
    cache: dict[str, ModelFacts | None] = {}
    candidates = []
    for run in store.iter_runs():
        if not isinstance(run, Run) or run.state is not RunState.COMPLETED:
            continue
        if run.served:  # a Tinker program's session: its pace is the program's, not a run's
            continue
        distance = _distance(run, model, size, method, hp.max_seq_length,
                             world_size_of(hp.zyquo_tui), SETTINGS["objective"].get(hp), cache)
        if distance is not None:
            candidates.append((distance, run.id, run))
    speed = None
    # The nearest first, and of runs as near, the latest (ids sort by creation time).
    candidates.sort(key=lambda c: c[1], reverse=True)
    candidates.sort(key=lambda c: c[0])
    for _distance_, _id, run in candidates:
        speed = _speed_of(store, run)
        if speed is not None:
            break

    iters = int(hp.iters)
    per_step, per_step_from = _tokens_per_step(hp, data, lengths, speed,
                                               measured=bool(measured_tokens_per_second))
    if measured_tokens_per_second:
        rate, source = measured_tokens_per_second, "measured"
    elif speed is not None:
        basis_facts = _facts(speed.run.model, cache)
        scale = model_size(basis_facts) / size if basis_facts is not None else 1.0
        rate, source = speed.tokens_per_second * scale, "history"
        then = speed.run.hyperparameters
        if not _same_work(hp, then):
            # The basis's speed as SFT's (its sampling or teacher taken out), then this run's.
            rate *= (_work_share(hp, facts, lengths, cache)
                     / _work_share(then, basis_facts or facts, None, cache))
    else:
        return DurationEstimate(None, {
            "source": None, "sentence": "unknown: no finished run on this machine to measure "
                                        "from; finish one, or add --measure"})
    if per_step is None:
        return DurationEstimate(None, {
            "source": source, "sentence": "unknown: give --data to count the tokens of a step"})

    training = iters * per_step / rate
    val_count = validations(iters, hp.steps_per_eval) if _has_validation(data, hp) else 0
    one_validation = 0.0
    if speed is not None and speed.validation_seconds is not None:
        hist_batches = speed.run.hyperparameters.val_batches
        one_validation = speed.validation_seconds
        if hist_batches > 0 and hp.val_batches > 0:
            one_validation *= hp.val_batches / hist_batches
    startup = speed.startup_seconds if speed is not None else 0.0
    other = iters * speed.other_seconds_per_step if speed is not None else 0.0
    total = startup + training + val_count * one_validation + other
    basis: dict[str, Any] = {
        "source": source,
        "tokens_per_second": round(rate, 1),
        "tokens_per_step": round(per_step, 1),
        "tokens_per_step_from": per_step_from,
        "iters": iters,
        "training_seconds": round(training, 1),
        "validations": val_count,
        "validation_seconds": round(val_count * one_validation, 1),
        "startup_seconds": round(startup, 1),
        "other_seconds": round(other, 1),
    }
    if speed is not None:
        basis.update(run_id=speed.run.id, run_name=speed.run.name, run_model=speed.run.model,
                     same_model=os.path.realpath(speed.run.model) == os.path.realpath(model))
    origin = ("measured by --measure" if source == "measured" else
              f"from run {speed.run.id}" + (" (same model)" if basis["same_model"] else
                                            f" ({os.path.basename(speed.run.model)}, scaled "
                                            "by model size)"))
    # Without the dataset a step's tokens are a guess: say whose rows it rests on.
    guessed = ""
    if per_step_from == "basis_batch_scaled":
        guessed = f" (as long as run {speed.run.id}'s rows; give --data to count these)"
    elif per_step_from == "max_seq_length":
        guessed = " (every row max_seq_length long, as measured; give --data to count these)"
    basis["sentence"] = (f"{iters} steps x {per_step:,.0f} tokens{guessed} at {rate:,.0f} tokens/s "
                         f"{origin}; plus {startup:.0f} s to start, {val_count} validations "
                         f"and {other:.0f} s of reports and checkpoints")
    return DurationEstimate(total, basis)


def grpo_share(hp: Hyperparameters, lengths: list[int] | None) -> float:
    """A grpo run's answer tokens a second, as a share of the tokens a second a run that
    only trains (SFT) reaches on the same model: an answer of N tokens after a prompt of P is
    N tokens of sampling (a forward pass each: a third of a training token's forward and
    backward) and N tokens of training, plus its share of the prompt's P (computed once for
    the group_size answers to it, trainer/shared_prompts.py), plus the reference's forward
    pass of them (a third more) unless kl_beta is 0. An estimate: sampling's one token at a
    time is slower a token than a whole row's forward pass, so a grpo run's own speed, once
    one has finished (or `--measure`), is the better basis."""
    answer = int(SETTINGS["max_completion_tokens"].get(hp)) + 1
    prompt = sum(lengths) / len(lengths) if lengths else 0.0
    group = max(int(SETTINGS["group_size"].get(hp)), 1)
    reference = 1 / 3 if float(SETTINGS["kl_beta"].get(hp)) else 0.0
    return answer / ((prompt / group + answer) * (1 + reference) + answer / 3)


def distill_share(hp: Hyperparameters, student: ModelFacts, teacher_size: float | None,
                  lengths: list[int] | None) -> float:
    """A distillation run's trained tokens a second, as a share of the tokens a second SFT
    reaches on the same model: each trained token also takes the teacher's forward pass (a
    third of the student's forward and backward, times the teacher's size over the
    student's; the student's size when the teacher's folder cannot be read); on-policy, the
    student first samples each row's answer of up to max_completion_tokens (a forward pass a
    token, a third of a training token) after its prompt (a row's tokens, counted as the
    prompt's). An estimate, as grpo_share is: a distillation run's own speed is the better
    basis."""
    size = model_size(student)
    teacher = (teacher_size or size) / (3 * size)
    sampling = 0.0
    if SETTINGS["on_policy"].get(hp):
        answer = int(SETTINGS["max_completion_tokens"].get(hp)) + 1
        prompt = sum(lengths) / len(lengths) if lengths else 0.0
        sampling = answer / (prompt + answer) / 3
    return 1 / (1 + teacher + sampling)


def _same_work(hp: Hyperparameters, then: Hyperparameters) -> bool:
    """Whether a finished run's step did the planned one's kind of work a token: both grpo,
    the same distillation, or both neither (SFT, DPO and ORPO only train)."""
    objective, before = SETTINGS["objective"].get(hp), SETTINGS["objective"].get(then)
    if objective == "distill":
        return _same_distillation(hp, then)
    if objective == "grpo" or before == "grpo":
        return objective == before
    return before != "distill"


def _work_share(hp: Hyperparameters, facts: ModelFacts, lengths: list[int] | None,
                cache: dict[str, ModelFacts | None]) -> float:
    """A run's trained tokens a second as a share of SFT's on the same model (1 for runs that
    only train)."""
    objective = SETTINGS["objective"].get(hp)
    if objective == "grpo":
        return grpo_share(hp, lengths)
    if objective == "distill":
        return distill_share(hp, facts, _teacher_size(hp, cache), lengths)
    return 1.0


def _teacher_size(hp: Hyperparameters, cache: dict[str, ModelFacts | None]) -> float | None:
    teacher = SETTINGS["teacher"].get(hp)
    facts = _facts(str(teacher), cache) if teacher else None
    return model_size(facts) if facts is not None else None


def _same_distillation(hp: Hyperparameters, then: Hyperparameters) -> bool:
    """Whether a finished run distilled as the planned one does (the same teacher, on or off
    policy): its speed then counts the teacher and the sampling already."""
    return (SETTINGS["objective"].get(then) == "distill"
            and SETTINGS["teacher"].get(then) == SETTINGS["teacher"].get(hp)
            and bool(SETTINGS["on_policy"].get(then)) == bool(SETTINGS["on_policy"].get(hp)))


def _has_validation(data: str | None, hp: Hyperparameters) -> bool:
    return data is None or os.path.isfile(os.path.join(data, "valid.jsonl"))


def _tokens_per_step(hp: Hyperparameters, data: str | None, lengths: list[int] | None,
                     speed: _Speed | None, measured: bool = False
                     ) -> tuple[float | None, str | None]:
    """Tokens a step trains on, and where the figure came from: the basis run's when it
    trained the same data the same way (`basis`), else from the rows' lengths (`rows`), else,
    with a speed measured on rows of max_seq_length tokens (no dataset), those rows'
    (`max_seq_length`: the speed and the tokens from the same rows), else the basis run's scaled
    by the batch size (`basis_batch_scaled`)."""
    if SETTINGS["objective"].get(hp) == "grpo":
        # A grpo step trains on its sampled answers: batch x group of them, each at most
        # max_completion_tokens and the token that stops it (an upper bound).
        answers = hp.batch_size * int(SETTINGS["group_size"].get(hp))
        return float(answers * (int(SETTINGS["max_completion_tokens"].get(hp)) + 1)), "answers"
    if speed is not None:
        then = speed.run.hyperparameters
        same_data = data is not None and os.path.realpath(speed.run.data) == \
            os.path.realpath(data)
        if same_data and then.batch_size == hp.batch_size and \
                then.max_seq_length == hp.max_seq_length and then.mask_prompt == hp.mask_prompt:
            return speed.tokens_per_step, "basis"
    if lengths:
        cut = [min(n, hp.max_seq_length) - 1 for n in lengths]
        return hp.batch_size * max(1.0, sum(cut) / len(cut)), "rows"
    if measured:
        return float(hp.batch_size * max(hp.max_seq_length - 1, 1)), "max_seq_length"
    if speed is not None and speed.run.hyperparameters.batch_size:
        scaled = speed.tokens_per_step * hp.batch_size / speed.run.hyperparameters.batch_size
        return scaled, "basis_batch_scaled"
    return None, None
