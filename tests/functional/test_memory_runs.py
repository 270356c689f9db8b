"""The memory advisor: each term of the estimate, each method, the verdict, suggestions, the gate,
the machine's history, the budget, and the estimate against real measured peaks."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import statistics
import subprocess
import sys

import pytest
from test_memory import (
    CALIBRATION,
    MIB,
    REPO,
    _calibration_config,
    _replica_errors,
    _run,
    advisor,
    write_model,
)

from zyquo_tui.core.memory.advisor import TIGHT_FRACTION, MemoryAdvisor
from zyquo_tui.core.memory.budget import MemoryBudget
from zyquo_tui.core.memory.estimate import (
    CPU_COEFFICIENTS,
    TrainingConfig,
    combine,
)
from zyquo_tui.core.memory.facts import LORA_BYTES, ModelFacts
from zyquo_tui.core.memory.history import MemoryHistory
from zyquo_tui.core.memory.replica import REPLICA_ERROR
from zyquo_tui.core.runs.run import RunState

# The worst held-out error (either side) of the table in docs/memory.md.
HELD_OUT_WORST = 0.19  # docs/memory.md: "115 configs of 27 families held out: max 18.5%"


def test_the_start_gate_counts_tokens_only_when_the_cap_alone_does_not_fit(tmp_path, monkeypatch):
    from zyquo_tui.core.library import token_stats
    from zyquo_tui.core.processes.supervisor import Supervisor
    from zyquo_tui.core.store.store import RunStore

    run = _run(str(write_model(tmp_path / "m")), max_seq_length=8192)
    run.extra_config = {"prompt_feature": "question"}
    model = ModelFacts.from_folder(run.model)
    capped = TrainingConfig.from_hyperparameters(run.method, run.hyperparameters)
    short = advisor().estimate(model, capped.replace(longest_row_tokens=50)).total_bytes
    long = advisor().estimate(model, capped).total_bytes
    budget = 2 * short
    assert long > budget, "the test needs a cap that does not fit where short rows do"
    monkeypatch.setattr(MemoryAdvisor, "for_machine", classmethod(
        lambda cls, home=None: advisor(budget_bytes=budget)))
    counted = []

    def row_token_lengths(model_path, data, extra_config=None, **options):
        counted.append((model_path, data, extra_config))
        return [50, 12]
    monkeypatch.setattr(token_stats, "row_token_lengths", row_token_lengths)

    Supervisor(RunStore(tmp_path / "home").ensure()).check_memory(run)

    assert counted == [(run.model, run.data, {"prompt_feature": "question"})]
    assert run.memory["verdict"] != "won't fit" and run.memory["exact_sequence"] is True


def test_a_run_started_by_the_bound_ends_with_its_memory_record_exact(tiny_model):
    """The start judges by max_seq_length (no tokenizer); the trainer reports the longest row
    it tokenized, and when the run ends the record holds the estimate for the real rows (the
    terms a start that tokenized would record, and the figure measured whole), and the
    machine's history learns from it."""
    import copy
    import time

    from helpers import make_run, stop_runs, wait_until_ended

    from zyquo_tui.core.library.token_stats import row_token_lengths
    from zyquo_tui.core.memory.run_gate import judge_run_memory
    from zyquo_tui.core.processes.supervisor import Supervisor

    store, run = make_run(tiny_model, REPO / "sample_data" / "chat", iters=2,
                          max_seq_length=2048)
    supervisor = Supervisor(store)
    bound, tokenized = copy.deepcopy(run), copy.deepcopy(run)
    judge_run_memory(bound, store.home, supervisor.settings.memory_limit_bytes)
    judge_run_memory(tokenized, store.home, supervisor.settings.memory_limit_bytes,
                     longest_row_tokens=max(row_token_lengths(run.model, run.data)))
    assert tokenized.memory["estimate_bytes"] < bound.memory["estimate_bytes"] / 10, \
        "the test needs rows far shorter than max_seq_length"
    try:
        supervisor.start(run.id)
        assert wait_until_ended(supervisor, run.id).state is RunState.COMPLETED
        deadline = time.monotonic() + 60  # the runner settles just after the trainer ends
        while not MemoryHistory.load(store.home).records:
            assert time.monotonic() < deadline, "the run never reached the memory history"
            time.sleep(0.1)
    finally:
        stop_runs(store, run.id)

    memory = supervisor.get(run.id).memory
    assert memory["exact_sequence"] is True
    assert memory["model_estimate_bytes"] == tokenized.memory["model_estimate_bytes"]
    # Nobody planned it, so its runner measured the config whole before the record was made
    # exact (core/memory/run_gate.py): the terms stay as the breakdown, and a correction line
    # takes them to the measured figure.
    assert memory["replica"]["scale"] == 1
    terms = {k: v for k, v in memory["breakdown"].items() if k != "replica_correction"}
    assert terms == tokenized.memory["breakdown"]
    assert memory["estimate_bytes"] == (tokenized.memory["model_estimate_bytes"]
                                        + memory["breakdown"]["replica_correction"])
    history = MemoryHistory.load(store.home)
    (record,) = history.records
    assert record["run_id"] == run.id
    assert record["estimate_bytes"] == tokenized.memory["model_estimate_bytes"]
    # The run's resident peak counts from its footprint ready to train (the tokenizer and the
    # rows are the runtime's): a 7 MiB run does not scale this model's later estimates.
    assert record["ready_rss_bytes"] >= record["start_rss_bytes"]
    assert history.correction(memory["device"], run.model) is None


