"""Classical demosaicking: bilinear, Malvar 2004 and Menon 2007 (the bicubic 2x interpolation is in
:mod:`gsprestore.classical.upscale`; :mod:`gsprestore.methods.classical_methods` builds their restorers).

Every function is a pure torch function on a batch, runs on CPU or GPU, keeps the input's floating
dtype (float32 by default, float64 works too) and **never clips** its output: values may leave
[0, 1] near edges, exactly as in the reference implementations.

Demosaicking reproduces colour-demosaicing 0.2.7 (``demosaicing_CFA_Bayer_bilinear``,
``_Malvar2004``, ``_Menon2007``) on the whole image, borders included, for all four Bayer patterns
(``gsprestore.physics.sampling.PATTERNS``). The boundary modes are the reference's:

* bilinear and Malvar: ``scipy.ndimage.convolve`` with its default ``mode="reflect"``, i.e. the
  half-sample symmetric extension ``d c b a | a b c d | d c b a`` (the edge pixel is repeated).
  Note that this extension does *not* keep the Bayer phase, so the reference mixes colours in the
  outermost rows/columns; we do the same on purpose.
* Menon: ``convolve1d(mode="mirror")`` / ``np.pad(mode="reflect")``, the whole-sample symmetric
  extension ``d c b | a b c d | c b a`` (torch's ``"reflect"``), which keeps the Bayer phase, and
  zero extension (``mode="constant"``) for the classifier sums.

The implementation differs from the reference only in being computed per Bayer site: the mosaic
is split into four contiguous planes (one per 2x2 phase), each output value is evaluated once, at
the site where it is needed, from shifted slices of boundary-extended planes (no full-image
``np.where``); in float32 when the input is float32 (except Menon's direction classifier, which runs
in float64 with scipy's order of operations so its decisions, ties included, are the reference's);
and, for large mosaics, strip by strip with the exact halo (identical results, bounded memory).
Agreement with the reference is tested in ``tests/test_baselines.py`` and measured on Kodak/McM by
``benchmarks/check_baselines.py`` (see docs/baselines.md).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.errors import UsageError
from ..physics.sampling import check_pattern

__all__ = ["demosaic_bilinear", "demosaic_malvar", "demosaic_menon", "HALO", "STRIP_PIXELS"]

#: Exact context (pixels each side) a tile needs for its interior to equal the untiled result.
#: Checked (tight) by ``tests/test_baselines.py::test_halo_is_exact_and_tight``.
HALO: dict[str, int] = {
    "bilinear": 1,
    "malvar": 2,
    "menon": 8,  # with the refining step
    "menon-norefine": 6,
}

#: Demosaicking works on horizontal strips of at most this many pixels (batch included), each
#: with the exact halo above and below, so memory stays bounded on very large mosaics.
STRIP_PIXELS: int = 1 << 21


# ----------------------------------------------------------------------------------------------
# Boundary extension and Bayer-site planes
# ----------------------------------------------------------------------------------------------

Site = tuple[int, int]
SITES: tuple[Site, ...] = ((0, 0), (0, 1), (1, 0), (1, 1))


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


def _pad(
    x: Tensor, top: int, bottom: int, left: int, right: int,
    row_src: Callable[[int], int], col_src: Callable[[int], int],
) -> Tensor:
    """Extend the last two dims of ``x``; the new row ``i`` (< 0 or >= H) copies row
    ``row_src(i)``, likewise for columns (corners follow from doing rows first)."""
    H, W = x.shape[-2:]
    if top or bottom:
        rows = [x[..., row_src(i) : row_src(i) + 1, :] for i in range(-top, 0)]
        rows += [x] + [x[..., row_src(i) : row_src(i) + 1, :] for i in range(H, H + bottom)]
        x = torch.cat(rows, dim=-2)
    if left or right:
        cols = [x[..., col_src(j) : col_src(j) + 1] for j in range(-left, 0)]
        cols += [x] + [x[..., col_src(j) : col_src(j) + 1] for j in range(W, W + right)]
        x = torch.cat(cols, dim=-1)
    return x


def _pad_mode(x: Tensor, top: int, bottom: int, left: int, right: int, mode: str) -> Tensor:
    """:func:`_pad` with one of scipy.ndimage's extension modes (any size works)."""
    if mode == "constant":
        return F.pad(x, (left, right, top, bottom))
    H, W = x.shape[-2:]
    return _pad(x, top, bottom, left, right, lambda i: _source_index(i, H, mode), lambda j: _source_index(j, W, mode))


