"""Classical baselines against independent oracles: colour-demosaicing 0.2.7 (bilinear, Malvar 2004,
Menon 2007, every Bayer pattern, whole image including borders) and OpenCV's INTER_CUBIC resize;
plus exact tiling halos, strip processing, batching, dtypes and the restorer factory.
Small synthetic images only (no dataset reads)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from gsprestore.methods import classical_methods as baselines
from gsprestore.core.errors import UsageError
from gsprestore.methods.registry import Restorer, get_restorer
from gsprestore.physics.sampling import PATTERNS, mosaic

warnings.filterwarnings("ignore", category=DeprecationWarning)  # scipy.ndimage.filters in colour-demosaicing
cd = pytest.importorskip("colour_demosaicing")
cv2 = pytest.importorskip("cv2")

OURS = {
    "bilinear": baselines.demosaic_bilinear,
    "malvar": baselines.demosaic_malvar,
    "menon": baselines.demosaic_menon,
    "menon-norefine": lambda raw, p, **kw: baselines.demosaic_menon(raw, p, refining=False, **kw),
}
REFERENCE = {
    "bilinear": cd.demosaicing_CFA_Bayer_bilinear,
    "malvar": cd.demosaicing_CFA_Bayer_Malvar2004,
    "menon": cd.demosaicing_CFA_Bayer_Menon2007,
    "menon-norefine": lambda cfa, p: cd.demosaicing_CFA_Bayer_Menon2007(cfa, p, refining_step=False),
}


def photo_like(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Edges, texture and smooth shading, quantised to 8 bits (many exact ties for Menon's
    classifier), float64 (H, W, 3) in [0, 1]."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    base = np.stack([0.5 + 0.4 * np.sin(9 * x + 3 * y), 0.5 + 0.3 * np.cos(7 * y), (x > 0.45) * 0.7 + 0.1], -1)
    img = np.clip(base + 0.15 * rng.standard_normal((h, w, 3)) * (rng.random((h, w, 1)) < 0.3), 0, 1)
    return np.round(img * 255) / 255


def to_raw(rgb: np.ndarray, pattern: str, dtype=torch.float64) -> torch.Tensor:
    return mosaic(torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1)[None].to(dtype), pattern)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a - b) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


def hwc(t: torch.Tensor) -> np.ndarray:
    return t[0].permute(1, 2, 0).double().numpy()


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("method", list(OURS))
@pytest.mark.parametrize("size", [(22, 30), (13, 9)])
def test_demosaic_matches_colour_demosaicing(method, pattern, size):
    """Whole image, borders included: float64 agrees to rounding, float32 to float precision
    (>= 60 dB is the requirement; we assert far tighter), for even and odd sizes."""
    rgb = photo_like(*size, seed=len(method) + size[0])
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        raw = to_raw(rgb, pattern, dtype)
        ref = REFERENCE[method](raw[0, 0].double().numpy(), pattern)
        out = OURS[method](raw, pattern)
        assert out.dtype == dtype and out.shape == (1, 3, *size)
        ours = hwc(out)
        assert psnr(ours, ref) >= 60
        assert np.abs(ours - ref).max() <= tol
        # the border band on its own (reflect / mirror extension handled as the reference does)
        band = np.ones(size, bool)
        band[3:-3, 3:-3] = False
        assert np.abs(ours - ref)[band].max() <= tol


@pytest.mark.parametrize("method", list(OURS))
@pytest.mark.parametrize("size", [(2, 2), (3, 2), (2, 5), (4, 4), (5, 3)])
def test_demosaic_tiny_images_match_reference(method, size):
    rng = np.random.default_rng(1)
    for pattern in PATTERNS:
        raw = to_raw(rng.random((*size, 3)), pattern)
        ref = REFERENCE[method](raw[0, 0].numpy(), pattern)
        np.testing.assert_allclose(hwc(OURS[method](raw, pattern)), ref, rtol=0, atol=1e-12)


def test_menon_decisions_match_on_ties():
    """Few grey levels make d_H == d_V exactly at many pixels: the horizontal/vertical choice
    (ties -> horizontal) must be the reference's, so float32 output still agrees to float
    precision (a flipped decision would cost ~0.1 at that pixel)."""
    rng = np.random.default_rng(7)
    for levels in (2, 3, 5):
        rgb = rng.integers(0, levels, (18, 24, 3)) / 255.0
        rgb[:, 12:] = np.cumsum(rgb[:, 12:], axis=1) / 4
        for pattern in PATTERNS:
            raw = to_raw(rgb, pattern, torch.float32)
            ref = cd.demosaicing_CFA_Bayer_Menon2007(raw[0, 0].double().numpy(), pattern)
            assert np.abs(hwc(baselines.demosaic_menon(raw, pattern)) - ref).max() < 1e-6


def test_outputs_are_not_clipped():
    rgb = np.random.default_rng(0).random((12, 12, 3))  # texture: gradient corrections overshoot
    for method in ("malvar", "menon"):
        out = OURS[method](to_raw(rgb, "RGGB"), "RGGB")
        assert out.min() < 0 and out.max() > 1


def _roll_pattern(pattern: str, oy: int, ox: int) -> str:
    """Name of the pattern seen from a crop starting at (oy, ox)."""
    grid = [[pattern[0], pattern[1]], [pattern[2], pattern[3]]]
    return "".join(grid[(i + oy) % 2][(j + ox) % 2] for i in range(2) for j in range(2))


@pytest.mark.parametrize("method", list(OURS))
def test_demosaic_halo_is_exact_and_tight(method):
    """A crop with ``halo`` pixels of context reproduces the untiled interior bit for bit
    (so tiling with that overlap is exact), and inputs at distance ``halo`` do matter."""
    halo = baselines.HALO[method]
    gen = torch.Generator().manual_seed(3)
    raw = torch.rand(1, 1, 40, 44, generator=gen, dtype=torch.float64)
    full = OURS[method](raw, "RGGB")

    def crop_matches(y0: int, x0: int, ctx: int) -> bool:
        y1, x1 = y0 + 9, x0 + 11
        sub = raw[..., y0 - ctx : y1 + ctx, x0 - ctx : x1 + ctx]
        out = OURS[method](sub, _roll_pattern("RGGB", (y0 - ctx) % 2, (x0 - ctx) % 2))
        return torch.equal(out[..., ctx : ctx + y1 - y0, ctx : ctx + x1 - x0], full[..., y0:y1, x0:x1])

    offsets = [(15, 16), (16, 15), (15, 15), (16, 16)]  # every 2x2 phase of the crop
    assert all(crop_matches(y0, x0, halo) for y0, x0 in offsets)

    # tight: changing the input on the ring at distance ``halo`` around a 2x2 block changes the
    # block for some images (Menon's longest paths go through its data-dependent decisions)
    changed = 0
    for seed in range(10):
        g = torch.Generator().manual_seed(seed)
        img = torch.rand(1, 1, 30, 30, generator=g, dtype=torch.float64)
        ring = torch.zeros(30, 30, dtype=torch.bool)
        ring[14 - halo : 16 + halo, 14 - halo : 16 + halo] = True
        ring[15 - halo : 15 + halo, 15 - halo : 15 + halo] = False
        other = img.clone()
        other[0, 0][ring] = torch.rand(int(ring.sum()), generator=g, dtype=torch.float64)
        block = (..., slice(14, 16), slice(14, 16))
        changed += not torch.equal(OURS[method](img, "RGGB")[block], OURS[method](other, "RGGB")[block])
    assert changed > 0


@pytest.mark.parametrize("method", list(OURS))
def test_strips_identical_to_one_pass(method):
    gen = torch.Generator().manual_seed(5)
    raw = torch.rand(2, 1, 37, 26, generator=gen)
    one = OURS[method](raw, "GBRG", strip_pixels=0)
    for strip_pixels in (1, 2 * 2 * 26 * 3, 2 * 26 * 20):  # 2-row strips, 6-row strips, 20-row strips
        assert torch.equal(OURS[method](raw, "GBRG", strip_pixels=strip_pixels), one)


@pytest.mark.parametrize("method", list(OURS))
def test_batch_equals_one_by_one(method):
    gen = torch.Generator().manual_seed(11)
    raw = torch.rand(3, 1, 16, 18, generator=gen)
    batch = OURS[method](raw, "BGGR")
    for i in range(3):
        assert torch.equal(batch[i : i + 1], OURS[method](raw[i : i + 1], "BGGR"))


@pytest.mark.parametrize("method", list(OURS))
def test_demosaic_reproduces_a_flat_colour(method):
    rgb = np.broadcast_to(np.array([0.25, 0.5, 0.75]), (10, 14, 3)).copy()
    for pattern in PATTERNS:
        out = OURS[method](to_raw(rgb, pattern), pattern)
        # bilinear / Malvar: the reference's half-sample symmetric border mixes colours within
        # their radius; Menon's whole-sample mirror keeps the pattern, so it is exact everywhere
        r = {"bilinear": 1, "malvar": 2}.get(method, 0)
        out = out[..., r : out.shape[-2] - r, r : out.shape[-1] - r]
        torch.testing.assert_close(out, torch.tensor([0.25, 0.5, 0.75], dtype=out.dtype).view(1, 3, 1, 1).expand_as(out))


def test_demosaic_input_errors():
    with pytest.raises(UsageError, match=r"\(1, 3, 8, 8\)"):
        baselines.demosaic_menon(torch.rand(1, 3, 8, 8))
    with pytest.raises(UsageError, match="floating"):
        baselines.demosaic_malvar(torch.zeros(1, 1, 8, 8, dtype=torch.uint8))
    with pytest.raises(UsageError, match="2x2"):
        baselines.demosaic_bilinear(torch.rand(1, 1, 1, 8))
    with pytest.raises(UsageError, match="pattern"):
        baselines.demosaic_menon(torch.rand(1, 1, 8, 8), "RGBG")


# ----------------------------------------------------------------------------------------------
# bicubic
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(5, 7), (8, 8), (1, 3), (2, 1), (13, 6)])
@pytest.mark.parametrize("channels", [1, 3])
def test_bicubic_halfpixel_matches_opencv(size, channels):
    rng = np.random.default_rng(size[0] * 10 + size[1])
    lr = rng.random((*size, channels)).astype(np.float32)
    h, w = size
    cv = cv2.resize(lr, (2 * w, 2 * h), interpolation=cv2.INTER_CUBIC).reshape(2 * h, 2 * w, channels)
    ours = baselines.upscale_bicubic_halfpixel(torch.from_numpy(lr).permute(2, 0, 1)[None])
    assert ours.shape == (1, channels, 2 * h, 2 * w) and ours.dtype == torch.float32
    np.testing.assert_allclose(hwc(ours), cv, rtol=0, atol=2e-6)


@pytest.mark.parametrize("a", [-0.5, -0.75])
def test_bicubic_keeps_known_pixels(a):
    gen = torch.Generator().manual_seed(2)
    lr = torch.rand(2, 3, 7, 10, generator=gen)
    up = baselines.upscale_bicubic(lr, a)
    assert up.shape == (2, 3, 14, 20)
    assert torch.equal(up[..., 0::2, 0::2], lr)


def test_bicubic_halfway_weights_are_keys():
    """An impulse gives the kernel itself: W(1.5) and W(0.5) of Keys' cubic with parameter a."""
    for a in (-0.5, -0.75):
        lr = torch.zeros(1, 1, 1, 9, dtype=torch.float64)
        lr[..., 4] = 1
        row = baselines.upscale_bicubic(lr, a)[0, 0, 0]
        w15, w05 = baselines.keys_weight(1.5, a), baselines.keys_weight(0.5, a)
        assert math.isclose(w05, (4 - a) / 8) and math.isclose(w15, a / 8)
        expected = torch.zeros(18, dtype=torch.float64)
        expected[[7, 9]], expected[[5, 11]], expected[8] = w05, w15, 1.0
        torch.testing.assert_close(row, expected, rtol=0, atol=1e-15)