def test_a_record_made_exact_keeps_the_bound_when_the_judgement_fails(tmp_path):
    import copy

    from zyquo_tui.core.memory.run_gate import judge_run_memory, make_exact

    run = _run(str(write_model(tmp_path / "m")), max_seq_length=8192)
    home = tmp_path / "home"
    judge_run_memory(run, home, None, override=True)
    bound = dict(run.memory)
    assert bound["exact_sequence"] is False

    assert not make_exact(run, home, None, None)  # no longest row reported
    exact = copy.deepcopy(run)
    judge_run_memory(exact, home, None, override=True, longest_row_tokens=60)
    judged = dict(exact.memory)
    assert not make_exact(exact, home, None, 50)  # exact already: the start's tokens stand
    assert exact.memory == judged
    shutil.rmtree(run.model)
    assert not make_exact(run, home, None, 50)  # the model folder is gone
    assert run.memory == bound


def _calibration():
    matrix = json.loads((CALIBRATION / "matrix.json").read_text())
    measured = json.loads((CALIBRATION / "measurements.json").read_text())["measurements"]
    models = json.loads((CALIBRATION / "models.json").read_text())
    return matrix, measured, models


def _calibration_script():
    sys.path.insert(0, str(REPO / "bench"))
    import calibrate_memory

    return calibrate_memory


@functools.cache
def _held_out() -> tuple[dict, dict]:
    """Leave one family out (bench/calibrate_memory.py): each model family (one generated model
    and its configs) estimated by multipliers fitted without it, from neutral starting values,
    with the fit's choices made from the other families, as a new user's model would be.
    ({family: HeldOut}, the matrix)."""
    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    rows = calibrate.fit_rows(matrix, {"measurements": measured}, models)
    return calibrate.held_out_by_family(rows), matrix


def _held_out_errors() -> tuple[dict, dict]:
    """({family: {config: error}}, the matrix), held out as `_held_out` says."""
    held, matrix = _held_out()
    return {family: entry.errors for family, entry in held.items()}, matrix


def _run_to_run_spread() -> float:
    calibrate = _calibration_script()
    _, measured, _ = _calibration()
    repeats = json.loads((CALIBRATION / "repeats.json").read_text())
    return calibrate.run_to_run_spread({"measurements": measured}, repeats)


def test_the_fit_reports_the_configs_outside_the_target_as_docs_count_them():
    """--fit prints the held-out configs that miss the target (over by more than 15% or
    under by more than 7%), worst first; docs/memory.md states how many there are."""
    calibrate = _calibration_script()
    line = calibrate.outside_target_line({"a": 0.151, "b": -0.071, "c": 0.149, "d": -0.2,
                                          "e": -0.069})
    assert line == ("outside the target (+15% over, -7% under): 3 of 5: d -20.0%, "
                    "a +15.1%, b -7.1%")
    held, _ = _held_out_errors()
    errors = {config: error for family in held.values() for config, error in family.items()}
    missed = [e for e in errors.values() if e > calibrate.TARGET_OVER
              or e < -calibrate.TARGET_UNDER]
    docs = (REPO / "docs" / "memory.md").read_text()
    assert f"{len(missed)} of {len(errors)} by the terms" in docs