def _plane_len(n: int, phase: int) -> int:
    """Length of ``range(phase, n, 2)``."""
    return (n - phase + 1) // 2


class _Field:
    """A quantity on the H x W pixel grid stored as one contiguous plane per Bayer site
    (site ``(a, b)`` holds the pixels ``[a::2, b::2]``); sites without a plane are zero.

    ``at(site, di, dj)`` is, for every pixel ``(i, j)`` of ``site``, the value at ``(i + di, j + dj)``
    (``|di|, |dj| <= 2``) under the boundary extension ``mode``: a contiguous slice of the
    neighbour site's extended plane. Either ``planes`` (a dict, or a function ``site -> plane``
    evaluated lazily once per site) are extended plane by plane, which is exact for the
    phase-preserving ``"mirror"`` and ``"constant"`` modes, or :meth:`of_image` extends the full
    image first (any mode, e.g. scipy's ``"reflect"``, which mixes sites at the border)."""

    def __init__(
        self, planes: dict[Site, Tensor] | Callable[[Site], Tensor | None], H: int, W: int, mode: str,
        rows: int = 1, cols: int = 1,
    ):
        if mode not in ("mirror", "constant"):
            raise ValueError(f"plane-wise extension needs a phase-preserving mode, got {mode!r}")
        self.get = planes.get if isinstance(planes, dict) else planes
        self.H, self.W, self.mode, self.rows, self.cols = H, W, mode, rows, cols
        self.cache: dict[Site, Tensor | None] = {}

    @classmethod
    def of_image(cls, x: Tensor, mode: str) -> "_Field":
        """Extend the full image ``x`` (..., H, W) by 2 pixels with ``mode``, then split it."""
        H, W = x.shape[-2:]
        xp = _pad_mode(x, 2, 2, 2, 2, mode)
        f = cls.__new__(cls)
        f.get = lambda site: None  # never called: every site is cached below
        f.H, f.W, f.mode, f.rows, f.cols = H, W, mode, 1, 1
        f.cache = {site: xp[..., site[0] :: 2, site[1] :: 2].contiguous() for site in SITES}
        return f

    def plane(self, site: Site) -> Tensor | None:
        """The extended plane of ``site`` (None: zero)."""
        if site not in self.cache:
            p = self.get(site)
            if p is not None:
                a, b = site
                if self.mode == "constant":
                    p = F.pad(p, (self.cols, self.cols, self.rows, self.rows))
                else:  # whole-sample mirror keeps the phase: (i -> -i, i -> 2(n-1) - i)
                    H, W = self.H, self.W
                    p = _pad(
                        p, self.rows, self.rows, self.cols, self.cols,
                        lambda u: (_source_index(2 * u + a, H, "mirror") - a) // 2,
                        lambda v: (_source_index(2 * v + b, W, "mirror") - b) // 2,
                    )
            self.cache[site] = p
        return self.cache[site]

    def at(self, site: Site, di: int = 0, dj: int = 0) -> Tensor | None:
        a, b = site
        p = self.plane(((a + di) % 2, (b + dj) % 2))
        if p is None:
            return None
        u0, v0 = self.rows + (a + di) // 2, self.cols + (b + dj) // 2
        return p[..., u0 : u0 + _plane_len(self.H, a), v0 : v0 + _plane_len(self.W, b)]


Taps = tuple[tuple[int, int, float], ...]


def _stencil(f: _Field, site: Site, taps: Taps) -> Tensor:
    """``sum_k w_k * x[i + di_k, j + dj_k]`` at every pixel of one Bayer site, summed in the order
    of ``taps`` with each product rounded before it is added (scipy.ndimage's arithmetic; no fused
    multiply-add unless ``w_k`` is a power of two, where it is exact anyway). A correlation: every
    kernel used here is either symmetric under a 180-degree turn or written out as offsets."""
    acc = None
    for di, dj, w in taps:
        v = f.at(site, di, dj)
        if v is None:
            continue
        if acc is None:
            acc = v * w
        elif w == 1.0:
            acc.add_(v)
        elif math.frexp(w)[0] in (0.5, -0.5):
            acc.add_(v, alpha=w)
        else:
            acc.add_(v * w)
    if acc is None:  # every tap fell on a zero site
        a, b = site
        ref = next(p for p in (f.plane(t) for t in SITES) if p is not None)
        acc = ref.new_zeros(*ref.shape[:-2], _plane_len(f.H, a), _plane_len(f.W, b))
    return acc


