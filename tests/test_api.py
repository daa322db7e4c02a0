"""The Python API (gsprestore.demosaic / upscale2x / restore_file): numpy and torch in and out,
shapes, dtypes, integer scaling, method choice, and the errors a caller can make."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gsprestore
from gsprestore.methods.classical_methods import demosaic_menon, upscale_bicubic
from gsprestore.core.errors import GspError, UsageError
from gsprestore.methods.registry import get_restorer
from gsprestore.physics.sampling import mosaic


def _mosaic(h: int = 16, w: int = 16, pattern: str = "RGGB", seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rgb = rng.random((h, w, 3), dtype=np.float32)
    raw = mosaic(torch.from_numpy(rgb).permute(2, 0, 1)[None], pattern)[0, 0].numpy()
    return rgb, raw


def test_demosaic_numpy_matches_the_method_and_keeps_layout():
    _, raw = _mosaic(pattern="GBRG")
    out = gsprestore.demosaic(raw, method="menon", pattern="GBRG", device="cpu")
    assert isinstance(out, np.ndarray) and out.shape == (16, 16, 3) and out.dtype == np.float32
    ref = demosaic_menon(torch.from_numpy(raw)[None, None], "GBRG")[0].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(out, ref, atol=1e-6)
    # (H, W, 1) is the same mosaic; another pattern is another result
    np.testing.assert_array_equal(gsprestore.demosaic(raw[:, :, None], method="menon", pattern="GBRG"), out)
    assert not np.allclose(gsprestore.demosaic(raw, method="menon", pattern="RGGB"), out)


def test_integer_inputs_are_scaled_by_their_range():
    _, raw = _mosaic()
    as8 = np.round(raw * 255).astype(np.uint8)
    as16 = (as8.astype(np.uint16) * 257).astype(np.uint16)
    out8 = gsprestore.demosaic(as8, method="bilinear")
    out16 = gsprestore.demosaic(as16, method="bilinear")
    np.testing.assert_allclose(out8, out16, atol=1e-6)
    np.testing.assert_allclose(out8, gsprestore.demosaic(as8.astype(np.float32) / 255, method="bilinear"), atol=1e-6)
    assert 0.3 < out8.mean() < 0.7  # scaled to [0, 1], not 0..255


def test_upscale2x_numpy_gray_and_rgb():
    rgb, _ = _mosaic(8, 10)
    up = gsprestore.upscale2x(rgb, method="bicubic")
    assert up.shape == (16, 20, 3) and up.dtype == np.float32
    np.testing.assert_array_equal(up[0::2, 0::2], rgb)  # the aligned bicubic keeps the known pixels
    ref = upscale_bicubic(torch.from_numpy(rgb).permute(2, 0, 1)[None])[0].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(up, ref, atol=1e-6)
    gray = gsprestore.upscale2x(rgb[:, :, 0], method="bicubic")
    assert gray.shape == (16, 20, 1)
    np.testing.assert_allclose(gray[:, :, 0], up[:, :, 0], atol=1e-6)
    half = gsprestore.upscale2x(rgb, method="bicubic-halfpixel")
    assert half.shape == up.shape and not np.allclose(half[0::2, 0::2], rgb)


def test_torch_in_torch_out_same_layout():
    rgb, raw = _mosaic()
    t = torch.from_numpy(raw)[None]
    out = gsprestore.demosaic(t, method="malvar")
    assert isinstance(out, torch.Tensor) and out.shape == (3, 16, 16)
    batch = gsprestore.demosaic(torch.stack([t, t]), method="malvar")
    assert batch.shape == (2, 3, 16, 16) and torch.equal(batch[0], out)
    up = gsprestore.upscale2x(torch.from_numpy(rgb).permute(2, 0, 1), method="bicubic")
    assert up.shape == (3, 32, 32)


def test_tiling_gives_the_untiled_result():
    _, raw = _mosaic(40, 36)
    whole = gsprestore.demosaic(raw, method="menon")
    tiled = gsprestore.demosaic(raw, method="menon", tile=16, overlap=8)
    np.testing.assert_allclose(tiled, whole, atol=1e-5)


def test_method_choice_default_and_restorer_objects():
    _, raw = _mosaic()
    r = get_restorer("bilinear", "demosaic")
    np.testing.assert_array_equal(gsprestore.demosaic(raw, method=r), gsprestore.demosaic(raw, method="bilinear"))
    with pytest.raises(UsageError, match="does demosaic, not upscale2x"):
        gsprestore.upscale2x(raw, method=r)
    # options reach the factory
    a = gsprestore.upscale2x(raw, method="bicubic", a=-0.5)
    assert not np.allclose(a, gsprestore.upscale2x(raw, method="bicubic"))


def test_errors():
    rgb, raw = _mosaic()
    with pytest.raises(UsageError, match="single-channel Bayer mosaic"):
        gsprestore.demosaic(rgb, method="menon")
    with pytest.raises(UsageError, match="unknown method"):
        gsprestore.demosaic(raw, method="nope")
    with pytest.raises(UsageError, match="does not do upscale2x"):
        gsprestore.upscale2x(rgb, method="menon")
    with pytest.raises(UsageError, match="pattern"):
        gsprestore.demosaic(raw, method="menon", pattern="RGBG")
    with pytest.raises(UsageError, match="numeric array"):
        gsprestore.demosaic(np.array([["a", "b"], ["c", "d"]]), method="menon")
    with pytest.raises(UsageError, match="tile size must be 0"):
        gsprestore.demosaic(raw, method="menon", tile=4)
    with pytest.raises(UsageError, match="overlap must be >= 0"):
        gsprestore.demosaic(raw, method="menon", overlap=-2)
    with pytest.raises(UsageError, match="precision"):
        gsprestore.demosaic(raw, method="menon", precision="fp8")


def test_restore_file_is_the_commands_per_file_work(tmp_path):
    from gsprestore.imageio.images import read_image, write_image

    rgb, raw = _mosaic(10, 12)
    src = write_image(tmp_path / "raw.png", raw, 16)
    info = gsprestore.restore_file(src, tmp_path / "out.png", "demosaic", "menon", pattern="RGGB")
    assert info == {"width": 12, "height": 10, "bit_depth": 16}
    out = read_image(tmp_path / "out.png")
    assert out.channels == 3 and out.bit_depth == 16
    expected = gsprestore.demosaic(read_image(src).array, method="menon")
    np.testing.assert_allclose(out.array, np.clip(expected, 0, 1), atol=1 / 65535 + 1e-6)
    with pytest.raises(GspError, match="exists"):
        gsprestore.restore_file(src, tmp_path / "out.png", "demosaic", "menon")
    with pytest.raises(GspError, match="single-channel"):
        gsprestore.restore_file(tmp_path / "out.png", tmp_path / "again.png", "demosaic", "menon")
    info = gsprestore.restore_file(tmp_path / "out.png", tmp_path / "big.jpg", "upscale2x", "bicubic")
    assert info == {"width": 24, "height": 20, "bit_depth": 8}
    with pytest.raises(UsageError, match="unknown task"):
        gsprestore.restore_file(src, tmp_path / "x.png", "denoise")