def test_the_terms_margin_is_the_worst_held_out_underestimate_plus_the_run_to_run_spread():
    held, matrix = _held_out_errors()
    errors = {config: error for family in held.values() for config, error in family.items()}
    # The verdict's margin is the worst held-out underestimate (the dangerous side), as
    # measured, plus how far a peak moves from one run to the next: it must cover every
    # family and that spread, and not be padded beyond them (rounded up to the percent).
    lowest = min(errors, key=errors.get)
    spread = _run_to_run_spread()
    assert 0 < spread < 0.05  # configs were measured again (repeats.json)
    need = -errors[lowest] + spread
    assert need <= CPU_COEFFICIENTS.held_out_error <= need + 0.01, (
        f"{lowest}: {errors[lowest]:+.1%}, spread {spread:.1%}")
    assert TIGHT_FRACTION == pytest.approx(1 - CPU_COEFFICIENTS.held_out_error)
    assert statistics.median(abs(e) for e in errors.values()) <= 0.07
    # Every held-out error is within what docs/memory.md reports (its table's worst).
    assert max(abs(e) for e in errors.values()) <= HELD_OUT_WORST

    # The families span what users train: vocabularies to 262k, 4- and 8-bit bases, GQA
    # ratios from 1 to 8, tied and untied embeddings, every method and optimizer.
    assert len(held) >= 20
    shapes = [matrix["models"][family] for family in held]
    assert max(shape.get("vocab_size", 512) for shape in shapes) >= 262144
    assert sum(shape.get("vocab_size", 512) >= 128000 for shape in shapes) >= 4
    assert {shape.get("quantize_bits") for shape in shapes} >= {None, 4, 8}
    assert {shape["num_heads"] // shape["num_kv_heads"] for shape in shapes} >= {1, 2, 4, 8}
    assert {shape.get("tie_word_embeddings", True) for shape in shapes} == {True, False}
    entries = [e for e in matrix["configs"] if e["id"] in errors]
    assert {e.get("method", "lora") for e in entries} == {"lora", "dora", "qlora", "full"}
    assert any(e.get("grad_checkpoint") for e in entries)
    assert {e.get("optimizer", "adam") for e in entries} >= {"adam", "adamw", "sgd", "adafactor",
                                                             "muon"}


def test_docs_held_out_table_is_the_one_recomputed_from_the_measurements():
    """docs/memory.md's held-out table (per family: errors, the choices made without it, the
    terms it alone measures) and its summary line are what the procedure gives now."""
    calibrate = _calibration_script()
    held, matrix = _held_out()
    docs = (REPO / "docs" / "memory.md").read_text()
    lines = calibrate.family_table_lines(held, markdown=True, matrix=matrix)
    assert len(lines) == len(held) + 2
    for line in lines:
        assert line in docs, f"docs/memory.md lacks: {line}"
    assert calibrate.held_out_summary(held) in docs


def test_docs_small_steps_table_is_the_one_recomputed_from_the_measurements():
    """docs/memory.md's table of the small steps (bench/memory_calibration/small: the sample
    model's shape and short rows, never fitted) is the shipped terms' against the stored
    peaks, and says how far the terms over-state them."""
    calibrate = _calibration_script()
    small = CALIBRATION / "small"
    matrix = json.loads((small / "matrix.json").read_text())
    stored = json.loads((small / "measurements.json").read_text())
    models = json.loads((small / "models.json").read_text())
    assert {entry["id"] for entry in matrix["configs"]} == set(stored["measurements"])
    rows = calibrate.table_rows(matrix, stored, models,
                                MemoryAdvisor.for_calibration(device="cpu"))
    docs = (REPO / "docs" / "memory.md").read_text()
    for line in calibrate.markdown_table_lines(rows):
        assert line in docs, f"docs/memory.md lacks: {line}"
    errors = [row["error"] for row in rows]
    over = sum(error > 0 for error in errors)
    assert (f"The terms over-state {over} of the {len(rows)}, by up to {max(errors):.1%} "
            f"(median {statistics.median(map(abs, errors)):.1%})") in docs.replace("\n", " ")
    missed = calibrate.outside_target_line({row["id"]: row["error"] for row in rows})
    count = missed.split(": ")[1]  # "27 of 34"
    assert f"{count.split(' of ')[0]} of the {len(rows)} miss the target" in \
        docs.replace("\n", " ")


def test_a_held_out_family_lends_its_estimate_nothing(monkeypatch):
    """Change every measured peak of one family: the estimates of its configs held out do not
    move (its errors move only by the peaks' change), though the fit on every family does. Nor
    do they start from the shipped multipliers (fitted with the family in): changing those
    changes nothing held out."""
    from zyquo_tui.core.memory import estimate as estimate_module

    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    rows = calibrate.fit_rows(matrix, {"measurements": measured}, models)
    family = "deep-w64-l16-bf16"  # the source of a third of the checkpointed configs
    moved = [dataclasses.replace(row, peak=int(row.peak * 1.3)) if row.family == family
             else row for row in rows]
    before = calibrate.hold_out(calibrate.Table(rows), family)
    after = calibrate.hold_out(calibrate.Table(moved), family)
    for config, error in before.errors.items():
        assert (1 + after.errors[config]) * 1.3 == pytest.approx(1 + error, rel=1e-6)
    assert after.choices == before.choices
    everywhere = calibrate.fitted_coefficients(rows)[0]
    assert calibrate.fitted_coefficients(moved)[0] != everywhere

    wide = calibrate.hold_out(calibrate.Table(rows), "w512-l2-wide-bf16")
    doubled = dataclasses.replace(CPU_COEFFICIENTS, **{
        f.name: 2 * getattr(CPU_COEFFICIENTS, f.name) for f in dataclasses.fields(
            CPU_COEFFICIENTS) if f.name not in ("held_out_error", "calibrated")})
    monkeypatch.setattr(estimate_module, "CPU_COEFFICIENTS", doubled)
    assert calibrate.hold_out(calibrate.Table(rows), "w512-l2-wide-bf16").errors == wide.errors


def test_a_family_that_alone_measures_a_term_is_reported_as_its_only_source():
    """The optimizer step's multipliers are set by the configs whose peak is the step: without
    the 320-wide family and the two deep full fine-tuning ones, the 512-wide family's are the
    only ones, so held out it keeps their neutral values and says so; with them, each is
    fitted from the others."""
    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    rows = calibrate.fit_rows(matrix, {"measurements": measured}, models)
    others = {"w320-l3-wide-bf16", "w384-l8-wide-bf16", "w256-l16-bf16"}
    alone = calibrate.Table([row for row in rows if row.family not in others])
    held = calibrate.hold_out(alone, "w512-l2-wide-bf16")
    assert held.only_source == {"update_lora", "update_full"}
    both = calibrate.Table(rows)
    assert calibrate.hold_out(both, "w512-l2-wide-bf16").only_source == frozenset()
    assert calibrate.hold_out(both, "w320-l3-wide-bf16").only_source == frozenset()


def test_the_shapes_the_terms_over_stated_are_within_15_percent_by_plan_and_by_replica():
    """The 12-layer model trained on every layer with adafactor and grad checkpointing at
    2 x 2,048 tokens (LoRA and full fine-tuning; the terms over-stated them by 25% and 50% when
    they counted the recomputed layer's attention whole in the loss's phase) and full
    fine-tuning with SGD, on models the calibration had not seen before they were added: the
    shipped terms (what `plan --no-replica` says) and the replicas (what `plan` says) within
    15% of the measured peak; held out, the terms within 16% (the full fine-tuning config's
    +15.4%, docs/memory.md)."""
    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    advisor = MemoryAdvisor.for_calibration("cpu")
    replicas = json.loads((CALIBRATION / "replica.json").read_text())["replicas"]
    held, _ = _held_out_errors()
    ids = ["deep12-lora-adafactor-ckpt-s2048", "deep12-full-adafactor-ckpt-s2048",
           "w160-full-sgd", "w160-full-sgd-b4-s128-l2"]
    for entry in (e for e in matrix["configs"] if e["id"] in ids):
        peak = measured[entry["id"]]["peak_memory_bytes"]
        terms = advisor.estimate(calibrate.ModelFacts_from(models, entry),
                                 calibrate.training_config(entry)).total_bytes
        assert terms == pytest.approx(peak, rel=0.15), entry["id"]
        assert replicas[entry["id"]]["estimate_bytes"] == pytest.approx(peak, rel=0.15)
        assert abs(held[entry["model"]][entry["id"]]) <= 0.16, entry["id"]


def test_the_fit_evaluates_the_estimate_as_combine_does():
    """The held-out procedure evaluates every row at once (calibrate_memory.Table): the same
    totals as estimate.combine, row by row, at the shipped multipliers and at a fold's."""
    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    rows = calibrate.fit_rows(matrix, {"measurements": measured}, models)
    table = calibrate.Table(rows)
    fold = calibrate.fit_families(table, ["w128-l4-bf16", "deep-w64-l16-bf16", "v152k-bf16",
                                          "w512-l2-wide-bf16"])[0].values
    shipped = {f.name: getattr(CPU_COEFFICIENTS, f.name) for f in dataclasses.fields(
        CPU_COEFFICIENTS) if f.name not in ("held_out_error", "calibrated")}
    # the chunked loss's configs too (none of its slices' phase overlaps the top layer's)
    chunked = CALIBRATION / "chunked"
    chunked_rows = calibrate.fit_rows(
        json.loads((chunked / "matrix.json").read_text()),
        json.loads((chunked / "measurements.json").read_text()),
        json.loads((chunked / "models.json").read_text()))
    assert chunked_rows and all(row.quantities["chunked_loss"] > 0 for row in chunked_rows)
    for values in (shipped, fold):
        coefficients = dataclasses.replace(CPU_COEFFICIENTS, **values)
        for every in (rows, chunked_rows):
            totals = calibrate.Table(every).phases(values)["total"]
            for row, total in zip(every, totals):
                assert total == pytest.approx(
                    sum(combine(row.quantities, coefficients).values()), rel=1e-9), row.id


def test_every_family_held_out_is_within_15_percent_by_its_replica_median_7():
    """Issue 13's target, for the estimate the verdict judges by (plan, the setup form, the
    start gate): a replica's. It fits nothing, no multiplier and no family, so every family is
    held out, and each config's peak is predicted from a replica of it with every width
    halved, measured. Within 15%, median within 7%, no underestimate beyond 7%; and the
    verdict's margin for it (REPLICA_ERROR) covers the largest underestimate."""
    held = _replica_errors()
    errors = {config: error for family in held.values() for config, error in family.items()}
    assert len(held) >= 20 and len(errors) >= 100
    worst = max(errors, key=lambda c: abs(errors[c]))
    assert abs(errors[worst]) <= 0.15, f"{worst}: {errors[worst]:+.1%}"
    assert statistics.median(abs(e) for e in errors.values()) <= 0.07
    lowest = min(errors, key=errors.get)
    assert errors[lowest] >= -0.07, f"{lowest}: {errors[lowest]:+.1%}"
    # The verdict's margin for a replica covers its largest underestimate, the chunked
    # loss's included (below), and is not padded beyond it.
    everywhere = min(errors[lowest], *(
        min(e for family in _replica_errors(CALIBRATION / folder).values()
            for e in family.values()) for folder in ("chunked", "layers")))
    assert -everywhere <= REPLICA_ERROR <= -everywhere + 0.01
    # Every config the terms miss (over by more than 15%: MLX's schedule; under by more than
    # 7%) has a replica, the 32-token rows' of half scale included, and it does not miss.
    terms, _ = _held_out_errors()
    missed = [config for family in terms.values() for config, error in family.items()
              if error > 0.15 or error < -0.07]
    assert missed and all(abs(errors[config]) <= 0.05 for config in missed), missed
    # docs/memory.md's table of the replicas is the one these measurements give
    calibrate = _calibration_script()
    matrix = json.loads((CALIBRATION / "matrix.json").read_text())
    docs = (REPO / "docs" / "memory.md").read_text()
    for line in calibrate.family_table_lines(held, markdown=True, matrix=matrix):
        assert line in docs, f"docs/memory.md lacks: {line}"
    assert (f"All {len(errors)} configs of {len(held)} families: "
            f"max {max(map(abs, errors.values())):.1%}, "
            f"median {statistics.median(map(abs, errors.values())):.1%}, "
            f"lowest {min(errors.values()):+.1%}") in docs


def test_a_replica_measured_now_predicts_the_peak_the_terms_over_state(tmp_path):
    """Real training of the half-scale replica of the config the terms over-state most (two
    of four layers of the 4-bit model with float32 scales: MLX's schedule frees a layer's
    arrays early), built from the stored config.json alone: its prediction is within 3% of
    the stored peak, where the terms are 20% over."""
    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    entry = next(e for e in matrix["configs"] if e["id"] == "q4g-b2-s512-l2")
    tokenizer = tmp_path / "tokenizer"
    from zyquo_tui.trainer.sample_model import build_tokenizer

    build_tokenizer(tokenizer)
    result = calibrate.measure_replica(entry, models, tokenizer)
    peak = measured[entry["id"]]["peak_memory_bytes"]
    assert result["scale"] == 2 and result["replica_peak_bytes"] < peak / 3
    assert result["estimate_bytes"] == pytest.approx(peak, rel=0.03)
    terms = MemoryAdvisor.for_calibration("cpu").estimate(
        calibrate.ModelFacts_from(models, entry), calibrate.training_config(entry))
    assert terms.total_bytes > 1.15 * peak


def test_at_a_width_of_100_the_layers_study_is_within_8_percent_of_the_estimate():
    """1, 2 and 3 trained layers of the 4-bit float32-scale model at six shapes, measured twice:
    with MLX's default schedule (bench/memory_calibration/layers) and with MLX_BFS_MAX_WIDTH=100
    (layers-bfs-width-100), which lets MLX keep up to 100 operations in flight instead of 20.
    At 100 every config is where the estimate's terms put it; the default schedule keeps
    less (on two layers up to a layer less), never more: what the held-out table's largest
    over-statements are."""
    calibrate = _calibration_script()
    advisor = MemoryAdvisor.for_calibration("cpu")
    configs = json.loads((CALIBRATION / "layers" / "matrix.json").read_text())["configs"]
    models = json.loads((CALIBRATION / "layers" / "models.json").read_text())

    def peaks(folder: str) -> dict[str, int]:
        stored = json.loads((CALIBRATION / folder / "measurements.json").read_text())
        return {key: m["peak_memory_bytes"] for key, m in stored["measurements"].items()}

    default, wide = peaks("layers"), peaks("layers-bfs-width-100")
    assert set(default) == set(wide) == {entry["id"] for entry in configs}
    errors = {}
    for entry in configs:
        estimate = advisor.estimate(calibrate.ModelFacts_from(models, entry),
                                    calibrate.training_config(entry))
        errors[entry["id"]] = (estimate.total_bytes - wide[entry["id"]]) / wide[entry["id"]]
        assert default[entry["id"]] <= wide[entry["id"]], entry["id"]
    assert max(abs(e) for e in errors.values()) <= 0.08, errors
    two_layers = [key for key in default if key.endswith("-L2")]
    assert max(default[k] / wide[k] for k in two_layers) < 0.9  # the default keeps less


def test_depth_first_every_trained_layer_adds_the_same_and_checkpointing_keeps_less():
    """The whole matrix measured again with MLX_BFS_MAX_WIDTH=1 (depth first:
    bench/memory_calibration/bfs-width-1). There, in every series of 1 to 4 trained layers,
    each layer adds the same bytes (within 2%); with MLX's default width the same series add
    uneven amounts (what the held-out table's largest over-statements are). Depth first keeps
    less in most configs, and about a third less with grad checkpointing where the layers,
    not the logits, set the peak (docs/memory.md)."""
    matrix, default, models = _calibration()
    stored = json.loads((CALIBRATION / "bfs-width-1" / "measurements.json").read_text())
    depth_first = stored["measurements"]
    # the 103 configs the matrix had then (those added since were measured at the default only)
    assert len(depth_first) == 103 and set(depth_first) <= set(default)
    default = {key: default[key] for key in depth_first}
    series = (["base-l1", "base-l2", "base-l3", "base"],
              ["f32same-l1", "f32same-l2", "f32same-l3", "f32same-b4"],
              ["w192-b2-s512-l1", "w192-b2-s512-l2", "w192-b2-s512-l3"],
              ["mha-s512-l1", "mha-s512-l2", "mha-s512-l3"],
              ["v4k-b4-l1", "v4k-b4-l2", "v4k-b4-l3"])

    def spread(measured: dict, ids: list[str]) -> float:
        """How unequal the bytes each added layer costs are, as a share of the largest."""
        peaks = [measured[key]["peak_memory_bytes"] for key in ids]
        steps = [after - before for before, after in zip(peaks, peaks[1:])]
        return (max(steps) - min(steps)) / max(steps)

    for ids in series:
        assert spread(depth_first, ids) <= 0.02, ids
    uneven = [ids for ids in series if spread(default, ids) > 0.2]
    assert len(uneven) >= 4, uneven  # all but the 4,096-token vocabulary's series
    ratios = {key: depth_first[key]["peak_memory_bytes"] / default[key]["peak_memory_bytes"]
              for key in default}
    assert statistics.median(ratios.values()) < 0.95
    checkpointed = [entry for entry in matrix["configs"]
                    if entry.get("grad_checkpoint") and entry["id"] in ratios]
    vocabulary = {entry["id"]: models[entry["model"]]["config"]["vocab_size"]
                  for entry in checkpointed}
    layers_peak = [key for key, size in vocabulary.items() if size <= 8192]
    logits_peak = [key for key, size in vocabulary.items() if size > 8192]
    assert len(layers_peak) >= 15 and max(ratios[key] for key in layers_peak) < 0.9
    assert logits_peak and all(0.99 < ratios[key] < 1.01 for key in logits_peak)


def test_with_the_chunked_loss_on_held_out_estimates_meet_the_target():
    """Every measured config with the chunked loss on (bench/memory_calibration/chunked),
    estimated as a model never seen would be: by multipliers fitted on every family but its
    own. Its loss term is derived (6.5 slices of two logit-sized arrays), not fitted."""
    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    rows = calibrate.fit_rows(matrix, {"measurements": measured}, models)
    chunked = CALIBRATION / "chunked"
    configs = json.loads((chunked / "matrix.json").read_text())["configs"]
    peaks = json.loads((chunked / "measurements.json").read_text())["measurements"]
    chunked_models = json.loads((chunked / "models.json").read_text())
    assert {entry["id"] for entry in configs} == set(peaks)  # every config measured
    table = calibrate.Table(rows)
    families = list(dict.fromkeys(row.family for row in rows))
    errors = {}
    for entry in configs:
        values = calibrate.fit_families(table, [f for f in families if f != entry["model"]]
                                        )[0].values
        held_out = MemoryAdvisor(MemoryBudget.fixed(1 << 50), history=MemoryHistory(),
                                 coefficients=dataclasses.replace(CPU_COEFFICIENTS, **values))
        estimate = held_out.estimate(calibrate.ModelFacts_from(chunked_models, entry),
                                     calibrate.training_config(entry))
        assert estimate.loss_chunk_tokens == entry["loss_chunk_tokens"]  # sliced as measured
        peak = peaks[entry["id"]]["peak_memory_bytes"]
        errors[entry["id"]] = (estimate.total_bytes - peak) / peak
    assert max(abs(error) for error in errors.values()) <= 0.15, errors
    assert statistics.median(abs(error) for error in errors.values()) <= 0.07, errors
    assert min(errors.values()) >= -0.07, errors


def test_the_shipped_multipliers_are_the_fit_on_every_family():
    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    fitted, _ = calibrate.fitted_coefficients(
        calibrate.fit_rows(matrix, {"measurements": measured}, models))
    for name, value in fitted.items():
        shipped = getattr(CPU_COEFFICIENTS, name)
        assert shipped == pytest.approx(value, rel=0.01, abs=0.01 if name != "fixed_bytes"
                                        else 0.01 * MIB), name


def _grpo_rows() -> list:
    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    return calibrate.grpo_rows(matrix, {"measurements": measured}, models)


def test_the_grpo_step_multiplier_is_the_fit_on_the_grpo_configs():
    """grpo_shared_working is fitted on the grpo configs of the calibration matrix alone, the SFT
    multipliers held; it sits below 1 (a grpo step peaks lower than an SFT step of its
    tokens), and the rows evaluated at once agree with combine there too."""
    calibrate = _calibration_script()
    rows = _grpo_rows()
    assert len({row.family for row in rows}) >= 5
    value = calibrate.fit_grpo_step(rows)
    assert CPU_COEFFICIENTS.grpo_shared_working == pytest.approx(value, abs=1e-9)
    assert value < 1
    table = calibrate.Table(rows)
    values = {f.name: getattr(CPU_COEFFICIENTS, f.name) for f in dataclasses.fields(
        CPU_COEFFICIENTS) if f.name not in ("held_out_error", "calibrated")}
    for row, total in zip(rows, table.phases(values)["total"]):
        assert total == pytest.approx(sum(combine(row.quantities, CPU_COEFFICIENTS).values()),
                                      rel=1e-9), row.id


def test_every_grpo_family_held_out_is_within_15_percent_as_docs_say():
    """Each family's grpo configs estimated with grpo_shared_working fitted on the other
    families' (bench/calibrate_memory.py --fit-grpo): within 15%, and docs/memory.md's table
    is this one."""
    calibrate = _calibration_script()
    matrix, _, _ = _calibration()
    held, _ = calibrate.grpo_held_out(_grpo_rows())
    assert len(held) >= 5
    for family in held.values():
        for config, error in family.items():
            assert abs(error) <= 0.15, (config, error)
    docs = (REPO / "docs" / "memory.md").read_text()
    for line in calibrate.family_table_lines(held, markdown=True, matrix=matrix)[2:]:
        assert line in docs, f"docs/memory.md lacks: {line}"


def test_the_figure_plan_gives_every_shape_meets_the_target():
    """bench/calibrate_memory.py --verdict: every config of the main matrix and of the small
    steps by the figure `plan` gives it: measured whole at 64 MiB or less, else its replica
    (nothing fitted), else (grpo) the terms with its family held out. None outside +15%/-7%,
    tiny models and grpo included, and each source used where docs/memory.md says."""
    calibrate = _calibration_script()
    for folder in (CALIBRATION, CALIBRATION / "small"):
        matrix = json.loads((folder / "matrix.json").read_text())
        stored = json.loads((folder / "measurements.json").read_text())
        models = json.loads((folder / "models.json").read_text())
        replicas = json.loads((folder / "replica.json").read_text())["replicas"]
        figures = calibrate.verdict_figures(matrix, stored, models, replicas)
        assert set(figures) == set(stored["measurements"]), folder
        sources = {source for source, _ in figures.values()}
        assert "terms" not in sources and "whole" in sources, (folder, sources)
        for config, (source, error) in figures.items():
            if error is not None:
                assert -0.07 <= error <= 0.15, (config, source, error)
        grpo = {source for config, (source, _) in figures.items() if config.startswith("grpo-")}
        # The main matrix's larger grpo configs by the terms; the sample model's measured whole.
        assert grpo == ({"grpo terms", "whole"} if folder == CALIBRATION else {"whole"}), grpo


def test_core_memory_imports_neither_mlx_nor_textual():
    code = ("import sys, zyquo_tui.core.memory, zyquo_tui.core.memory.budget;"
            "bad = [m for m in ('mlx', 'mlx_lm', 'textual', 'transformers') if m in sys.modules];"
            "print(bad)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("config_id", ["base", "base-ckpt", "q4-b4", "f32-dora-l2"])
def test_measuring_again_reproduces_the_stored_peak_and_the_estimate_holds(config_id, tmp_path):
    """Real mlx-lm training of a few calibration configs: the stored peaks measured again
    (seconds each on a CPU), so a change in mlx or in the trainer that moves them shows."""
    matrix, measured, models = _calibration()
    entry = next(e for e in matrix["configs"] if e["id"] == config_id)
    calibrate_memory = _calibration_script()
    folder = calibrate_memory.build_model(entry["model"], matrix["models"][entry["model"]],
                                          tmp_path, tmp_path / "tokenizer")
    result = calibrate_memory.measure_one(entry, folder)
    stored = measured[config_id]["peak_memory_bytes"]
    assert result["peak_memory_bytes"] == pytest.approx(stored, rel=0.05)
    model = ModelFacts.from_folder(folder)
    estimate = MemoryAdvisor.for_calibration("cpu").estimate(model, _calibration_config(entry))
    assert estimate.total_bytes == pytest.approx(result["peak_memory_bytes"], rel=0.15)


def test_dora_first_step_does_not_add_one_layer_of_float32_weights(tiny_model, tmp_path):
    """mlx-lm makes DoRA's magnitudes lazily (norms of a float32 copy of each adapted weight);
    the trainer computes them before the first step, so that step's peak is not its working
    memory plus one layer's float32 copies (measured, left lazy: 51.4 MiB at the first step,
    41.7 after; computed first: 40.7, then 41.7)."""
    calibrate_memory = _calibration_script()
    shape = {"hidden_size": 512, "num_layers": 1, "num_heads": 8, "num_kv_heads": 8,
             "intermediate_size": 2048, "dtype": "bfloat16"}
    folder = calibrate_memory.build_model("w512-l1", shape, tmp_path, tiny_model)
    entry = {"id": "w512-dora", "method": "dora", "batch_size": 2, "seq": 128, "num_layers": 1}
    peaks = calibrate_memory.measure_one(entry, folder)["peak_by_step"]
    layer_copies = ModelFacts.from_folder(folder).layers[-1].matrix_elements * LORA_BYTES
    assert layer_copies > 15 * MIB  # wide enough that the copies stand out of the noise
    first, later = peaks[0], max(peaks[1:])
    assert first < later + layer_copies / 4, (
        f"first step {first / MIB:.1f} MiB, later {later / MIB:.1f} MiB")


def test_full_fine_tuning_through_the_trainer_peaks_where_the_estimate_says(tmp_path, tiny_model):
    """Real training of a calibration config (`base-full`: full fine-tuning, adam, 4 x 256
    tokens on the 128-wide bfloat16 model) through the trainer's step. The trainer compiles
    each step's forward-backward and update together (trainer/engine.py); compiled apart, this
    config peaked at 89.6 MiB, 85% over its estimate (50.4 MiB), where mlx-lm's step and ours
    now peak at 48.4 MiB."""
    calibrate_memory = _calibration_script()
    matrix, measured, models = _calibration()
    entry = next(e for e in matrix["configs"] if e["id"] == "base-full")
    folder = calibrate_memory.build_model(entry["model"], matrix["models"][entry["model"]],
                                          tmp_path, tiny_model)
    peak = calibrate_memory.measure_one(entry, folder)["peak_memory_bytes"]
    estimate = MemoryAdvisor.for_calibration("cpu").estimate(
        calibrate_memory.ModelFacts_from(models, entry), _calibration_config(entry))
    assert peak <= estimate.total_bytes * 1.1, (
        f"peak {peak / MIB:.1f} MiB, estimate {estimate.total_bytes / MIB:.1f} MiB")
    assert peak == pytest.approx(measured["base-full"]["peak_memory_bytes"], rel=0.05)


def test_full_fine_tuning_through_the_client_peaks_as_a_run_does(tmp_path, tiny_model):
    """The same calibration config (`base-full`) through the step-level client, optim_step
    submitted before waiting: the client then compiles the two as one step (client/
    training_client.py). Compiled apart, the client peaked at 89.6 MiB here
    (bench/bench_client_memory.py compares the two loops)."""
    calibrate_memory = _calibration_script()
    import bench_client_memory

    matrix, measured, models = _calibration()
    entry = next(e for e in matrix["configs"] if e["id"] == "base-full")
    folder = calibrate_memory.build_model(entry["model"], matrix["models"][entry["model"]],
                                          tmp_path, tiny_model)
    peak = bench_client_memory.client_peak(entry, folder, together=True)
    estimate = MemoryAdvisor.for_calibration("cpu").estimate(
        calibrate_memory.ModelFacts_from(models, entry), _calibration_config(entry))
    assert peak <= estimate.total_bytes * 1.1, (
        f"peak {peak / MIB:.1f} MiB, estimate {estimate.total_bytes / MIB:.1f} MiB")
    assert peak == pytest.approx(measured["base-full"]["peak_memory_bytes"], rel=0.05)


def _preference_errors() -> dict[str, tuple[dict, float]]:
    """Each measured preference config (bench/memory_calibration, `pref-*`) and the estimate's
    relative error on it. These are never fitted: the SFT terms applied to two sequences per
    row, plus a frozen reference copy for DPO's full fine-tuning."""
    calibrate = _calibration_script()
    matrix, measured, models = _calibration()
    advisor = MemoryAdvisor.for_calibration("cpu")
    errors = {}
    for entry in matrix["configs"]:
        if entry.get("objective") and entry["id"] in measured:
            facts = calibrate.ModelFacts_from(models, entry)
            estimate = advisor.estimate(facts, calibrate.training_config(entry))
            if entry["objective"] == "dpo" and entry.get("method") == "full":
                assert estimate.breakdown["reference"] == facts.weights_bytes
            peak = measured[entry["id"]]["peak_memory_bytes"]
            errors[entry["id"]] = (entry, (estimate.total_bytes - peak) / peak)
    return errors


def test_preference_runs_are_estimated_within_the_terms_error_and_by_replica_within_5():
    """The SFT terms on two sequences a row, never fitted to these configs: none under by
    more than 7%, none over by more than the terms' own held-out worst (docs/memory.md: the
    checkpointed 512-token DPO is over-stated as its SFT peers are, +17%); and the figure the
    verdict judges by, each config's half-scale replica, within REPLICA_ERROR of its peak."""
    errors = _preference_errors()
    adapters = {k: e for k, (entry, e) in errors.items() if entry.get("method") != "full"}
    assert len(adapters) >= 8 and {"dpo", "orpo"} <= {
        entry["objective"] for entry, _ in errors.values()}
    assert min(adapters.values()) >= -0.07, adapters
    assert max(adapters.values()) <= HELD_OUT_WORST, adapters
    assert sorted(adapters.values())[-2] <= 0.15, adapters  # the one above 15% is alone
    _, measured, _ = _calibration()
    replicas = json.loads((CALIBRATION / "replica.json").read_text())["replicas"]
    preference = [k for k, (entry, _) in errors.items() if entry["objective"] in ("dpo", "orpo")]
    for config in preference:
        peak = measured[config]["peak_memory_bytes"]
        assert abs(replicas[config]["estimate_bytes"] / peak - 1) <= REPLICA_ERROR, config


def test_preference_runs_of_full_fine_tuning_are_within_15_percent():
    """A float32 model's full fine-tuning keeps the inputs its weight gradients read once (the
    forward pass's own arrays), and DPO adds the reference's frozen copy in the model's dtype."""
    full = {k: e for k, (entry, e) in _preference_errors().items()
            if entry.get("method") == "full"}
    assert {"pref-dpo-full", "pref-orpo-full"} <= set(full)
    assert max(abs(e) for e in full.values()) <= 0.15, full
