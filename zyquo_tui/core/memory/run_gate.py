"""A run's memory verdict as its start records it (run.memory), and the same verdict made exact
once the trainer has tokenized the data.

A start judges by rows as long as max_seq_length, which needs no tokenizer (starting never
waits on tokenizing: core/processes/supervisor.py). That bound can be far above the run: the
sample model's chat run is bounded at 1.2 GiB and peaks at 7 MiB. The trainer tokenizes every
row anyway and reports the longest in its `started` event; when the run ends the runner judges
again with it, so the record holds the estimate for the run's real rows, and the machine's
history (core/memory/history.py, which only learns from exact records) learns from every run.

Where `plan` or the new-run form measured the run's config, the record holds that figure (kept:
core/memory/replica_cache.py). A completed run that nobody planned has its config measured by
its runner (whole, or on its replica: core/memory/replica.py) before its record is made exact,
so its record too holds the figure `plan` would have shown, not the terms' (which over-state
small configs most).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.runs.run import Run


def judge_run_memory(run: Run, home: Path, memory_limit_bytes: int | None, *,
                     override: bool = False, longest_row_tokens: int | None = None,
                     replica: bool = False) -> None:
    """Put the run's verdict in run.memory (advisor.gate), a distributed run's host by host;
    raises UserError as gate does (won't fit without override: exit 1; bad settings: 2)."""
    from zyquo_tui.core.memory.advisor import MemoryAdvisor, gate
    from zyquo_tui.core.memory.host_verdicts import (
        gate_hosts,
        known_hosts,
        placed_advisor,
        placement_of,
    )

    # A distributed run is judged per host: one rank's share of the batch, times the ranks on
    # each machine (core/memory/host_verdicts.py).
    placement = placement_of(run.hyperparameters.zyquo_tui)
    advisor = placed_advisor(MemoryAdvisor.for_machine(home).within(
        run.hyperparameters, memory_limit_bytes), placement)
    assessment = gate(run, advisor, override=override, longest_row_tokens=longest_row_tokens,
                      replica=replica)
    if placement.distribution:
        gate_hosts(run, assessment, advisor, placement, known_hosts(home), override=override)


def measure_for_record(run: Run, home: Path, memory_limit_bytes: int | None,
                       longest_row_tokens: int | None, *,
                       cancelled: Callable[[], bool] | None = None) -> bool:
    """Measure the run's exact config (whole, or on its replica: a subprocess, seconds; kept)
    where make_exact would otherwise record the terms' figure. A distributed run (a rank's
    share), a config measured before and one no replica stands for (a distillation, say) are
    left alone; `cancelled()` turning true stops the measurement (nothing kept). Returns
    whether it measured. Call it outside the store's lock: it takes seconds."""
    from zyquo_tui.core.memory.advisor import MemoryAdvisor
    from zyquo_tui.core.memory.estimate import TrainingConfig
    from zyquo_tui.core.memory.facts import ModelFacts
    from zyquo_tui.core.memory.host_verdicts import placement_of

    before = run.memory
    if not before or longest_row_tokens is None or _exact_and_measured(before):
        return False  # make_exact keeps the record as it is
    if placement_of(run.hyperparameters.zyquo_tui).distribution:
        return False
    advisor = MemoryAdvisor.for_machine(home).within(run.hyperparameters, memory_limit_bytes)
    model = ModelFacts.from_folder(run.model)
    estimate = advisor.estimate(model, TrainingConfig.from_run(run, int(longest_row_tokens)))
    if estimate.problems:
        return False
    # A config measured before (by plan, the form, an earlier run) answers from the cache.
    measured, _why_not = advisor.replica_estimate(model, estimate,
                                                  hyperparameters=run.hyperparameters,
                                                  extra_config=run.extra_config,
                                                  cancelled=cancelled)
    return measured is not None and not measured.replica.get("measured_at")


def make_exact(run: Run, home: Path, memory_limit_bytes: int | None,
               longest_row_tokens: int | None) -> bool:
    """Judge the run again by the longest row its trainer tokenized, in place of a record
    that assumed max_seq_length. Returns whether run.memory changed. A record that is exact
    already (the start tokenized the data because the bound did not fit, or an earlier
    session of the run ended) changes only to take a measurement of the config kept since
    (measure_for_record); a run with no record, or a judgement that fails (a UserError:
    False; anything else is raised) leaves it as it was."""
    before = run.memory
    if not before or longest_row_tokens is None or _exact_and_measured(before):
        return False
    try:
        judge_run_memory(run, home, memory_limit_bytes,
                         override=bool(before.get("override")),
                         longest_row_tokens=int(longest_row_tokens))
    except Exception as error:
        run.memory = before  # the bound stays whole
        if isinstance(error, UserError):  # the model folder gone, say
            return False
        raise
    if before.get("exact_sequence") and run.memory.get("replica") is None:
        run.memory = before  # nothing measured: the start's tokens stand
        return False
    return True


def _exact_and_measured(record: dict) -> bool:
    """A record for the real rows whose figure was measured: nothing better to judge by."""
    return bool(record.get("exact_sequence")) and record.get("replica") is not None