def _transpose(taps: Taps) -> Taps:
    return tuple((dj, di, w) for di, dj, w in taps)


def _split(x: Tensor) -> dict[Site, Tensor]:
    """Contiguous per-site planes of ``x`` (..., H, W)."""
    return {site: x[..., site[0] :: 2, site[1] :: 2].contiguous() for site in SITES}


def _merge(channels: list[dict[Site, Tensor]], like: Tensor) -> Tensor:
    """(B, C, H, W) image from C dicts of per-site planes (each (B, 1, h, w))."""
    out = like.new_empty(like.shape[0], len(channels), *like.shape[-2:])
    for c, planes in enumerate(channels):
        for (a, b), p in planes.items():
            out[:, c : c + 1, a::2, b::2] = p
    return out


@lru_cache(maxsize=None)
def _sites(pattern: str) -> dict[str, Site]:
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

_CROSS: Taps = ((0, 0, 1.0), (-1, 0, 0.25), (1, 0, 0.25), (0, -1, 0.25), (0, 1, 0.25))
_BOX: Taps = tuple(
    (di, dj, (1.0 if di == 0 else 0.5) * (1.0 if dj == 0 else 0.5)) for di in (-1, 0, 1) for dj in (-1, 0, 1)
)


def _bilinear(raw: Tensor, pattern: str) -> Tensor:
    from ..physics.sampling import bayer_masks

    masks = bayer_masks(*raw.shape[-2:], pattern, device=raw.device, dtype=raw.dtype)
    channels = []
    for c, taps in ((0, _BOX), (1, _CROSS), (2, _BOX)):
        f = _Field.of_image(raw * masks[c], "reflect")
        channels.append({site: _stencil(f, site, taps) for site in SITES})
    return _merge(channels, raw)


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


def _taps(kernel: list[list[float]], scale: float) -> Taps:
    r = len(kernel) // 2
    return tuple((i - r, j - r, v / scale) for i, row in enumerate(kernel) for j, v in enumerate(row) if v != 0)


# Malvar et al. 2004, Fig. 2 (the kernels of colour-demosaicing's implementation).
_M_G_AT_RB = _taps([[0, 0, -1, 0, 0], [0, 0, 2, 0, 0], [-1, 2, 4, 2, -1], [0, 0, 2, 0, 0], [0, 0, -1, 0, 0]], 8)
_M_RB_AT_G_ROW = _taps(  # the wanted colour is left/right of the green pixel
    [[0, 0, 0.5, 0, 0], [0, -1, 0, -1, 0], [-1, 4, 5, 4, -1], [0, -1, 0, -1, 0], [0, 0, 0.5, 0, 0]], 8
)
_M_RB_AT_G_COL = _transpose(_M_RB_AT_G_ROW)  # the wanted colour is above/below
_M_RB_AT_BR = _taps([[0, 0, -1.5, 0, 0], [0, 2, 0, 2, 0], [-1.5, 0, 6, 0, -1.5], [0, 2, 0, 2, 0], [0, 0, -1.5, 0, 0]], 8)


def _malvar(raw: Tensor, pattern: str) -> Tensor:
    s = _sites(pattern)
    f = _Field.of_image(raw, "reflect")
    x = _split(raw)
    R = {s["R"]: x[s["R"]], s["Gr"]: _stencil(f, s["Gr"], _M_RB_AT_G_ROW),
         s["Gb"]: _stencil(f, s["Gb"], _M_RB_AT_G_COL), s["B"]: _stencil(f, s["B"], _M_RB_AT_BR)}
    G = {s["Gr"]: x[s["Gr"]], s["Gb"]: x[s["Gb"]],
         s["R"]: _stencil(f, s["R"], _M_G_AT_RB), s["B"]: _stencil(f, s["B"], _M_G_AT_RB)}
    B = {s["B"]: x[s["B"]], s["Gb"]: _stencil(f, s["Gb"], _M_RB_AT_G_ROW),
         s["Gr"]: _stencil(f, s["Gr"], _M_RB_AT_G_COL), s["R"]: _stencil(f, s["R"], _M_RB_AT_BR)}
    return _merge([R, G, B], raw)


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
# kernel ``k`` of colour-demosaicing as the offsets of its convolution (it is not symmetric), in
# the order scipy.ndimage.convolve adds them (raster order of the offsets).
_K_H: Taps = ((-2, -2, 1.0), (-2, 0, 1.0), (-1, -1, 1.0), (0, -2, 3.0), (0, 0, 3.0), (1, -1, 1.0), (2, -2, 1.0), (2, 0, 1.0))
_K_V: Taps = tuple(sorted((dj, di, w) for di, dj, w in _K_H))
_PAIR: Taps = ((0, -1, 0.5), (0, 1, 0.5))  # k_b = [0.5, 0, 0.5]
_FIR: Taps = ((0, -1, 1 / 3), (0, 0, 1 / 3), (0, 1, 1 / 3))  # ones(3) / 3
_DIRS = {"h": (0, 1), "v": (1, 0)}  # extension (rows, cols) a 1-D filter of radius 1 needs


