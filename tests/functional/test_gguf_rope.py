"""Llama 3's rope scaling, which llama.cpp stores as per-frequency factors (`rope_freqs`) rather
than as settings: the import recovers the settings whose frequencies mlx-lm computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from zyquo_tui.trainer.gguf_import import GGUFImportError, llama3_rope_scaling

DIMS, BASE, CONTEXT = 64, 500000.0, 131072


def llama_cpp_factors(settings: dict) -> np.ndarray:
    """What llama.cpp's converter writes as rope_freqs for these settings: mlx-lm's own Llama 3
    periods over the plain ones (the factor each frequency is divided by)."""
    from mlx_lm.models.rope_utils import Llama3RoPE

    rope = Llama3RoPE(DIMS, max_position_embeddings=CONTEXT, base=BASE, scaling_config=settings)
    return np.array(rope._freqs) / BASE ** (np.arange(0, DIMS, 2) / DIMS)


CONFIG = {"head_dim": DIMS, "rope_theta": BASE, "max_position_embeddings": CONTEXT}


@pytest.mark.parametrize("factor", [8.0, 32.0])
def test_llama3_factors_give_back_the_settings_mlx_lm_computes_them_from(factor):
    settings = {"factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
    factors = llama_cpp_factors(settings)
    assert len(set(np.round(factors, 3))) > 2  # low, medium and high frequencies all present
    assert llama3_rope_scaling(factors, CONFIG, Path("m.gguf")) == {
        "rope_type": "llama3", **settings}


def test_factors_of_no_published_setting_are_refused_in_one_sentence():
    factors = llama_cpp_factors({"factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0}) * 1.5
    with pytest.raises(GGUFImportError, match=r"^m\.gguf: its rope frequency factors match "
                                              r"none of Llama 3's published settings"):
        llama3_rope_scaling(factors, CONFIG, Path("m.gguf"))
