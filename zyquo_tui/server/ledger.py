"""One ledger of memory for the machine: the server's models, their samplers and the queued runs
share one unified memory.

Between the server and runs, the machine's active-run lock decides: the server takes active.lock
before it loads its first model and lets it go once it has none loaded (a new runner gets it
when runs are queued: Supervisor.hold_machine, let_machine_go). So a queued run waits while the
server has models loaded (`runs list` and the dashboard say it waits for `zyquo-tui serve`),
and a create_model while a run of `zyquo-tui runs` trains is refused with one sentence naming
that run. Refused, not held: a run trains for hours, and a program told at once can go on
when it wants to, where a create_model's future would spin for those hours with nothing said.

Within the server, a new model is judged together with what is loaded: its memory verdict is
the one a run gets (core/memory/advisor.py gate, with config.toml's [memory] limit), against
the budget less the estimates of the models already loaded. Estimates, not a measurement: the
measured resident memory of a process includes what MLX caches and what the allocator keeps,
which says nothing of what the next model will need, and the estimates are what every run of
this machine is judged by. A training model counts its whole estimate (weights, adapters,
gradients, Adam's moments, a step's activations); a base model loaded for sampling counts its
weights and adapters, beside which a short answer's KV cache is small.

Everything here runs on the MLX thread, where models are loaded and freed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from zyquo_tui.server.trained_model import ModelSpec, RequestError

HOLDER_WORDS = "zyquo-tui serve"
STEP_ADVISOR_SECONDS = 30.0  # how long check_step's view of the machine's budget is kept
# The memory gate's refusal ends with the command line's override flag, which no request has.
CLI_OVERRIDE = ", or start it with an explicit override (--override-memory)"


class MemoryLedger:
    """The machine held while models are loaded, and each new model judged with the others."""

    def __init__(self, home: Path, loaded: Callable[[], list[int]]) -> None:
        self.home = home
        self.loaded = loaded  # the estimate (bytes) of each model loaded now
        self.fd: int | None = None  # active.lock, while held
        self._step_cache: tuple | None = None  # (made at, config.toml's mtime, advisor)
        self._needs: dict[tuple, int] = {}  # check_step's estimates by advisor and shape

    def _supervisor(self):
        from zyquo_tui.core.processes.supervisor import Supervisor
        from zyquo_tui.core.store.store import RunStore

        return Supervisor(RunStore(self.home))

    def hold(self) -> None:
        """The machine taken before a model loads: RequestError when a run has it."""
        if self.fd is not None:
            return
        fd, why_not = self._supervisor().hold_machine(HOLDER_WORDS)
        if fd is None:
            raise RequestError(f"This server cannot load a model now: {why_not}.")
        self.fd = fd

    def let_go_if_empty(self) -> bool:
        """Let the machine go when no model is loaded; whether queued runs start."""
        if self.fd is None or self.loaded():
            return False
        fd, self.fd = self.fd, None
        return self._supervisor().let_machine_go(fd)

    def admit_training(self, spec: ModelSpec):
        """The run a new training model's memory verdict judged (its `memory`, as run.json
        records a run's), with the loaded ones; RequestError with the verdict's sentence when
        the sum won't fit, before anything is loaded. Its batches are not known yet: the
        verdict judges a step of one row (trained_model.SERVED_ROW_TOKENS), and check_step
        each forward_backward by its own rows."""
        from zyquo_tui.core.errors import UserError
        from zyquo_tui.core.memory.advisor import gate
        from zyquo_tui.server.trained_model import checked_run

        run = checked_run(spec, None)
        self.hold()
        try:
            gate(run, self._advisor(run))
        except UserError as error:
            self.let_go_if_empty()
            raise RequestError(error.message.replace(CLI_OVERRIDE, "; or close a training "
                                                     "client to free its memory")) from None
        return run

    def check_step(self, run, own_bytes: int, data: list) -> None:
        """A forward_backward's rows judged before they are queued: its step's estimate (the
        model's weights, adapters and optimizer state, and this batch's activations and loss)
        within the budget less what the other loaded models hold; RequestError with one
        sentence when it won't fit, so a batch too large for the machine is refused instead
        of taking the server down with every program on it."""
        import dataclasses
        import math

        from zyquo_tui.core.formatting import fmt_bytes
        from zyquo_tui.core.memory.estimate import TrainingConfig
        from zyquo_tui.core.memory.facts import PAD_TO, ModelFacts

        if not data:
            return
        width = PAD_TO * max(1, math.ceil(max(len(d.tokens) for d in data) / PAD_TO))
        advisor = self._step_advisor(run)
        key = (id(advisor), run.id, len(data), width)
        need = self._needs.get(key)
        if need is None:  # a program sends the same shapes step after step
            config = dataclasses.replace(TrainingConfig.from_run(run), batch_size=len(data),
                                         max_seq_length=width, longest_row_tokens=width)
            need = advisor.estimate(ModelFacts.from_folder(run.model), config).total_bytes
            if len(self._needs) > 1024:
                self._needs.clear()
            self._needs[key] = need
        others = max(sum(self.loaded()) - own_bytes, 0)  # this model's own is in `need`
        room = advisor.budget.budget_bytes - others
        if need > room:
            held = f", less {fmt_bytes(others)} for the other models loaded" if others else ""
            raise RequestError(
                f"This forward_backward of {len(data)} rows of up to {width} tokens needs about "
                f"{fmt_bytes(need)}, more than the {fmt_bytes(max(room, 0))} this model may use "
                f"here ({advisor.budget.budget_source}{held}): send fewer or shorter rows a "
                "call (the SDK splits a batch at [serve] max_datums), or close other training "
                "clients.")

    def admit_sampler(self, spec: ModelSpec) -> int:
        """The bytes of a base model loaded for sampling (its weights and adapters), judged
        with the loaded ones; RequestError when they won't fit."""
        from zyquo_tui.core.formatting import fmt_bytes
        from zyquo_tui.core.memory.estimate import TrainingConfig
        from zyquo_tui.core.memory.facts import ModelFacts
        from zyquo_tui.server.trained_model import checked_run

        run = checked_run(spec, None)
        self.hold()
        advisor = self._advisor(run)
        estimate = advisor.estimate(ModelFacts.from_folder(run.model),
                                    TrainingConfig.from_run(run))
        need = estimate.breakdown.get("base_weights", 0) + estimate.breakdown.get(
            "trainable_parameters", 0)
        budget = advisor.budget
        if need > budget.budget_bytes:
            self.let_go_if_empty()
            raise RequestError(f"A sampler of {spec.base_model} won't fit in memory: its "
                               f"weights need about {fmt_bytes(need)}, more than the "
                               f"{fmt_bytes(budget.budget_bytes)} left here "
                               f"({budget.budget_source}); close a training client or "
                               "sampler to free memory.")
        return need

    def _step_advisor(self, run):
        """The machine's advisor for check_step, made again when config.toml changes or after
        STEP_ADVISOR_SECONDS: made for every forward_backward it cost a step of the sample
        model several percent of its time (bench/bench_tinker_server.py)."""
        import time

        config = self.home / "config.toml"
        try:
            stamp = config.stat().st_mtime_ns
        except OSError:
            stamp = None
        made, made_stamp, advisor = self._step_cache or (0.0, None, None)
        if advisor is None or made_stamp != stamp or \
                time.monotonic() - made > STEP_ADVISOR_SECONDS:
            advisor = self._machine_advisor(run)
            self._step_cache = (time.monotonic(), stamp, advisor)
        return advisor

    def _machine_advisor(self, run):
        """This machine's advisor within config.toml's [memory] limit."""
        from zyquo_tui.core.memory.advisor import MemoryAdvisor
        from zyquo_tui.core.store.user_settings import Settings

        return MemoryAdvisor.for_machine(self.home).within(
            run.hyperparameters, Settings.load(self.home).memory_limit_bytes)

    def _advisor(self, run):
        """This machine's advisor within config.toml's [memory] limit, its budget less what
        the loaded models' estimates hold."""
        from zyquo_tui.core.formatting import fmt_bytes
        from zyquo_tui.core.memory.advisor import MemoryAdvisor
        from zyquo_tui.core.memory.budget import capped

        advisor = self._machine_advisor(run)
        held = self.loaded()
        if not held:
            return advisor
        budget = advisor.budget
        models = "model" if len(held) == 1 else "models"
        less = capped(budget, max(budget.budget_bytes - sum(held), 0),
                      f"{budget.budget_source}, less {fmt_bytes(sum(held))} for the "
                      f"{len(held)} {models} already loaded on this server")
        return MemoryAdvisor(less, device=advisor.device, history=advisor.history)
