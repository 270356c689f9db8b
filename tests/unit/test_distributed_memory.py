"""The memory verdict of a distributed run is per host, from one rank's share of the batch:
`--ranks N` puts N ranks in this machine's memory, `--hosts` one rank in each host's."""

from __future__ import annotations

import json

import pytest
from test_memory import write_model
from test_plan_cli import estimate_of, fake_machine, plan

from zyquo_tui.core.errors import EXIT_PROBLEMS
from zyquo_tui.core.formatting import fmt_bytes
from zyquo_tui.core.store.known_hosts import KNOWN_HOSTS_FILE, record_known_hosts


@pytest.fixture
def model(tmp_path):
    return write_model(tmp_path / "llama-test")


BATCH = ("--num-layers", "4", "--batch-size", "4")


def test_ranks_here_share_this_machines_memory_from_their_share_of_the_batch(
        capsys, model, isolated_home):
    per_rank = estimate_of(model, batch_size=2)
    fake_machine(isolated_home, 1 << 40)
    status, data, _ = plan(capsys, "--model", model, *BATCH, "--ranks", "2", "--json")
    assert status == 0, data
    assert data["world_size"] == 2 and data["per_rank_batch_size"] == 2
    assert data["estimate_bytes"] == per_rank  # one rank's
    assert data["settings"]["batch_size"] == 4  # the run's global batch, as given
    [here] = data["hosts"]
    assert here["local"] is True and here["ranks"] == [0, 1]
    assert here["estimate_bytes"] == 2 * per_rank and here["verdict"] == "fits"
    assert "2 ranks here" in data["reason"]
    status, out, _ = plan(capsys, "--model", model, *BATCH, "--ranks", "2")
    assert "host      this machine (ranks 0, 1): fits: needs about" in out


def test_two_ranks_that_each_fit_alone_can_together_not_fit(capsys, model, isolated_home):
    per_rank = estimate_of(model, batch_size=2)
    fake_machine(isolated_home, int(per_rank * 1.5))
    status, data, _ = plan(capsys, "--model", model, *BATCH, "--ranks", "2", "--json")
    assert status == EXIT_PROBLEMS
    assert data["verdict"] == "won't fit" and data["hosts"][0]["verdict"] == "won't fit"
    # The suggestions keep a batch the ranks can split.
    for suggestion in data["suggestions"]:
        assert suggestion["changes"].get("batch_size", 4) % 2 == 0


def test_a_batch_the_ranks_cannot_split_is_bad_input(capsys, model, isolated_home):
    fake_machine(isolated_home, 1 << 40)
    status, _, err = plan(capsys, "--model", model, "--num-layers", "4", "--batch-size", "3",
                          "--ranks", "2", "--json")
    assert status == 2
    assert "batch_size (3) must divide by the 2 processes" in err


def test_another_host_without_a_check_has_an_unknown_verdict_that_says_why(
        capsys, model, isolated_home):
    fake_machine(isolated_home, 1 << 40)
    status, data, _ = plan(capsys, "--model", model, *BATCH, "--hosts",
                           "localhost,mini-two.invalid", "--json")
    assert status == 0
    here, there = data["hosts"]
    assert here["local"] is True and here["ranks"] == [0]
    assert here["estimate_bytes"] == estimate_of(model, batch_size=2)  # one rank here
    assert there == {**there, "host": "mini-two.invalid", "local": False, "ranks": [1],
                     "verdict": None, "free_memory_bytes": None}
    assert there["reason"].startswith("unknown: no `zyquo-tui hosts check` has reached")
    status, out, _ = plan(capsys, "--model", model, *BATCH, "--hosts",
                          "localhost,mini-two.invalid")
    assert "host      mini-two.invalid (rank 1): unknown: no `zyquo-tui hosts check`" in out


def test_another_host_is_judged_against_the_free_memory_its_check_reported(
        capsys, model, isolated_home):
    fake_machine(isolated_home, 1 << 40)
    per_rank = estimate_of(model, batch_size=2)
    record_known_hosts(isolated_home, [{"host": "mini-two.invalid", "local": False,
                                        "free_memory_bytes": per_rank // 2}])
    status, data, _ = plan(capsys, "--model", model, *BATCH, "--hosts",
                           "localhost,mini-two.invalid", "--json")
    assert status == EXIT_PROBLEMS
    there = data["hosts"][1]
    assert there["verdict"] == "won't fit" and there["free_memory_bytes"] == per_rank // 2
    assert there["checked_at"] is not None
    assert data["verdict"] == "won't fit" and data["reason"].startswith("mini-two.invalid: ")

    record_known_hosts(isolated_home, [{"host": "mini-two.invalid", "local": False,
                                        "free_memory_bytes": per_rank * 4}])
    status, data, _ = plan(capsys, "--model", model, *BATCH, "--hosts",
                           "localhost,mini-two.invalid", "--json")
    assert status == 0 and data["hosts"][1]["verdict"] == "fits"
    assert data["hosts"][1]["reason"].startswith(
        "needs about ") and " for rank 1: 25% of the " in data["hosts"][1]["reason"]
    # two ranks on the other host: both named, and what they need together
    status, data, _ = plan(capsys, "--model", model, "--num-layers", "4", "--batch-size", "3",
                           "--hosts", "localhost,mini-two.invalid,mini-two.invalid", "--json")
    there = data["hosts"][1]
    assert there["ranks"] == [1, 2]
    assert there["reason"].startswith(
        f"needs about {fmt_bytes(2 * estimate_of(model, batch_size=1))} for ranks 1, 2: ")


def test_hosts_check_keeps_only_other_hosts_free_memory(isolated_home):
    record_known_hosts(isolated_home, [
        {"host": "localhost", "local": True, "free_memory_bytes": 5},
        {"host": "b", "local": False, "free_memory_bytes": 7},
        {"host": "c", "local": False, "free_memory_bytes": None}])
    known = json.loads((isolated_home / KNOWN_HOSTS_FILE).read_text())["hosts"]
    assert set(known) == {"b"} and known["b"]["free_memory_bytes"] == 7
