"""Sampling operators H / H^T (paper Sec. 3.1): adjointness in float64, patterns, masks, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gsprestore.physics import sampling as S
from gsprestore.physics.sampling import PATTERNS, mosaic, mosaic_array
from gsprestore.core.errors import UsageError

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


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("dtype", [np.float32, np.uint16])
def test_numpy_mosaic_equals_the_operator(pattern, dtype):
    rng = np.random.default_rng(1)
    rgb = (rng.random((7, 10, 3)) * 1000).astype(dtype)
    expected = mosaic(torch.from_numpy(rgb.astype(np.float64)).permute(2, 0, 1), pattern)[0].numpy()
    got = mosaic_array(rgb, pattern)
    assert got.dtype == dtype and np.array_equal(got.astype(np.float64), expected)


def test_mosaic_command_does_not_import_torch(tmp_path):
    """`gsprestore mosaic` (PNG and DNG outputs) runs without torch: ~2 s less start-up."""
    import subprocess
    import sys

    from gsprestore.imageio.images import write_image

    write_image(tmp_path / "p.png", np.random.default_rng(0).random((24, 28, 3)), 8)  # a DNG needs 22x22
    code = ("import sys; from gsprestore.cli.app import main\n"
            "for out in ('m.png', 'm.dng'):\n"
            "    sys.argv = ['gsprestore', 'mosaic', 'p.png', '-o', out, '-q']\n"
            "    try:\n        main()\n    except SystemExit as e:\n        assert not e.code, e.code\n"
            "print('torch' in sys.modules)")
    import os
    from pathlib import Path

    root = str(Path(S.__file__).resolve().parents[1])  # this checkout's package, whatever is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False"] and (tmp_path / "m.png").is_file() and (tmp_path / "m.dng").is_file()