def _directional(taps: Taps, direction: str) -> Taps:
    return taps if direction == "h" else _transpose(taps)


def _menon(raw: Tensor, pattern: str, refining: bool) -> Tensor:
    H, W = raw.shape[-2:]
    s = _sites(pattern)
    rb = (s["R"], s["B"])
    x = _split(raw)

    # (1) horizontal and vertical green estimates at the red and blue sites (eq. (3)) and
    # (2) the directional classifier (eqs. (4)-(8)), both in float64 with scipy's order of
    # operations: the decision then equals the reference's, ties included (for float32 input
    # every step is exact in float64).
    exact = torch.float32 if raw.device.type == "mps" else torch.float64  # MPS has no float64
    x64 = {t: p.to(exact) for t, p in x.items()}
    g = {d: _menon_green(x64, H, W, rb, d) for d in _DIRS}
    horizontal = _menon_classifier(x64, g, H, W, rb)
    # 0/1 masks of the chosen direction: ``h * m + v * (1 - m)`` selects exactly (finite values)
    # and is several times faster than torch.where on CPU
    choice = {t: (m.to(raw.dtype), (~m).to(raw.dtype)) for t, m in horizontal.items()}
    # (3) green plane: the estimate along the chosen direction
    G = dict(x)
    for t in rb:
        G[t] = _select(choice[t], g["h"][t].to(raw.dtype), g["v"][t].to(raw.dtype))
    del g, x64, horizontal
    # (4) red and blue at green sites (eq. (9)), then at blue / red sites (eqs. (10)-(11))
    R = {s["R"]: x[s["R"]]}
    B = {s["B"]: x[s["B"]]}
    R[s["Gr"]] = _add_filtered(G[s["Gr"]], _diff_field(R, G, H, W, "h"), s["Gr"], _PAIR, "h")
    R[s["Gb"]] = _add_filtered(G[s["Gb"]], _diff_field(R, G, H, W, "v"), s["Gb"], _PAIR, "v")
    B[s["Gb"]] = _add_filtered(G[s["Gb"]], _diff_field(B, G, H, W, "h"), s["Gb"], _PAIR, "h")
    B[s["Gr"]] = _add_filtered(G[s["Gr"]], _diff_field(B, G, H, W, "v"), s["Gr"], _PAIR, "v")
    r_b = _diff_field(R, B, H, W)  # R - B, read at green sites only
    R[s["B"]] = _add_chosen(B[s["B"]], r_b, s["B"], choice[s["B"]], _PAIR, 1.0)
    B[s["R"]] = _add_chosen(R[s["R"]], r_b, s["R"], choice[s["R"]], _PAIR, -1.0)
    del r_b
    if refining:
        _menon_refine(R, G, B, s, choice, H, W)
    return _merge([R, G, B], raw)


def _menon_green(x: dict[Site, Tensor], H: int, W: int, rb: tuple[Site, Site], direction: str) -> dict[Site, Tensor]:
    """Green at the red and blue sites by ``h0 = [0, 1/2, 0, 1/2, 0]`` plus ``h1 = [-1/4, 0, 1/2, 0,
    -1/4]`` along ``direction`` (Menon et al. 2007, eq. (3)), whole-sample mirror boundary,
    rounded as ``convolve1d(x, h0) + convolve1d(x, h1)``."""
    r, c = _DIRS[direction]
    f = _Field(x, H, W, "mirror", r, c)
    out = {}
    for t in rb:
        h0 = (f.at(t, -r, -c) + f.at(t, r, c)).mul_(0.5)
        h1 = (f.at(t, -2 * r, -2 * c) + f.at(t, 2 * r, 2 * c)).mul_(-0.25).add_(x[t] * 0.5)
        out[t] = h0.add_(h1)
    return out


