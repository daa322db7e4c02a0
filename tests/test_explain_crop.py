"""``explain --pixel X,Y`` on photos of any size (the default crop follows the pixel) and an
edge-weight colour scale that shows structure when the weights crowd near one value."""

from __future__ import annotations

import numpy as np
import pytest

from gsprestore.core.errors import UsageError
from gsprestore.viz.explain import explain, weight_scale


def test_pixel_far_from_the_centre_of_a_large_photo_gets_its_own_crop():
    rng = np.random.default_rng(0)
    img = rng.random((300, 420, 3)).astype(np.float32)
    ex = explain(img, "iglr", "demosaic", pixel=(400, 20))
    x, y, w, h = ex.crop
    assert (w, h) == (128, 128) and x <= 400 < x + w and y <= 20 < y + h
    assert x + w <= 420 and y >= 0  # kept inside the image
    assert (x + ex.pixel[0], y + ex.pixel[1]) == (400, 20)
    with pytest.raises(UsageError, match="outside the 420x300 image"):
        explain(img, "iglr", "demosaic", pixel=(500, 20))


def test_weight_scale_spreads_crowded_weights():
    w = np.full((4, 32, 32), 0.99)
    w[:, 10, :] = 0.90  # one cut across the map
    lo, hi = weight_scale(w)
    assert lo == pytest.approx(0.90) and hi == pytest.approx(0.99)  # not 0 to 0.99: the cut stands out
    assert weight_scale(np.full((8, 8), 0.5)) == (0.0, 0.5)
    # weights within 0.1 % of one value (iGTV: "colours 0.223 to 0.223"): drawn flat, not as noise
    flat = 0.223 + 1e-4 * np.random.default_rng(0).random((4, 32, 32))
    assert weight_scale(flat) == (0.0, pytest.approx(flat.max()))
