"""Trying a run's adapter against its base model: the generator subprocess, from the outside.

Generation needs mlx, so it runs in `trainer/generate.py` (entry point TRY_GENERATE), which
writes one JSON object a line (its docstring has the protocol). `try_once` answers one prompt
to the end (`runs try`); `TrySession` keeps one process for many prompts and hands over its
events as they arrive (the dashboard's try screen, which reads them in a worker thread).
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError
from zyquo_tui.core.store.checkpoints import checkpoint_at
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system.child_process import run_child
from zyquo_tui.core.system.entry_points import TRY_GENERATE, python_command

DEFAULT_MAX_TOKENS = 100
# Loading a large model and answering twice can take minutes on a busy machine.
TRY_TIMEOUT_SECONDS = 900.0


@dataclass(frozen=True)
class TryRequest:
    """What to generate with: a run's model and the adapter of one of its checkpoints."""

    run_id: str
    run_name: str
    model: str
    adapters: Path
    step: int
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    base: bool = True

    def command(self, prompt: str | None = None) -> list[str]:
        """The generator's argv: one prompt, or (None) prompts read from its stdin."""
        argv = python_command(TRY_GENERATE, "--model", self.model, "--adapters",
                              str(self.adapters), "--step", str(self.step), "--max-tokens",
                              str(self.max_tokens), "--temperature", str(self.temperature))
        if not self.base:
            argv.append("--no-base")
        if prompt is not None:
            argv += ["--prompt", prompt]
        return argv


def try_request(store: RunStore, run_id: str, step: int | None = None, *,
                max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = 0.0,
                base: bool = True) -> TryRequest:
    """The request for `run_id` at `step` (None: its latest checkpoint), checked: UserError
    (exit 2) for a step, a model folder or a setting that cannot be used."""
    if max_tokens < 1:
        raise UserError(f"--max-tokens is {max_tokens}; give a whole number of at least 1.")
    if not math.isfinite(temperature) or temperature < 0:
        raise UserError(f"--temperature is {temperature}; give 0 (the most likely answer) or "
                        "more (more varied answers).")
    run = store.get(run_id)
    checkpoint = checkpoint_at(store.adapters_dir(run.id), step, run.id)
    if not (Path(run.model) / "config.json").is_file():
        raise UserError(f"The model of run {run.id}, {run.model}, is no longer a model folder "
                        "(no config.json); put it back to try the adapter.")
    return TryRequest(run.id, run.name, run.model, store.adapters_dir(run.id), checkpoint.step,
                      max_tokens, temperature, base)


EMPTY_ANSWER = "(an empty answer)"


def shown_answer(text: str) -> str:
    """An answer as the dashboard and the CLI show it: without the newlines around it, and
    said to be empty when that is all it was (an untrained model often answers only those)."""
    return text.strip("\n") or EMPTY_ANSWER


def parse_event(line: str) -> dict[str, Any] | None:
    """One line of the generator's output as an event; None for anything else."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "event" in event else None


def try_once(request: TryRequest, prompt: str, *,
             timeout: float = TRY_TIMEOUT_SECONDS) -> dict[str, Any]:
    """Both answers to one prompt: {"adapter": TEXT, "base": TEXT or None, "step": N}.
    UserError (exit 1) with the generator's sentence when it fails."""
    status, stdout, stderr = run_child(request.command(prompt), timeout=timeout,
                                       what="Generation", timeout_hint="ask for fewer tokens")
    answers: dict[str, Any] = {"adapter": None, "base": None, "step": request.step}
    for event in filter(None, map(parse_event, stdout.splitlines())):
        if event["event"] == "answer":
            answers[event["side"]] = event["text"]
        elif event["event"] == "error":
            raise UserError(event["message"], EXIT_PROBLEMS)
    if status != 0 or answers["adapter"] is None:
        tail = stderr.strip().splitlines()[-1:] or [f"exit status {status}"]
        raise UserError(f"The generator stopped without an answer ({tail[0]}).", EXIT_PROBLEMS)
    return answers


class TrySession:
    """One generator process kept for many prompts; `ask` sends one, `next_event` blocks for
    the next event (None once the process has ended). `close` ends the process: the caller
    must call it (a cancelled worker does not kill its child)."""

    def __init__(self, request: TryRequest) -> None:
        self.request = request
        self._stderr = tempfile.TemporaryFile()
        # stdin is our pipe, never the terminal (a child reading it fights Textual for keys).
        self.process = subprocess.Popen(request.command(), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                        bufsize=1)
        self.asked = 0

    def ask(self, prompt: str) -> int:
        """Send a prompt; returns its index (the events about it carry it)."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"prompt": prompt}) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise UserError("The generator has stopped; open the try screen again.",
                            EXIT_PROBLEMS) from None
        self.asked += 1
        return self.asked - 1

    def next_event(self) -> dict[str, Any] | None:
        assert self.process.stdout is not None
        while True:
            try:
                line = self.process.stdout.readline()
            except (ValueError, OSError):  # closed by `close` from another thread
                line = ""
            if not line:
                return self._ended()
            event = parse_event(line)
            if event is not None:
                return event

    def _ended(self) -> None:
        self.process.wait()

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        lines = self._stderr.read().decode("utf-8", errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._stderr.close()
