"""Evaluating a checkpoint against its base model, from the outside (`zyquo-tui eval`, the
checkpoints screen's Eval): the request checked here, the evaluator subprocess
(trainer/evaluate.py, entry point EVALUATE) run to its end, its result read.

The evaluation needs mlx, so it runs in that subprocess; everything a user can get wrong (the
run, the checkpoint, the model, the data file and its rows, the reward) is checked here first
and refused as UserError (exit 2) before any model loads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE, UserError
from zyquo_tui.core.library.eval_rows import DEFAULT_EVAL_MAX_TOKENS, read_eval_rows
from zyquo_tui.core.runs.settings import BUILTIN_REWARDS, SETTINGS
from zyquo_tui.core.runs.value_checks import RewardFunctions
from zyquo_tui.core.store.checkpoints import checkpoint_at, list_checkpoints
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system.child_process import run_child
from zyquo_tui.core.system.entry_points import EVALUATE, python_command

# Loading a model and answering every row twice can take long on a big test split.
EVAL_TIMEOUT_SECONDS = 3600.0
# What a reward function may take for one row's answer, as a run's reward_timeout defaults to.
REWARD_TIMEOUT_SECONDS = float(SETTINGS["reward_timeout"].default)
TEST_SPLIT = "test.jsonl"


@dataclass(frozen=True)
class EvalRequest:
    """What to evaluate: a model, with a run's adapter at one step or alone, on a file."""

    model: str
    data: Path
    rows: int  # how many rows the evaluation reads (the file's, or the limit)
    run_id: str | None = None
    adapters: Path | None = None
    step: int | None = None
    exact: bool = False
    reward: str | None = None
    max_tokens: int = DEFAULT_EVAL_MAX_TOKENS
    limit: int | None = None
    reward_timeout: float = REWARD_TIMEOUT_SECONDS

    def command(self) -> list[str]:
        argv = python_command(EVALUATE, "--model", self.model, "--data", str(self.data),
                              "--max-tokens", str(self.max_tokens))
        if self.adapters is not None:
            argv += ["--adapters", str(self.adapters), "--step", str(self.step)]
        if self.exact:
            argv.append("--exact")
        if self.reward:
            argv += ["--reward", self.reward, "--reward-timeout", repr(self.reward_timeout)]
        if self.limit is not None:
            argv += ["--limit", str(self.limit)]
        return argv


def default_data(store: RunStore, run_id: str) -> Path:
    """The run's test split: test.jsonl in its data folder. UserError when it has none."""
    run = store.get(run_id)
    test = Path(run.data) / TEST_SPLIT
    if not test.is_file():
        raise UserError(f"Run {run.id}'s data folder {run.data} has no {TEST_SPLIT}; give the "
                        "rows to evaluate with --data FILE.jsonl.")
    return test


def default_step(store: RunStore, run_id: str) -> int:
    """The checkpoint evaluated when none is named: the run's best (as `runs show` marks it),
    else its latest."""
    from zyquo_tui.core.events import protocol as ev
    from zyquo_tui.core.events.metrics import RunMetrics

    checkpoints = list_checkpoints(store.adapters_dir(run_id))
    metrics = RunMetrics()
    metrics.ingest(ev.read_events(store.events_path(run_id)))
    best = metrics.best_checkpoint_step()
    if best is not None and any(c.step == best for c in checkpoints):
        return best
    return checkpoint_at(store.adapters_dir(run_id), None, run_id).step


def eval_request(store: RunStore, run_id: str | None = None, *, step: int | None = None,
                 model: str | None = None, data: Path | None = None, exact: bool = False,
                 reward: str | None = None, max_tokens: int = DEFAULT_EVAL_MAX_TOKENS,
                 limit: int | None = None,
                 reward_timeout: float = REWARD_TIMEOUT_SECONDS) -> EvalRequest:
    """The request, checked: UserError (exit 2) for anything that cannot be evaluated."""
    if (run_id is None) == (model is None):
        raise UserError("Give a run id or --model MODEL (not both): what to evaluate.")
    if exact and reward:
        raise UserError("Give --exact or --reward, not both: one score of the answers.")
    if max_tokens < 1:
        raise UserError(f"--max-tokens is {max_tokens}; give a whole number of at least 1.")
    if limit is not None and limit < 1:
        raise UserError(f"--limit is {limit}; give a whole number of rows, at least 1.")
    if not reward_timeout > 0:
        raise UserError(f"--reward-timeout is {reward_timeout:g}; give the seconds a reward may "
                        "take for one answer, more than 0.")
    if reward:
        problems = RewardFunctions(BUILTIN_REWARDS)("--reward", [reward])
        if problems:
            raise UserError(problems[0][1])
    adapters = None
    if run_id is not None:
        run = store.get(run_id)
        run_id = run.id
        adapters = store.adapters_dir(run.id)
        step = checkpoint_at(adapters, step, run.id).step if step is not None \
            else default_step(store, run.id)
        model = run.model
        if not (Path(model) / "config.json").is_file():
            raise UserError(f"The model of run {run.id}, {model}, is no longer a model folder "
                            "(no config.json); put it back to evaluate the adapter.")
        if data is None:
            data = default_data(store, run.id)
    else:
        from zyquo_tui.core.library.models import resolve_model

        assert model is not None
        if step is not None:
            raise UserError("--checkpoint needs a run id: a model alone has no checkpoints.")
        model = str(resolve_model(model, store.home).path)
        if data is None:
            raise UserError("Give the rows to evaluate the model on with --data FILE.jsonl.")
    data = Path(data).expanduser().absolute()
    rows = read_eval_rows(data, limit)
    return EvalRequest(model, data, len(rows), run_id, adapters, step, exact, reward or None,
                       max_tokens, limit, reward_timeout)