def _menon_classifier(
    x: dict[Site, Tensor], g: dict[str, dict[Site, Tensor]], H: int, W: int, rb: tuple[Site, Site]
) -> dict[Site, Tensor]:
    """``d_V >= d_H`` at the red and blue sites (True: horizontal estimate; ties go horizontal,
    as in the reference). Chroma and gradients are zero at the green sites."""
    d = {}
    for direction, (r, c) in _DIRS.items():
        chroma = _Field({t: x[t] - g[direction][t] for t in rb}, H, W, "mirror", r, c)
        grad = {t: (chroma.at(t) - chroma.at(t, 2 * r, 2 * c)).abs_() for t in rb}  # |C(i,j) - C(i,j+2)|
        del chroma
        summed = _Field(grad, H, W, "constant", 1, 1)
        d[direction] = {t: _stencil(summed, t, _K_H if direction == "h" else _K_V) for t in rb}
    return {t: d["v"][t] >= d["h"][t] for t in rb}


def _diff_field(X: dict[Site, Tensor], Y: dict[Site, Tensor], H: int, W: int, direction: str | None = None) -> _Field:
    """Lazy field ``X - Y`` (at the sites both know), mirror-extended for a radius-1 filter along
    ``direction`` (both when None). Read it right away: it sees later changes to X and Y."""
    r, c = _DIRS[direction] if direction else (1, 1)

    def plane(t: Site) -> Tensor | None:
        return X[t] - Y[t] if t in X and t in Y else None

    return _Field(plane, H, W, "mirror", r, c)


def _add_filtered(base: Tensor, f: _Field, site: Site, taps: Taps, direction: str, sign: float = 1.0) -> Tensor:
    """``base + sign * conv(f, taps along direction)`` at ``site``."""
    return torch.add(base, _stencil(f, site, _directional(taps, direction)), alpha=sign)


Choice = tuple[Tensor, Tensor]  # (1 where horizontal else 0, its complement)


def _select(choice: Choice, h: Tensor, v: Tensor) -> Tensor:
    """``h`` where the classifier chose horizontal, else ``v`` (exact for finite values)."""
    return torch.addcmul(h.mul_(choice[0]), v, choice[1])


def _add_chosen(base: Tensor, f: _Field, site: Site, choice: Choice, taps: Taps, sign: float) -> Tensor:
    """``base + sign * (horizontal ? conv_h(f) : conv_v(f))`` at ``site``."""
    h = _stencil(f, site, taps)
    v = _stencil(f, site, _transpose(taps))
    return torch.add(base, _select(choice, h, v), alpha=sign)


def _menon_refine(
    R: dict[Site, Tensor], G: dict[Site, Tensor], B: dict[Site, Tensor], s: dict[str, Site],
    choice: dict[Site, Choice], H: int, W: int,
) -> None:
    """Refining step of Menon et al. 2007, Sec. III-C (updates the planes in place), as
    colour-demosaicing's ``refining_step_Menon2007``."""
    # green at red / blue sites from the colour difference low-passed along the chosen direction
    g_r = _add_chosen(R[s["R"]], _diff_field(R, G, H, W), s["R"], choice[s["R"]], _FIR, -1.0)
    g_b = _add_chosen(B[s["B"]], _diff_field(B, G, H, W), s["B"], choice[s["B"]], _FIR, -1.0)
    G[s["R"]], G[s["B"]] = g_r, g_b
    # red and blue at green sites from the updated colour differences (read at red / blue sites)
    R[s["Gb"]] = _add_filtered(G[s["Gb"]], _diff_field(R, G, H, W, "v"), s["Gb"], _PAIR, "v")
    R[s["Gr"]] = _add_filtered(G[s["Gr"]], _diff_field(R, G, H, W, "h"), s["Gr"], _PAIR, "h")
    B[s["Gr"]] = _add_filtered(G[s["Gr"]], _diff_field(B, G, H, W, "v"), s["Gr"], _PAIR, "v")
    B[s["Gb"]] = _add_filtered(G[s["Gb"]], _diff_field(B, G, H, W, "h"), s["Gb"], _PAIR, "h")
    # red at blue sites and blue at red sites, from one R - B field
    r_b = _diff_field(R, B, H, W)
    r_at_b = _add_chosen(B[s["B"]], r_b, s["B"], choice[s["B"]], _FIR, 1.0)
    b_at_r = _add_chosen(R[s["R"]], r_b, s["R"], choice[s["R"]], _FIR, -1.0)
    R[s["B"]], B[s["R"]] = r_at_b, b_at_r


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