def test_bicubic_reproduces_constants_and_polynomials():
    # constants everywhere (borders included), both kernels
    for fn in (baselines.upscale_bicubic, baselines.upscale_bicubic_halfpixel):
        const = torch.full((1, 2, 6, 5), 0.3, dtype=torch.float64)
        torch.testing.assert_close(fn(const), torch.full((1, 2, 12, 10), 0.3, dtype=torch.float64))
    # a = -0.5: half-way weights [-1, 9, 9, -1]/16 are cubic Lagrange -> a bicubic polynomial on
    # the HR grid is reproduced exactly wherever the 4 taps are inside the image
    yy, xx = torch.meshgrid(torch.arange(24.0, dtype=torch.float64), torch.arange(20.0, dtype=torch.float64), indexing="ij")
    u, v = yy / 23, xx / 19
    poly = (1 + 2 * u - 3 * u**2 + 0.7 * u**3) * (0.5 - v + 2 * v**2 - 1.3 * v**3) + u**3 - 0.2 * v**3
    up = baselines.upscale_bicubic(poly[None, None, 0::2, 0::2], a=-0.5)[0, 0]
    torch.testing.assert_close(up[2:-3, 2:-3], poly[2:-3, 2:-3], rtol=0, atol=1e-12)
    # a = -0.75 (default): reproduces linear functions in the interior, not quadratics
    lin = 0.2 + 0.5 * u - 0.25 * v
    torch.testing.assert_close(baselines.upscale_bicubic(lin[None, None, 0::2, 0::2])[0, 0][2:-3, 2:-3],
                               lin[2:-3, 2:-3], rtol=0, atol=1e-12)
    quad = u**2
    assert not torch.allclose(baselines.upscale_bicubic(quad[None, None, 0::2, 0::2])[0, 0][2:-3, 2:-3],
                              quad[2:-3, 2:-3], atol=1e-6)


