"""Sampling operators H / H^T (paper Sec. 3.1): adjointness in float64, patterns, masks, errors."""

from __future__ import annotations

import pytest
import torch

from gsprestore import sampling as S
from gsprestore.errors import UsageError

DT = torch.float64


@pytest.mark.parametrize("pattern", S.PATTERNS)
@pytest.mark.parametrize("size", [(6, 8), (5, 7)])
def test_mosaic_adjointness(pattern, size):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, *size, generator=g, dtype=DT)
    y = torch.randn(2, 1, *size, generator=g, dtype=DT)
    lhs = (S.mosaic(x, pattern) * y).sum()
    rhs = (x * S.mosaic_adjoint(y, pattern)).sum()
    assert torch.allclose(lhs, rhs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("size", [(6, 8), (5, 7)])
def test_decimation_adjointness(size):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, *size, generator=g, dtype=DT)
    y = torch.randn(2, 3, (size[0] + 1) // 2, (size[1] + 1) // 2, generator=g, dtype=DT)
    lhs = (S.decimate(x) * y).sum()
    rhs = (x * S.decimate_adjoint(y, size)).sum()
    assert torch.allclose(lhs, rhs, rtol=1e-12, atol=1e-12)
    assert torch.equal(S.decimate_adjoint(y, size)[..., 0::2, 0::2], y)


def test_patterns_are_named_by_the_top_left_block():
    # independent oracle: spell each 2x2 block out by hand
    blocks = {"RGGB": "RGGB", "BGGR": "BGGR", "GRBG": "GRBG", "GBRG": "GBRG"}
    for pattern, letters in blocks.items():
        m = S.bayer_masks(4, 4, pattern)
        for k, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
            c = "RGB".index(letters[k])
            assert m[c, i, j] == 1 and m[c, i + 2, j + 2] == 1
        assert torch.equal(m.sum(0), torch.ones(4, 4))  # one colour per pixel
        assert m[1].sum() == 8  # half the pixels are green


def test_mosaic_picks_the_recorded_colour():
    rgb = torch.stack([torch.full((4, 4), v) for v in (0.1, 0.5, 0.9)])[None]
    raw = S.mosaic(rgb, "RGGB")[0, 0]
    assert raw[0, 0] == pytest.approx(0.1) and raw[0, 1] == pytest.approx(0.5)
    assert raw[1, 0] == pytest.approx(0.5) and raw[1, 1] == pytest.approx(0.9)
    assert S.decimation_mask(4, 6).sum() == 6


def test_bad_inputs():
    with pytest.raises(UsageError, match="unknown Bayer pattern 'RGBG'"):
        S.check_pattern("RGBG")
    assert S.check_pattern("rggb") == "RGGB"
    with pytest.raises(UsageError, match="3 colour channels"):
        S.mosaic(torch.zeros(1, 1, 4, 4))
    with pytest.raises(UsageError, match="1 channel"):
        S.mosaic_adjoint(torch.zeros(1, 3, 4, 4))
    with pytest.raises(UsageError, match="does not decimate"):
        S.decimate_adjoint(torch.zeros(1, 1, 2, 2), (8, 8))
