"""Replicas (core/memory/replica.py): a config's graph with every width divided by k, whose
measured peak predicts the real one's. Planning here; measured against the calibration in
tests/unit/test_memory.py, through `plan` in tests/unit/test_plan_cli.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_replica import config

from zyquo_tui.core.memory.estimate import TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory import replica as replica_module
from zyquo_tui.core.memory.replica import plan_replica
from zyquo_tui.core.runs.settings import Method

REPO = Path(__file__).resolve().parents[2]


def test_the_planner_imports_no_mlx():
    code = ("import sys, zyquo_tui.core.memory.replica;"
            "print([m for m in ('mlx', 'mlx_lm', 'textual') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"


def test_the_start_gate_asks_a_replica_before_it_refuses(tiny_model, monkeypatch):
    """The terms over-state this config (all layers of the sample model at 512 tokens) by
    about 15%; with a budget just under their figure they refuse it, and the replica, trained
    for real in a subprocess, lets it start with what it measured recorded in the run. (The
    sample model's configs are small enough to be measured whole: WHOLE_BYTES held at 0 makes
    it a replica proper.)"""
    monkeypatch.setattr(replica_module, "WHOLE_BYTES", 0)
    from zyquo_tui.core.errors import UserError
    from zyquo_tui.core.memory.advisor import MemoryAdvisor, Verdict, gate
    from zyquo_tui.core.memory.budget import MemoryBudget
    from zyquo_tui.core.memory.history import MemoryHistory
    from zyquo_tui.core.runs.run import Run
    from zyquo_tui.core.runs.settings import Hyperparameters

    hp = Hyperparameters.from_dict({"num_layers": -1, "max_seq_length": 512, "batch_size": 4})
    run = Run.new(model=str(tiny_model), data=str(REPO / "sample_data" / "completions"),
                  method=Method.LORA, hyperparameters=hp)
    facts = ModelFacts.from_folder(tiny_model)
    unlimited = MemoryAdvisor(MemoryBudget.fixed(1 << 50), history=MemoryHistory())
    terms = unlimited.estimate(facts, TrainingConfig.from_run(run, 512)).total_bytes
    budget = int(terms * 0.97)
    advisor = MemoryAdvisor(MemoryBudget.fixed(budget), history=MemoryHistory())
    try:
        gate(run, advisor, longest_row_tokens=512)
    except UserError as refused:
        assert "won't fit" in refused.message
    else:
        raise AssertionError("the terms alone should refuse it")
    assessment = gate(run, advisor, longest_row_tokens=512, replica=True)
    assert assessment.verdict is not Verdict.WONT_FIT
    assert run.memory["replica"]["scale"] >= 2
    assert run.memory["model_estimate_bytes"] == terms
    assert run.memory["estimate_bytes"] < 0.95 * terms


def test_a_dpo_reference_in_another_folder_has_no_replica(tiny_model):
    """The replica scales the model it trains, not a second folder the run would load."""
    from zyquo_tui.core.memory.advisor import MemoryAdvisor
    from zyquo_tui.core.memory.budget import MemoryBudget
    from zyquo_tui.core.memory.history import MemoryHistory
    from zyquo_tui.core.runs.settings import Hyperparameters

    hp = Hyperparameters.from_dict({"zyquo_tui": {"objective": "dpo",
                                                  "reference": str(tiny_model)}})
    facts = ModelFacts.from_folder(tiny_model)
    advisor = MemoryAdvisor(MemoryBudget.fixed(1 << 40), history=MemoryHistory())
    terms = advisor.estimate(facts, TrainingConfig.from_hyperparameters(Method.LORA, hp, 64))
    estimate, why_not = advisor.replica_estimate(facts, terms, hyperparameters=hp)
    assert estimate is None
    assert why_not == ("no replica: its DPO reference is another model folder, which a "
                       "replica does not scale")


def test_a_replica_that_would_crowd_the_memory_is_not_measured(tiny_model, monkeypatch):
    """A replica k^2 times smaller than the config still needs memory: above half of what is
    free it is not started (nothing trains), and the terms judge. (WHOLE_BYTES at 0: a replica
    proper, not the config measured whole.)"""
    monkeypatch.setattr(replica_module, "WHOLE_BYTES", 0)
    from zyquo_tui.core.memory.advisor import MemoryAdvisor
    from zyquo_tui.core.memory.budget import MemoryBudget
    from zyquo_tui.core.memory.history import MemoryHistory

    facts = ModelFacts.from_folder(tiny_model)
    real = config(num_layers=-1, max_seq_length=512, longest_row_tokens=512)
    free = MemoryAdvisor(MemoryBudget.fixed(1 << 40), history=MemoryHistory())
    terms = free.estimate(facts, real)
    scale = plan_replica(json.loads((tiny_model / "config.json").read_text()), real).scale
    crowded = MemoryAdvisor(MemoryBudget.fixed(1 << 40, available_bytes=int(
        terms.model_bytes / scale ** 2)), history=MemoryHistory())
    estimate, why_not = crowded.replica_estimate(facts, terms)
    assert estimate is None
    assert why_not.startswith(f"no replica: even with its widths divided by {scale} it would "
                              "need about ")
    assert why_not.endswith("more than half the memory free")


def test_a_config_that_would_crowd_the_memory_measured_whole_is_not_measured(tiny_model):
    from zyquo_tui.core.memory.advisor import MemoryAdvisor
    from zyquo_tui.core.memory.budget import MemoryBudget
    from zyquo_tui.core.memory.history import MemoryHistory

    facts = ModelFacts.from_folder(tiny_model)
    real = config(num_layers=-1, max_seq_length=128, longest_row_tokens=128)
    terms = MemoryAdvisor(MemoryBudget.fixed(1 << 40), history=MemoryHistory()).estimate(
        facts, real)
    assert terms.model_bytes <= replica_module.WHOLE_BYTES  # measured whole, were there room
    crowded = MemoryAdvisor(MemoryBudget.fixed(1 << 40, available_bytes=terms.model_bytes),
                            history=MemoryHistory())
    estimate, why_not = crowded.replica_estimate(facts, terms)
    assert estimate is None
    assert why_not.startswith("no replica: measured whole it would need about ")
