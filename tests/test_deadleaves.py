"""The dead-leaves generator (gsprestore/evaluation/deadleaves.py): deterministic, in range, and with the
statistics the model is chosen for (radius law, 1/f^2-like spectrum)."""

import numpy as np
import pytest

from gsprestore.evaluation.deadleaves import dead_leaves, disc_radius


def test_same_seed_same_image_and_seeds_differ():
    a, b, c = dead_leaves(64, seed=3), dead_leaves(64, seed=3), dead_leaves(64, seed=4)
    assert a.shape == (64, 64, 3) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).mean() > 0.05
    assert a.min() >= 0.0 and a.max() <= 1.0


def test_radius_law_matches_its_cdf():
    rng = np.random.default_rng(0)
    r = np.sort(disc_radius(rng.random(20000), 2.0, 40.0))
    assert r.min() >= 2.0 and r.max() <= 40.0
    cdf = (2.0 ** -2 - r ** -2.0) / (2.0 ** -2 - 40.0 ** -2)
    empirical = np.arange(1, r.size + 1) / r.size
    assert np.abs(cdf - empirical).max() < 0.015  # Kolmogorov-Smirnov, 1 % level is 0.0115


def test_plane_is_covered_by_discs_and_colours_are_correlated():
    img = dead_leaves(64, seed=1, supersample=1, chroma=0.15)
    lum = img.mean(-1)
    # constant-colour discs: most pixels equal a 4-neighbour (flat regions), and edges exist
    same = (np.abs(np.diff(img, axis=1)).sum(-1) == 0).mean()
    assert 0.5 < same < 0.99
    # no uncovered background left (it would be exactly grey 0.5 in every channel)
    assert not np.all(img == 0.5, axis=-1).any()
    # channels differ from the luminance by at most the chroma offset
    assert np.abs(img - lum[..., None]).max() <= 0.3 + 1e-6
    r = np.corrcoef(img.reshape(-1, 3).T)
    assert r[0, 1] > 0.8 and r[1, 2] > 0.8


@pytest.mark.parametrize("seed", [0, 1])
def test_power_spectrum_falls_like_natural_images(seed):
    im = dead_leaves(128, seed=seed).mean(-1)
    p = np.abs(np.fft.fftshift(np.fft.fft2(im - im.mean()))) ** 2
    y, x = np.indices(p.shape) - 64
    ring = np.hypot(y, x).astype(int).ravel()
    radial = np.bincount(ring, p.ravel()) / np.bincount(ring)
    f = np.arange(3, 40)
    slope = np.polyfit(np.log(f), np.log(radial[f]), 1)[0]
    assert -2.9 < slope < -1.7, slope  # scale invariance gives ~ -2 (steeper after anti-aliasing)