@pytest.mark.parametrize("fn", [baselines.upscale_bicubic, baselines.upscale_bicubic_halfpixel])
def test_bicubic_halo_batch_and_dtype(fn):
    halo = baselines.HALO["bicubic"]
    assert baselines.HALO["bicubic-halfpixel"] == halo
    gen = torch.Generator().manual_seed(4)
    lr = torch.rand(3, 2, 20, 22, generator=gen, dtype=torch.float64)
    full = fn(lr)
    assert full.dtype == torch.float64
    for i in range(3):
        assert torch.equal(full[i : i + 1], fn(lr[i : i + 1]))
    y0, x0, ctx = 6, 7, halo // 2  # ctx low-resolution pixels = halo output pixels
    sub = fn(lr[..., y0 - ctx : y0 + 6 + ctx, x0 - ctx : x0 + 5 + ctx])[..., 2 * ctx : 2 * ctx + 12, 2 * ctx : 2 * ctx + 10]
    assert torch.equal(sub, full[..., 2 * y0 : 2 * y0 + 12, 2 * x0 : 2 * x0 + 10])
    ctx -= 1
    sub = fn(lr[..., y0 - ctx : y0 + 6 + ctx, x0 - ctx : x0 + 5 + ctx])[..., 2 * ctx : 2 * ctx + 12, 2 * ctx : 2 * ctx + 10]
    assert not torch.equal(sub, full[..., 2 * y0 : 2 * y0 + 12, 2 * x0 : 2 * x0 + 10])


