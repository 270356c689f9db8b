"""A run's memory verdict as its start records it (run.memory), and the same verdict made exact
once the trainer has tokenized the data.

A start judges by rows as long as max_seq_length, which needs no tokenizer (starting never
waits on tokenizing: core/processes/supervisor.py). That bound can be far above the run: the
sample model's chat run is bounded at 1.2 GiB and peaks at 7 MiB. The trainer tokenizes every
row anyway and reports the longest in its `started` event; when the run ends the runner judges
again with it, so the record holds the estimate for the run's real rows, and the machine's
history (core/memory/history.py, which only learns from exact records) learns from every run.
"""

from __future__ import annotations

from pathlib import Path

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


def make_exact(run: Run, home: Path, memory_limit_bytes: int | None,
               longest_row_tokens: int | None) -> bool:
    """Judge the run again by the longest row its trainer tokenized, in place of a record
    that assumed max_seq_length. Returns whether run.memory changed. A record that is exact
    already (the start tokenized the data because the bound did not fit), a run with no
    record, or a judgement that fails (a UserError: False; anything else is raised) leaves it
    as it was."""
    before = run.memory
    if not before or before.get("exact_sequence") or longest_row_tokens is None:
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
    return True
