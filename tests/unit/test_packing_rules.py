"""core/runs/packing.py's rules, and the RunDraft's: best fit, which models pack, the refusal."""

from __future__ import annotations

import json

from zyquo_tui.core.library.run_checks import ModelTraits, fit_default_packing, problems_with_model
from zyquo_tui.core.runs.packing import (
    best_fit_decreasing,
    pack_rows,
    packed_width,
    packing_refusal,
    row_positions,
)
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method


def test_best_fit_decreasing_puts_each_row_in_the_fullest_sequence_it_fits():
    # 7 opens the first, 6 the second, 5 the third; 3 fits the 7's (room 3) best; 2 the 6's.
    assert best_fit_decreasing([3, 7, 5, 6, 2], 10) == [[1, 0], [3, 4], [2]]
    bins = best_fit_decreasing([40, 33, 49, 20, 74, 61, 12, 9], 128)
    assert sorted(i for b in bins for i in b) == list(range(8))
    assert all(sum([40, 33, 49, 20, 74, 61, 12, 9][i] for i in b) <= 128 for b in bins)
    assert best_fit_decreasing([5, 5, 5], 10) == best_fit_decreasing([5, 5, 5], 10)


def test_a_row_cut_at_max_seq_length_takes_one_position_fewer():
    assert row_positions(40, 64) == 40
    assert row_positions(64, 64) == 63 and row_positions(300, 64) == 63
    assert pack_rows([row_positions(300, 64), row_positions(10, 64)], 64, 384) == (
        [[0], [1]], 64)


def test_packed_widths_round_short_sequences_finely_and_long_ones_as_mlx_lm_pads():
    assert [packed_width(n) for n in (1, 8, 9, 78, 128)] == [8, 8, 16, 80, 128]
    assert [packed_width(n) for n in (129, 250, 256)] == [144, 256, 256]
    assert [packed_width(n) for n in (257, 300, 2048)] == [288, 320, 2048]


def test_a_batch_packs_into_the_width_that_costs_least_never_wider_than_the_rows_allow():
    # Four rows of about 40: one a sequence at 48 (192 positions), two at 80 (160) or all at
    # 160 (160). Where attention costs much (a narrow model) the narrowest are cheapest; where
    # it costs little, the fewest positions, in the narrower sequences.
    sizes = [40, 41, 39, 30]
    bins, width = pack_rows(sizes, 256, 64)
    assert width == 48 and len(bins) == 4
    bins, width = pack_rows(sizes, 256, 10**6)
    assert width == 80 and sorted(len(b) for b in bins) == [2, 2]
    # Rows that fill their sequences stay one a sequence, at the unpacked width.
    assert pack_rows([63, 63, 63, 63], 64, 384) == ([[0], [1], [2], [3]], 64)
    # Never wider than max_seq_length, never more sequences than rows.
    bins, width = pack_rows([100, 90, 20, 10], 128, 10**6)
    assert width <= 128 and len(bins) <= 4
    assert sorted(i for b in bins for i in b) == [0, 1, 2, 3]
    assert all(sum([100, 90, 20, 10][i] for i in b) <= width for b in bins)


def test_attention_only_models_pack_and_the_others_are_refused_with_the_reason():
    assert packing_refusal({"model_type": "llama"}) is None
    assert packing_refusal({"model_type": "qwen3"}) is None
    assert "state" in packing_refusal({"model_type": "mamba"})
    assert "sliding" in packing_refusal(
        {"model_type": "llama", "layer_types": ["full_attention", "sliding_attention"]})
    assert packing_refusal(None)


def _traits(tmp_path, model_type: str) -> ModelTraits:
    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    # The road a run's checks take: the model folder read once, its traits from that.
    traits = ModelTraits.read(folder)
    assert traits is not None
    return traits


def test_packing_asked_for_on_a_recurrent_model_is_one_sentence(tmp_path):
    hp = Hyperparameters()
    SETTINGS["pack"].set(hp, True)
    problems = problems_with_model(Method.LORA, hp, _traits(tmp_path, "mamba"))
    assert [p.key for p in problems] == ["pack"]
    sentence = problems[0].message if hasattr(problems[0], "message") else str(problems[0])
    assert "--no-pack" in sentence and sentence.count(". ") == 0
    assert problems_with_model(Method.LORA, hp, _traits(tmp_path, "llama")) == []


def test_packing_nobody_chose_is_turned_off_where_the_model_cannot_pack(tmp_path):
    hp = Hyperparameters()
    SETTINGS["pack"].set(hp, True)
    assert fit_default_packing(hp, _traits(tmp_path, "mamba"))
    assert SETTINGS["pack"].get(hp) is False
