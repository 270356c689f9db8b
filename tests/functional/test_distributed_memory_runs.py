"""The memory verdict of a distributed run is per host, from one rank's share of the batch:
`--ranks N` puts N ranks in this machine's memory, `--hosts` one rank in each host's."""

from __future__ import annotations

import pytest
from test_memory import MIB, _run, advisor, write_model

from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError
from zyquo_tui.core.memory.advisor import MemoryAdvisor
from zyquo_tui.core.store.known_hosts import record_known_hosts


def test_the_start_gate_counts_every_local_rank_and_records_each_host(tmp_path, monkeypatch):
    from zyquo_tui.core.memory.estimate import TrainingConfig
    from zyquo_tui.core.memory.facts import ModelFacts
    from zyquo_tui.core.processes.supervisor import Supervisor
    from zyquo_tui.core.store.store import RunStore

    folder = write_model(tmp_path / "m")
    single = _run(str(folder), max_seq_length=512)
    per_rank = advisor().estimate(ModelFacts.from_folder(folder), TrainingConfig.from_run(
        single).replace(batch_size=2, longest_row_tokens=None)).total_bytes
    budget = int(per_rank * 1.5)
    monkeypatch.setattr(MemoryAdvisor, "for_machine", classmethod(
        lambda cls, home=None: advisor(budget_bytes=budget)))
    from zyquo_tui.core.library import token_stats
    monkeypatch.setattr(token_stats, "row_token_lengths", lambda *a, **k: [500])
    supervisor = Supervisor(RunStore(tmp_path / "home").ensure())

    two_here = _run(str(folder), max_seq_length=512, zyquo_tui={"ranks": 2})
    with pytest.raises(UserError, match=r"2 ranks here") as caught:
        supervisor.check_memory(two_here)
    assert caught.value.exit_status == EXIT_PROBLEMS

    one_each = _run(str(folder), max_seq_length=512,
                    zyquo_tui={"hosts": ["localhost", "mini-two.invalid"]})
    supervisor.check_memory(one_each)
    assert one_each.memory["estimate_bytes"] == per_rank
    assert one_each.memory["world_size"] == 2 and one_each.memory["per_rank_batch_size"] == 2
    here, there = one_each.memory["hosts"]
    assert here["verdict"] in ("fits", "tight") and there["verdict"] is None

    record_known_hosts(tmp_path / "home", [{"host": "mini-two.invalid", "local": False,
                                            "free_memory_bytes": MIB}])
    with pytest.raises(UserError, match="won't fit in mini-two.invalid's memory"):
        supervisor.check_memory(one_each)
    supervisor.check_memory(one_each, override=True)
    assert one_each.memory["override"] is True
