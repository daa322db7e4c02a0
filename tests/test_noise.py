"""The raw-domain noise model and its estimate from one mosaic (gsprestore/physics/noise.py, issue 49)."""

from __future__ import annotations

import numpy as np
import pytest

from gsprestore.physics import noise as N


def _chart(h: int = 512, w: int = 768, seed: int = 0) -> np.ndarray:
    """A linear mosaic-size scene like a test chart under uneven light: flat patches of many
    levels with sharp edges between them, on a smooth illumination gradient."""
    rng = np.random.default_rng(seed)
    ph, pw = 64, 64
    levels = rng.uniform(0.03, 0.8, size=(h // ph + 1, w // pw + 1))
    scene = np.kron(levels, np.ones((ph, pw)))[:h, :w]
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    return np.clip(scene * (0.8 + 0.2 * x + 0.1 * y), 0, 1).astype(np.float32)


def test_levels_follow_the_stated_model():
    a = [N.LEVELS[k][0] for k in ("low", "medium", "high")]
    assert a[1] / a[0] == pytest.approx(4) and a[2] / a[1] == pytest.approx(4)  # two stops of ISO each
    for shot, read in N.LEVELS.values():
        assert np.log(read) == pytest.approx(2.18 * np.log(shot) + 1.20)  # Brooks et al.'s relation
        assert 1e-4 <= shot <= 1.2e-2


def test_added_noise_has_the_model_variance_and_a_fixed_seed():
    x = np.full((400, 400), 0.3, np.float32)
    a, b = N.LEVELS["medium"]
    y = N.add_noise(x, a, b, seed=7)
    assert np.array_equal(y, N.add_noise(x, a, b, seed=7))
    assert np.std(y - x) == pytest.approx(np.sqrt(a * 0.3 + b), rel=0.01)


@pytest.mark.parametrize("level", list(N.LEVELS))
def test_the_estimate_is_within_15_percent_of_the_true_std(level):
    a, b = N.LEVELS[level]
    fit = N.estimate(N.add_noise(_chart(), a, b, seed=3))
    for x in (0.05, 0.1, 0.3, 0.6):
        assert fit.std(x) == pytest.approx(np.sqrt(a * x + b), rel=0.15), (level, x, fit)


def test_a_clean_scene_reads_far_below_the_lowest_level():
    fit = N.estimate(_chart())
    a, b = N.LEVELS["low"]
    assert fit.std(0.2) < 0.1 * np.sqrt(a * 0.2 + b)