def parse_line(line: str) -> dict[str, Any] | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "event" in event else None


def run_evaluation(request: EvalRequest, *, timeout: float = EVAL_TIMEOUT_SECONDS,
                   cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The evaluator run to its end: the result as `eval --json` prints it (docs/CLI.md).
    UserError with the evaluator's sentence when it fails (exit 2 for bad input it found,
    else 1)."""
    status, stdout, stderr = run_child(request.command(), timeout=timeout, cancelled=cancelled,
                                       what="The evaluation",
                                       timeout_hint="evaluate fewer rows with --limit")
    result = None
    for event in filter(None, map(parse_line, stdout.splitlines())):
        if event["event"] == "error":
            raise UserError(event["message"],
                            EXIT_USAGE if event.get("bad_input") else EXIT_PROBLEMS)
        if event["event"] == "result":
            result = event
    if status != 0 or result is None:
        tail = stderr.strip().splitlines()[-1:] or [f"exit status {status}"]
        raise UserError(f"The evaluator stopped without a result ({tail[0]}).", EXIT_PROBLEMS)
    return {"schema_version": 1, "run_id": request.run_id, "step": request.step,
            "model": request.model, "data": str(request.data), "rows": result["rows"],
            "metric": result["metric"], "reward": request.reward,
            "max_tokens": request.max_tokens, "base": result["base"],
            "adapter": result["adapter"], "difference": result["difference"]}


def figure_text(figure: dict[str, Any] | None, digits: int = 3) -> str:
    """A mean ± its standard error, as the CLI's table and the dashboard show one."""
    if not figure or figure.get("mean") is None:
        return "-"
    text = f"{figure['mean']:.{digits}f}"
    if figure.get("se") is not None:
        text += f" ± {figure['se']:.{digits}f}"
    return text


def metric_label(result: dict[str, Any]) -> str:
    if result["metric"] == "exact":
        return "exact match"
    return f"reward {result['reward']}"


def result_rows(result: dict[str, Any]) -> list[list[str]]:
    """The table of a result: metric | base | adapter | difference (the adapter's columns
    only when a run's adapter was evaluated)."""
    keys = [("nll", "NLL per token")]
    if result["metric"] is not None:
        keys.append(("score", metric_label(result)))
    rows = []
    for key, label in keys:
        row = [f"{label} (n={result['base'][key]['n']})", figure_text(result["base"][key])]
        if result["adapter"] is not None:
            difference = result["difference"][key]
            sign = "+" if difference.get("mean") is not None and difference["mean"] >= 0 else ""
            row += [figure_text(result["adapter"][key]), sign + figure_text(difference)]
        rows.append(row)
    return rows


def result_headers(result: dict[str, Any]) -> list[str]:
    if result["adapter"] is None:
        return ["METRIC", "MODEL"]
    return ["METRIC", "BASE", f"ADAPTER (step {result['step']})", "DIFFERENCE"]


def eval_event_text(event: dict[str, Any]) -> str:
    """A run's in-run evaluation (an `eval` event) in one line, as `runs show` and the run's
    view show it."""
    text = (f"step {event.get('iteration')}: answer NLL "
            f"{figure_text({'mean': event.get('nll'), 'se': event.get('nll_se')})}")
    if event.get("metric") is not None:
        name = "exact match" if event["metric"] == "exact" else "reward"
        text += f", {name} {figure_text({'mean': event.get('score'), 'se': event.get('score_se')})}"
    return text + f" ({event.get('rows')} rows)"
