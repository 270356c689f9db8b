"""`runs show`'s `estimated` line: a run's memory record in words, saying where its figure came
from (measured whole, on a replica, or the terms) and for which rows (docs/CLI.md)."""

from __future__ import annotations

import pytest

from zyquo_tui.cli.runs import memory_record_words


@pytest.mark.parametrize("replica, exact, words", [
    ({"scale": 1}, True, "5.0 MiB measured whole for its longest row: fits"),
    ({"scale": 4}, True, "5.0 MiB measured on a replica 1/4 as wide for its longest row: fits"),
    (None, True, "5.0 MiB by the terms for its longest row: fits"),
    (None, False, "5.0 MiB by the terms for rows as long as max_seq_length (a bound): fits"),
])
def test_the_record_says_where_its_figure_came_from(replica, exact, words):
    memory = {"estimate_bytes": 5 * 2**20, "replica": replica, "exact_sequence": exact,
              "verdict": "fits"}
    assert memory_record_words(memory) == words
