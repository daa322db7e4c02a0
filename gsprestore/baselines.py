"""Classical baselines: bilinear, Malvar 2004 and Menon 2007 demosaicking; bicubic 2x interpolation.

Every function is a pure torch function on a batch, runs on CPU or GPU, keeps the input's floating
dtype (float32 by default, float64 works too) and **never clips** its output: values may leave
[0, 1] near edges, exactly as in the reference implementations.

Demosaicking reproduces colour-demosaicing 0.2.7 (``demosaicing_CFA_Bayer_bilinear``,
``_Malvar2004``, ``_Menon2007``) on the whole image, borders included, for all four Bayer patterns
(``gsprestore.sampling.PATTERNS``). The boundary modes are the reference's:

* bilinear and Malvar: ``scipy.ndimage.convolve`` with its default ``mode="reflect"``, i.e. the
  half-sample symmetric extension ``d c b a | a b c d | d c b a`` (the edge pixel is repeated).
  Note that this extension does *not* keep the Bayer phase, so the reference mixes colours in the
  outermost rows/columns; we do the same on purpose.
* Menon: ``convolve1d(mode="mirror")`` / ``np.pad(mode="reflect")``, the whole-sample symmetric
  extension ``d c b | a b c d | c b a`` (torch's ``"reflect"``), which keeps the Bayer phase, and
  zero extension (``mode="constant"``) for the classifier sums.

The implementation differs from the reference only in being computed per Bayer site (each output
value is evaluated once, at the 2x2-block phase where it is needed, with strided views instead of
full-image ``np.where``), in float32 when the input is float32, and, for large mosaics, strip by
strip with the exact halo (results identical to one pass). Agreement with the reference is tested
in ``tests/test_baselines.py`` and measured on Kodak/McM by ``benchmarks/check_baselines.py``.

2x interpolation follows PROTOCOL.md: the low-resolution input is ``HR[0::2, 0::2]``.
:func:`upscale_bicubic` is aligned to that grid (known pixels stay exactly where they are);
:func:`upscale_bicubic_halfpixel` reproduces OpenCV's ``cv2.resize(..., INTER_CUBIC)``, the
paper's baseline, whose half-pixel convention is a quarter pixel off the decimation grid.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import UsageError
from .sampling import check_pattern

__all__ = [
    "demosaic_bilinear",
    "demosaic_malvar",
    "demosaic_menon",
    "upscale_bicubic",
    "upscale_bicubic_halfpixel",
    "keys_weight",
    "make_restorer",
    "HALO",
    "STRIP_PIXELS",
]

#: Exact context (pixels each side) a tile needs for its interior to equal the untiled result.
#: Checked (tight) by ``tests/test_baselines.py::test_halo_is_exact_and_tight``.
HALO: dict[str, int] = {
    "bilinear": 1,
    "malvar": 2,
    "menon": 8,  # with the refining step
    "menon-norefine": 6,
    "bicubic": 4,  # in output pixels
    "bicubic-halfpixel": 4,  # in output pixels
}

#: Demosaicking works on horizontal strips of at most this many pixels (batch included), each
#: with the exact halo above and below, so memory stays bounded on very large mosaics.
STRIP_PIXELS: int = 1 << 21


# ----------------------------------------------------------------------------------------------
# Boundary extension and strided Bayer-site views
# ----------------------------------------------------------------------------------------------


def _source_index(i: int, n: int, mode: str) -> int:
    """Index in ``[0, n)`` that out-of-range index ``i`` reads under the extension ``mode``
    (scipy.ndimage names: ``mirror`` = whole-sample, ``reflect`` = half-sample symmetric)."""
    if mode == "replicate":
        return min(max(i, 0), n - 1)
    if mode == "mirror":
        if n == 1:
            return 0
        period = 2 * (n - 1)
        i %= period
        return period - i if i >= n else i
    if mode == "reflect":
        period = 2 * n
        i %= period
        return period - 1 - i if i >= n else i
    raise ValueError(f"unknown boundary mode {mode!r}")


def _pad(x: Tensor, top: int, bottom: int, left: int, right: int, mode: str) -> Tensor:
    """Extend the last two dims of ``x`` by the given amounts with scipy.ndimage's ``mode``
    (``"constant"`` (zeros), ``"mirror"``, ``"reflect"`` or ``"replicate"``); any size works."""
    if mode == "constant":
        return F.pad(x, (left, right, top, bottom))
    H, W = x.shape[-2:]
    out = x.new_empty(*x.shape[:-2], H + top + bottom, W + left + right)
    out[..., top : top + H, left : left + W] = x
    for i in [*range(-top, 0), *range(H, H + bottom)]:
        out[..., top + i, left : left + W] = x[..., _source_index(i, H, mode), :]
    for j in [*range(-left, 0), *range(W, W + right)]:
        out[..., :, left + j] = out[..., :, left + _source_index(j, W, mode)]
    return out


class _Padded:
    """A tensor extended by ``r`` rows / ``c`` columns each side, read at one Bayer site.

    ``at(site, di, dj)`` is the strided view of the extended tensor at positions
    ``(i + di, j + dj)`` for every pixel ``(i, j)`` of the 2x2 phase ``site = (a, b)``, i.e. the same
    shape as ``x[..., a::2, b::2]``."""

    def __init__(self, x: Tensor, r: int, c: int, mode: str):
        self.H, self.W = x.shape[-2:]
        self.r, self.c = r, c
        self.t = _pad(x, r, r, c, c, mode)

    def at(self, site: tuple[int, int], di: int = 0, dj: int = 0) -> Tensor:
        a, b = site
        r0, c0 = self.r + di, self.c + dj
        return self.t[..., r0 + a : r0 + self.H : 2, c0 + b : c0 + self.W : 2]


def _site(x: Tensor, site: tuple[int, int]) -> Tensor:
    """View of ``x`` at one 2x2 phase (a Bayer site)."""
    return x[..., site[0] :: 2, site[1] :: 2]


def _stencil(p: _Padded, site: tuple[int, int], taps: tuple[tuple[int, int, float], ...]) -> Tensor:
    """``sum_k w_k * x[i + di_k, j + dj_k]`` at one Bayer site (a correlation; every kernel used
    with it here is symmetric under a 180-degree turn, so it equals scipy's convolution)."""
    di, dj, w = taps[0]
    acc = p.at(site, di, dj) * w
    for di, dj, w in taps[1:]:
        acc.add_(p.at(site, di, dj), alpha=w)
    return acc


@lru_cache(maxsize=None)
def _sites(pattern: str) -> dict[str, tuple[int, int]]:
    """The 2x2 phases of a Bayer pattern: ``R``, ``B``, ``Gr`` (green in red rows, i.e. in blue
    columns) and ``Gb`` (green in blue rows / red columns)."""
    p = check_pattern(pattern)
    ra, rb = divmod(p.index("R"), 2)
    return {"R": (ra, rb), "Gr": (ra, 1 - rb), "Gb": (1 - ra, rb), "B": (1 - ra, 1 - rb)}


def _check_raw(raw: Tensor, what: str) -> None:
    if not isinstance(raw, Tensor) or raw.dim() != 4 or raw.shape[1] != 1:
        shape = tuple(raw.shape) if isinstance(raw, Tensor) else type(raw).__name__
        raise UsageError(f"{what} needs a Bayer mosaic of shape (B, 1, H, W), got {shape}")
    if not raw.is_floating_point():
        raise UsageError(f"{what} needs a floating-point mosaic, got {raw.dtype}")
    if raw.shape[-2] < 2 or raw.shape[-1] < 2:
        raise UsageError(f"{what} needs a mosaic of at least 2x2 pixels, got {tuple(raw.shape)}")


def _in_strips(fn: Callable[[Tensor], Tensor], raw: Tensor, halo: int, strip_pixels: int | None) -> Tensor:
    """Apply a demosaicking ``fn`` to horizontal strips of ``raw`` with ``halo`` rows of context
    (rounded up to even to keep the Bayer phase) and stitch: identical to ``fn(raw)`` whenever
    ``halo`` is at least the method's dependency radius (:data:`HALO`)."""
    B, _, H, W = raw.shape
    if strip_pixels is None or strip_pixels <= 0:
        return fn(raw)
    rows = max(2, strip_pixels // max(1, B * W) // 2 * 2)
    if rows >= H:
        return fn(raw)
    ctx = halo + halo % 2
    out = raw.new_empty(B, 3, H, W)
    for r0 in range(0, H, rows):
        r1 = min(H, r0 + rows)
        s0, s1 = max(0, r0 - ctx), min(H, r1 + ctx)
        out[..., r0:r1, :] = fn(raw[..., s0:s1, :])[..., r0 - s0 : r1 - s0, :]
    return out


# ----------------------------------------------------------------------------------------------
# Bilinear
# ----------------------------------------------------------------------------------------------

_CROSS = ((0, 0, 1.0), (-1, 0, 0.25), (1, 0, 0.25), (0, -1, 0.25), (0, 1, 0.25))
_BOX = tuple((di, dj, (1.0 if di == 0 else 0.5) * (1.0 if dj == 0 else 0.5)) for di in (-1, 0, 1) for dj in (-1, 0, 1))


def _bilinear(raw: Tensor, pattern: str) -> Tensor:
    from .sampling import bayer_masks

    H, W = raw.shape[-2:]
    masks = bayer_masks(H, W, pattern, device=raw.device, dtype=raw.dtype)
    out = raw.new_empty(raw.shape[0], 3, H, W)
    for c, taps in ((0, _BOX), (1, _CROSS), (2, _BOX)):
        p = _Padded(raw * masks[c], 1, 1, "reflect")
        dst = out[:, c : c + 1]
        for site in ((0, 0), (0, 1), (1, 0), (1, 1)):
            _site(dst, site).copy_(_stencil(p, site, taps))
    return out


def demosaic_bilinear(raw: Tensor, pattern: str = "RGGB", *, strip_pixels: int | None = STRIP_PIXELS) -> Tensor:
    """Bilinear demosaicking: each colour plane, zero where not sampled, is convolved with
    ``[[0,1,0],[1,4,1],[0,1,0]]/4`` (green) or ``[[1,2,1],[2,4,2],[1,2,1]]/4`` (red, blue)
    (Losson, Macaire & Yang 2010, "Comparison of color demosaicing methods", Adv. Imaging and
    Electron Physics 162; as in colour-demosaicing's ``demosaicing_CFA_Bayer_bilinear``).

    ``raw`` (B, 1, H, W) float -> RGB (B, 3, H, W), same dtype and device, not clipped.
    Boundary: half-sample symmetric extension (scipy ``mode="reflect"``) of the masked planes,
    exactly as the reference, so the outermost rows/columns match it too. Exact tiling halo: 1.
    """
    _check_raw(raw, "bilinear demosaicking")
    check_pattern(pattern)
    return _in_strips(lambda r: _bilinear(r, pattern), raw, HALO["bilinear"], strip_pixels)


# ----------------------------------------------------------------------------------------------
# Malvar, He & Cutler 2004
# ----------------------------------------------------------------------------------------------


def _taps(kernel: list[list[float]], scale: float) -> tuple[tuple[int, int, float], ...]:
    r = len(kernel) // 2
    return tuple(
        (i - r, j - r, v / scale) for i, row in enumerate(kernel) for j, v in enumerate(row) if v != 0
    )


# Malvar et al. 2004, Fig. 2 (the kernels of colour-demosaicing's implementation).
_M_G_AT_RB = _taps([[0, 0, -1, 0, 0], [0, 0, 2, 0, 0], [-1, 2, 4, 2, -1], [0, 0, 2, 0, 0], [0, 0, -1, 0, 0]], 8)
_M_ROW = [[0, 0, 0.5, 0, 0], [0, -1, 0, -1, 0], [-1, 4, 5, 4, -1], [0, -1, 0, -1, 0], [0, 0, 0.5, 0, 0]]
_M_RB_AT_G_ROW = _taps(_M_ROW, 8)  # colour whose samples are left/right of the green pixel
_M_RB_AT_G_COL = _taps([list(c) for c in zip(*_M_ROW)], 8)  # colour above/below the green pixel
_M_RB_AT_BR = _taps([[0, 0, -1.5, 0, 0], [0, 2, 0, 2, 0], [-1.5, 0, 6, 0, -1.5], [0, 2, 0, 2, 0], [0, 0, -1.5, 0, 0]], 8)


def _malvar(raw: Tensor, pattern: str) -> Tensor:
    s = _sites(pattern)
    p = _Padded(raw, 2, 2, "reflect")
    out = raw.new_empty(raw.shape[0], 3, *raw.shape[-2:])
    R, G, B = out[:, 0:1], out[:, 1:2], out[:, 2:3]
    for site in ("Gr", "Gb"):
        _site(G, s[site]).copy_(_site(raw, s[site]))
    for site in ("R", "B"):
        _site(G, s[site]).copy_(_stencil(p, s[site], _M_G_AT_RB))
    # red: known at R, row kernel at Gr (red left/right), column kernel at Gb, diagonal at B
    _site(R, s["R"]).copy_(_site(raw, s["R"]))
    _site(R, s["Gr"]).copy_(_stencil(p, s["Gr"], _M_RB_AT_G_ROW))
    _site(R, s["Gb"]).copy_(_stencil(p, s["Gb"], _M_RB_AT_G_COL))
    _site(R, s["B"]).copy_(_stencil(p, s["B"], _M_RB_AT_BR))
    # blue: the mirror image
    _site(B, s["B"]).copy_(_site(raw, s["B"]))
    _site(B, s["Gb"]).copy_(_stencil(p, s["Gb"], _M_RB_AT_G_ROW))
    _site(B, s["Gr"]).copy_(_stencil(p, s["Gr"], _M_RB_AT_G_COL))
    _site(B, s["R"]).copy_(_stencil(p, s["R"], _M_RB_AT_BR))
    return out


def demosaic_malvar(raw: Tensor, pattern: str = "RGGB", *, strip_pixels: int | None = STRIP_PIXELS) -> Tensor:
    """Gradient-corrected linear demosaicking of Malvar, He & Cutler, "High-quality linear
    interpolation for demosaicing of Bayer-patterned color images", ICASSP 2004 (the eight 5x5
    filters of their Fig. 2, gains alpha = 1/2, beta = 5/8, gamma = 3/4), as in colour-demosaicing's
    ``demosaicing_CFA_Bayer_Malvar2004``.

    ``raw`` (B, 1, H, W) float -> RGB (B, 3, H, W), same dtype and device, not clipped.
    Boundary: half-sample symmetric extension of the mosaic (scipy ``mode="reflect"``), exactly as
    the reference (so the two outermost rows/columns mix colours as the reference does).
    Each filter is evaluated only at the Bayer sites where it is used. Exact tiling halo: 2.
    """
    _check_raw(raw, "Malvar demosaicking")
    check_pattern(pattern)
    return _in_strips(lambda r: _malvar(r, pattern), raw, HALO["malvar"], strip_pixels)


# ----------------------------------------------------------------------------------------------
# Menon, Andriani & Calvagno 2007 (DDFAPD)
# ----------------------------------------------------------------------------------------------

# Classifier sums of |colour-difference gradients| (Menon et al. 2007, eqs. (7)-(8)): the 5x5
# kernel ``k`` of colour-demosaicing, written as (di, dj, weight) offsets of the convolution.
_K_H = ((0, 0, 3.0), (0, -2, 3.0), (-1, -1, 1.0), (1, -1, 1.0), (-2, 0, 1.0), (2, 0, 1.0), (-2, -2, 1.0), (2, -2, 1.0))
_K_V = tuple((dj, di, w) for di, dj, w in _K_H)


def _menon(raw: Tensor, pattern: str, refining: bool) -> Tensor:
    s = _sites(pattern)
    RB = ("R", "B")
    # (1) directional green estimates at the red and blue sites (eq. (3), filters h0 + h1)
    ph = _Padded(raw, 0, 2, "mirror")
    pv = _Padded(raw, 2, 0, "mirror")
    g_h, g_v = {}, {}
    for k in RB:
        c = s[k]
        x = _site(raw, c)
        g_h[k] = (ph.at(c, 0, -1) + ph.at(c, 0, 1)).mul_(0.5).sub_(ph.at(c, 0, -2).add(ph.at(c, 0, 2)), alpha=0.25).add_(x, alpha=0.5)
        g_v[k] = (pv.at(c, -1, 0) + pv.at(c, 1, 0)).mul_(0.5).sub_(pv.at(c, -2, 0).add(pv.at(c, 2, 0)), alpha=0.25).add_(x, alpha=0.5)
    # (2) colour differences, their gradients and the directional classifier (eqs. (4)-(8))
    decision = {}
    d = {}
    for name, g, r, c, shift, taps in (("h", g_h, 0, 2, (0, 2), _K_H), ("v", g_v, 2, 0, (2, 0), _K_V)):
        chroma = torch.zeros_like(raw)
        for k in RB:
            torch.sub(_site(raw, s[k]), g[k], out=_site(chroma, s[k]))
        pc = _Padded(chroma, r, c, "mirror")
        grad = torch.zeros_like(raw)
        for k in RB:
            torch.sub(_site(chroma, s[k]), pc.at(s[k], *shift), out=_site(grad, s[k])).abs_()
        del chroma, pc
        pg = _Padded(grad, 2, 2, "constant")
        d[name] = {k: _stencil(pg, s[k], taps) for k in RB}
        del grad, pg
    M = {k: d["v"][k] >= d["h"][k] for k in RB}  # True: horizontal direction
    del d
    # (3) green plane
    G = raw.clone()
    for k in RB:
        torch.where(M[k], g_h[k], g_v[k], out=_site(G, s[k]))
    del g_h, g_v
    # (4) red and blue at green sites, then at blue/red sites (eqs. (9)-(11))
    R = torch.zeros_like(raw)
    B = torch.zeros_like(raw)
    _site(R, s["R"]).copy_(_site(raw, s["R"]))
    _site(B, s["B"]).copy_(_site(raw, s["B"]))
    _half_sum_update(R, G, G, s["Gr"], "h", sign=1.0)
    _half_sum_update(R, G, G, s["Gb"], "v", sign=1.0)
    _half_sum_update(B, G, G, s["Gb"], "h", sign=1.0)
    _half_sum_update(B, G, G, s["Gr"], "v", sign=1.0)
    diff = _Padded(R - B, 1, 1, "mirror")  # R - B, read at green sites only
    _select_update(R, B, diff, s["B"], M["B"], _PAIR, sign=1.0)
    _select_update(B, R, diff, s["R"], M["R"], _PAIR, sign=-1.0)
    del diff
    if refining:
        _menon_refine(R, G, B, s, M)
    return torch.cat((R, G, B), dim=1)


_PAIR = ((0, -1, 0.5), (0, 1, 0.5))  # k_b = [0.5, 0, 0.5]
_FIR = ((0, -1, 1 / 3), (0, 0, 1 / 3), (0, 1, 1 / 3))  # ones(3) / 3


def _directional(taps: tuple[tuple[int, int, float], ...], direction: str) -> tuple[tuple[int, int, float], ...]:
    return taps if direction == "h" else tuple((dj, di, w) for di, dj, w in taps)


def _half_sum_update(X: Tensor, base: Tensor, ref: Tensor, site: tuple[int, int], direction: str, sign: float) -> None:
    """``X[site] = base[site] + sign * conv(X - ref, k_b)[site]`` along ``direction``."""
    r, c = (0, 1) if direction == "h" else (1, 0)
    p = _Padded(X - ref, r, c, "mirror")
    torch.add(_site(base, site), _stencil(p, site, _directional(_PAIR, direction)), alpha=sign, out=_site(X, site))


def _select_update(
    X: Tensor, base: Tensor, p: _Padded, site: tuple[int, int], horizontal: Tensor, taps, sign: float
) -> None:
    """``X[site] = base[site] + sign * (horizontal ? conv_h(p) : conv_v(p))[site]``."""
    h = _stencil(p, site, _directional(taps, "h"))
    v = _stencil(p, site, _directional(taps, "v"))
    torch.add(_site(base, site), torch.where(horizontal, h, v), alpha=sign, out=_site(X, site))


def _menon_refine(R: Tensor, G: Tensor, B: Tensor, s: dict[str, tuple[int, int]], M: dict[str, Tensor]) -> None:
    """Refining step of Menon et al. 2007, Sec. III-C (in place), as colour-demosaicing's
    ``refining_step_Menon2007``."""
    # green at red/blue sites from the low-passed (along the chosen direction) colour difference
    rg = _Padded(R - G, 1, 1, "mirror")
    bg = _Padded(B - G, 1, 1, "mirror")
    _select_update(G, R, rg, s["R"], M["R"], _FIR, sign=-1.0)
    _select_update(G, B, bg, s["B"], M["B"], _FIR, sign=-1.0)
    del rg, bg
    # red and blue at green sites from the updated colour differences
    _half_sum_update(R, G, G, s["Gb"], "v", sign=1.0)
    _half_sum_update(R, G, G, s["Gr"], "h", sign=1.0)
    _half_sum_update(B, G, G, s["Gr"], "v", sign=1.0)
    _half_sum_update(B, G, G, s["Gb"], "h", sign=1.0)
    # red at blue sites and blue at red sites
    rb = _Padded(R - B, 1, 1, "mirror")
    _select_update(R, B, rb, s["B"], M["B"], _FIR, sign=1.0)
    _select_update(B, R, rb, s["R"], M["R"], _FIR, sign=-1.0)


def demosaic_menon(
    raw: Tensor, pattern: str = "RGGB", refining: bool = True, *, strip_pixels: int | None = STRIP_PIXELS
) -> Tensor:
    """Demosaicking with directional filtering and a posteriori decision (DDFAPD) of Menon,
    Andriani & Calvagno, "Demosaicing with directional filtering and a posteriori decision",
    IEEE Trans. Image Processing 16(1), 2007, with its refining step (Sec. III-C) when
    ``refining``; as in colour-demosaicing's ``demosaicing_CFA_Bayer_Menon2007``.

    ``raw`` (B, 1, H, W) float -> RGB (B, 3, H, W), same dtype and device, not clipped.
    Boundary: whole-sample symmetric extension (scipy ``mode="mirror"``, torch ``"reflect"``)
    for every directional filter, zero extension for the classifier sums, exactly as the
    reference. Ties of the classifier pick the horizontal estimate, as the reference does.
    Mosaics larger than ``strip_pixels`` are processed in horizontal strips with the exact halo
    (identical results, bounded memory). Exact tiling halo: 8 (6 without refining).
    """
    _check_raw(raw, "Menon demosaicking")
    check_pattern(pattern)
    halo = HALO["menon" if refining else "menon-norefine"]
    return _in_strips(lambda r: _menon(r, pattern, refining), raw, halo, strip_pixels)


# ----------------------------------------------------------------------------------------------
# Bicubic 2x interpolation
# ----------------------------------------------------------------------------------------------


def keys_weight(t: float, a: float = -0.75) -> float:
    """Keys' cubic convolution kernel W(t) (Keys, "Cubic convolution interpolation for digital
    image processing", IEEE Trans. ASSP 29(6), 1981, eq. (15)) with parameter ``a``."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    if t < 2:
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return 0.0


def _check_lr(lr: Tensor, what: str) -> None:
    if not isinstance(lr, Tensor) or lr.dim() != 4:
        shape = tuple(lr.shape) if isinstance(lr, Tensor) else type(lr).__name__
        raise UsageError(f"{what} needs an image batch of shape (B, C, h, w), got {shape}")
    if not lr.is_floating_point():
        raise UsageError(f"{what} needs a floating-point image, got {lr.dtype}")
    if lr.shape[-2] < 1 or lr.shape[-1] < 1:
        raise UsageError(f"{what} needs a non-empty image, got {tuple(lr.shape)}")


def _upsample_dim(x: Tensor, dim: int, phases: tuple[tuple[int, tuple[float, ...]], ...]) -> Tensor:
    """Double ``x`` along ``dim`` (-1 or -2): output ``2k + p`` is ``sum_m w_m x[k + o + m]`` for
    each ``(o, w)`` of ``phases[p]``, with edge replication (indices clamped)."""
    n = x.shape[dim]
    lo = max(0, -min(o for o, _ in phases))
    hi = max(0, max(o + len(w) - 1 for o, w in phases))
    xp = _pad(x, lo, hi, 0, 0, "replicate") if dim == -2 else _pad(x, 0, 0, lo, hi, "replicate")
    shape = list(x.shape)
    shape[dim] *= 2
    out = x.new_empty(shape)
    for p, (o, w) in enumerate(phases):
        dst = out[..., p::2, :] if dim == -2 else out[..., p::2]
        if len(w) == 1 and w[0] == 1.0 and o == 0:
            dst.copy_(x)
            continue
        acc = None
        for m, wm in enumerate(w):
            s = lo + o + m
            src = xp.narrow(dim, s, n)
            acc = src * wm if acc is None else acc.add_(src, alpha=wm)
        dst.copy_(acc)
    return out


def upscale_bicubic(lr: Tensor, a: float = -0.75) -> Tensor:
    """2x cubic-convolution interpolation aligned to the decimation grid ``HR[0::2, 0::2]``
    (Keys 1981 with parameter ``a``; separable, one 1-D pass per axis).

    ``lr`` (B, C, h, w) float -> (B, C, 2h, 2w), same dtype and device, not clipped. Output pixel
    ``(2i, 2j)`` is ``lr[i, j]`` exactly (the known samples stay where they are); a half-way
    pixel ``2i + 1`` is ``W(1.5) lr[i-1] + W(.5) lr[i] + W(.5) lr[i+1] + W(1.5) lr[i+2]``, i.e.
    ``[a, 4 - a, 4 - a, a] / 8``. Boundary: edge replication (indices clamped, like OpenCV), so
    the last row/column ``2h - 1`` is interpolated between ``lr[h-1]`` and its copies.
    The default ``a = -0.75`` (OpenCV's) reproduces PROTOCOL.md's "aligned bicubic" rows;
    ``a = -0.5`` makes the half-way weights the cubic Lagrange ones ``[-1, 9, 9, -1] / 16``
    (exact for cubic polynomials away from the border). Exact tiling halo: 4 output pixels.
    """
    _check_lr(lr, "bicubic interpolation")
    w = (a / 8, (4 - a) / 8, (4 - a) / 8, a / 8)
    phases = ((0, (1.0,)), (-1, w))
    return _upsample_dim(_upsample_dim(lr, -2, phases), -1, phases)


def upscale_bicubic_halfpixel(lr: Tensor) -> Tensor:
    """2x bicubic interpolation with OpenCV's ``cv2.resize(lr, (2w, 2h), interpolation=
    cv2.INTER_CUBIC)`` convention, the paper's bicubic baseline (PROTOCOL.md): output pixel ``d``
    samples the input at ``(d + 0.5) / 2 - 0.5``, Keys kernel with ``a = -0.75``, source indices
    clamped to the image (edge replication), horizontal pass then vertical pass.

    ``lr`` (B, C, h, w) float -> (B, C, 2h, 2w), same dtype and device, not clipped. Agrees with
    OpenCV on float32 input to float rounding. Its sampling grid is a quarter pixel off the
    ``HR[0::2, 0::2]`` decimation grid, so it does not keep the known samples. Exact tiling halo:
    4 output pixels.
    """
    _check_lr(lr, "bicubic interpolation")
    # even output 2k: position k - 1/4 (taps k-2..k+1); odd output 2k+1: k + 1/4 (taps k-1..k+2)
    even = tuple(keys_weight(t) for t in (1.75, 0.75, 0.25, 1.25))
    odd = tuple(keys_weight(t) for t in (1.25, 0.25, 0.75, 1.75))
    phases = ((-2, even), (-1, odd))
    return _upsample_dim(_upsample_dim(lr, -1, phases), -2, phases)


# ----------------------------------------------------------------------------------------------
# Restorer factory
# ----------------------------------------------------------------------------------------------

_TASK = {
    "bilinear": "demosaic",
    "malvar": "demosaic",
    "menon": "demosaic",
    "bicubic": "upscale2x",
    "bicubic-halfpixel": "upscale2x",
}


def make_restorer(name: str, task: str, **options: Any):
    """Build the :class:`gsprestore.restorers.Restorer` of a classical method.

    Options: ``menon`` takes ``refining`` (bool, default True); the demosaickers take
    ``strip_pixels`` (int, 0 = one pass); ``bicubic`` takes ``a`` (float, default -0.75).
    ``halo`` is the exact context a tile needs (:data:`HALO`)."""
    from .restorers import Restorer

    if name not in _TASK:
        raise UsageError(f"unknown classical method {name!r}; expected one of {', '.join(_TASK)}")
    if task != _TASK[name]:
        raise UsageError(f"method {name!r} does {_TASK[name]}, not {task}")
    allowed = {"menon": {"refining", "strip_pixels"}, "bilinear": {"strip_pixels"}, "malvar": {"strip_pixels"},
               "bicubic": {"a"}, "bicubic-halfpixel": set()}[name]
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise UsageError(
            f"method {name!r} has no option {', '.join(unknown)}"
            + (f"; options: {', '.join(sorted(allowed))}" if allowed else "")
        )
    info: dict[str, Any] = dict(options)
    halo = HALO[name]
    if name in ("bilinear", "malvar", "menon"):
        func = {"bilinear": demosaic_bilinear, "malvar": demosaic_malvar, "menon": demosaic_menon}[name]
        kwargs: dict[str, Any] = {}
        if "strip_pixels" in options:
            kwargs["strip_pixels"] = int(options["strip_pixels"]) or None
        if name == "menon":
            refining = bool(options.get("refining", True))
            kwargs["refining"] = refining
            info["refining"] = refining
            halo = HALO["menon" if refining else "menon-norefine"]

        def fn(y: Tensor, pattern: str = "RGGB") -> Tensor:
            return func(y, pattern, **kwargs)

    elif name == "bicubic":
        a = float(options.get("a", -0.75))
        info["a"] = a

        def fn(y: Tensor, pattern: str = "RGGB") -> Tensor:
            return upscale_bicubic(y, a)

    else:

        def fn(y: Tensor, pattern: str = "RGGB") -> Tensor:
            return upscale_bicubic_halfpixel(y)

    return Restorer(name=name, task=task, fn=fn, halo=halo, kind="classical", module=None, info=info)