def test_bicubic_input_errors():
    with pytest.raises(UsageError, match=r"\(3, 4, 4\)"):
        baselines.upscale_bicubic(torch.rand(3, 4, 4))
    with pytest.raises(UsageError, match="floating"):
        baselines.upscale_bicubic_halfpixel(torch.zeros(1, 1, 4, 4, dtype=torch.int64))


# ----------------------------------------------------------------------------------------------
# restorer factory
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,task,halo",
    [("bilinear", "demosaic", 1), ("malvar", "demosaic", 2), ("menon", "demosaic", 8),
     ("bicubic", "upscale2x", 4), ("bicubic-halfpixel", "upscale2x", 4)],
)
def test_make_restorer(name, task, halo):
    r = get_restorer(name, task)
    assert isinstance(r, Restorer) and r.kind == "classical" and r.halo == halo and r.num_params == 0
    gen = torch.Generator().manual_seed(0)
    if task == "demosaic":
        y = torch.rand(2, 1, 12, 16, generator=gen)
        out = r(y, "GRBG")
        assert out.shape == (2, 3, 12, 16)
        assert torch.equal(out, {"bilinear": baselines.demosaic_bilinear, "malvar": baselines.demosaic_malvar,
                                 "menon": baselines.demosaic_menon}[name](y, "GRBG"))
    else:
        y = torch.rand(2, 3, 6, 8, generator=gen)
        assert r(y).shape == (2, 3, 12, 16)
    with pytest.raises(UsageError):
        get_restorer(name, "upscale2x" if task == "demosaic" else "demosaic")
    with pytest.raises(UsageError, match="no option"):
        get_restorer(name, task, bogus=1)


def test_make_restorer_options():
    r = get_restorer("menon", "demosaic", refining=False)
    assert r.halo == baselines.HALO["menon-norefine"] == 6
    y = torch.rand(1, 1, 10, 10)
    assert torch.equal(r(y, "RGGB"), baselines.demosaic_menon(y, "RGGB", refining=False))
    r = get_restorer("bicubic", "upscale2x", a=-0.5)
    assert torch.equal(r(y), baselines.upscale_bicubic(y, -0.5))
    assert r.info["a"] == -0.5


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    gen = torch.Generator().manual_seed(9)
    raw = torch.rand(2, 1, 34, 40, generator=gen)
    for fn in OURS.values():
        torch.testing.assert_close(fn(raw.cuda(), "GRBG").cpu(), fn(raw, "GRBG"), rtol=0, atol=1e-5)
    lr = torch.rand(2, 3, 9, 11, generator=gen)
    for fn in (baselines.upscale_bicubic, baselines.upscale_bicubic_halfpixel):
        torch.testing.assert_close(fn(lr.cuda()).cpu(), fn(lr), rtol=0, atol=1e-6)
