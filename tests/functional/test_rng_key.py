"""MLX's random key kept and put back through one function (trainer/checkpoints.py's
`mlx_rng_seed`): checkpoints, the step-level client and the server's models all use it, and
nothing else in the package packs a key's halves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import zyquo_tui

mx = pytest.importorskip("mlx.core")


def test_a_key_put_back_draws_what_it_would_have_drawn():
    from zyquo_tui.trainer.checkpoints import mlx_rng_seed

    mx.random.seed(2 ** 40 + 12345)  # a seed with both halves set
    mx.random.uniform(shape=(3,))  # moved on from the seed
    kept = mlx_rng_seed()
    saved_pair = [int(x) for x in mx.random.state[0].tolist()]  # as a checkpoint saves it
    expected = mx.random.uniform(shape=(5,)).tolist()
    for key in (kept, mlx_rng_seed(saved_pair)):
        mx.random.uniform(shape=(7,))  # other draws in between
        mx.random.seed(key)
        assert mx.random.uniform(shape=(5,)).tolist() == expected
    assert mlx_rng_seed(saved_pair) == kept


def test_no_other_module_packs_a_key():
    package = Path(zyquo_tui.__file__).parent
    packing = re.compile(r"<<\s*32")
    found = [str(path.relative_to(package)) for path in package.rglob("*.py")
             if packing.search(path.read_text())]
    assert found == ["trainer/checkpoints.py"]
