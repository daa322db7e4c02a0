"""Sensor noise in the raw domain: the Poisson-Gaussian model, its named levels, and its estimate
from a single mosaic.

**Model.** A linear raw value ``x`` in [0, 1] (black level 0, white level 1, before white balance)
is observed as ``y = x + n`` with ``n ~ N(0, a x + b)``: ``a`` the shot (photon) noise gain,
``b`` the read-noise variance. This is the heteroscedastic Gaussian approximation of Foi et al.,
"Practical Poissonian-Gaussian noise modeling and fitting for single-image raw-data" (IEEE TIP
17(10), 2008), eq. 1-3, which holds well away from the clipping points.

**Levels** (:data:`LEVELS`), like ISO 800 / 3200 / 12800 of a typical 14-bit consumer sensor: the
shot gain ``a`` quadruples with every two stops of ISO gain; ``a`` spans the range Brooks et al.
sample for real cameras ("Unprocessing images for learned raw denoising", CVPR 2019, Sec. 3.3:
``a`` in [1e-4, 1.2e-2], the upper end their brightest-ISO captures), and ``b`` follows their
fitted relation between the two, ``ln b = 2.18 ln a + 1.20``.

**Estimate** (:func:`estimate`): per Bayer phase, the 2x2 Haar diagonal detail of the phase plane
(``(p00 - p01 - p10 + p11) / 2``: for white noise its variance is the noise variance, while a
smooth signal cancels), binned by the local mean; a robust variance per bin (the median absolute
deviation: edges and texture are sparse outliers, Foi et al. Sec. IV), and a weighted least-squares
line ``var = a x + b`` through the bins away from black and clipping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _read_variance(a: float) -> float:
    return math.exp(2.18 * math.log(a) + 1.20)


#: Named noise levels: ``(a, b)`` of the model, in units of the [0, 1] raw range.
LEVELS: dict[str, tuple[float, float]] = {
    "low": (7.5e-4, _read_variance(7.5e-4)),  # like ISO 800
    "medium": (3.0e-3, _read_variance(3.0e-3)),  # like ISO 3200
    "high": (1.2e-2, _read_variance(1.2e-2)),  # like ISO 12800
}
#: The median absolute deviation of a normal distribution is this many standard deviations.
_MAD_TO_STD = 1.482602218505602


@dataclass(frozen=True)
class NoiseFit:
    """``var(x) = a x + b`` fitted on a mosaic; ``bins``: the (mean, variance, count) points it used."""

    a: float
    b: float
    bins: tuple[tuple[float, float, int], ...] = ()

    def std(self, x: float) -> float:
        """The noise standard deviation at raw level ``x``."""
        return math.sqrt(max(self.a * x + self.b, 0.0))


def add_noise(mosaic: np.ndarray, a: float, b: float, seed: int = 0) -> np.ndarray:
    """``mosaic`` (linear, [0, 1]) with Poisson-Gaussian noise of variance ``a x + b`` (a fixed
    ``seed``: the same noise every time), not clipped (a sensor's values below black exist)."""
    rng = np.random.default_rng(seed)
    x = np.asarray(mosaic, dtype=np.float64)
    sd = np.sqrt(np.clip(a * x + b, 0.0, None))
    return (x + sd * rng.standard_normal(x.shape)).astype(np.float32)


#: The most 2x2 blocks :func:`estimate` bins (a 24-MP frame has 6M): beyond, a strided sample.
SAMPLE_BLOCKS = 1 << 19


def estimate(mosaic: np.ndarray, *, bins: int = 16, low: float = 0.02, high: float = 0.85,
             min_count: int = 200) -> NoiseFit:
    """Fit ``var = a x + b`` to a linear Bayer mosaic (``(H, W)``, [0, 1], before white balance):
    see the module docstring. The four Bayer phases are pooled (one sensor, one model; a
    per-phase gain difference is what white balance undoes later). Bins of local mean outside
    ``[low, high]`` (black clipping, highlight clipping) or with fewer than ``min_count`` samples
    are not used; ``a`` and ``b`` are clipped at 0."""
    # float32: the sums of four samples in [0, 1] lose nothing a variance of 1e-7 and up can see
    y = np.asarray(mosaic, dtype=np.float32)
    h, w = (y.shape[0] // 4) * 4, (y.shape[1] // 4) * 4
    means, details = [], []
    for i in range(2):
        for j in range(2):
            p = y[i:h:2, j:w:2]  # one Bayer phase, (h/2, w/2): even sides
            p00, p01, p10, p11 = p[0::2, 0::2], p[0::2, 1::2], p[1::2, 0::2], p[1::2, 1::2]
            s0, s1 = p00 + p11, p01 + p10
            details.append(((s0 - s1) * 0.5).ravel())
            means.append(((s0 + s1) * 0.25).ravel())
    m, d = np.concatenate(means), np.concatenate(details)
    keep = (m >= low) & (m <= high)
    # a large frame: every k-th block (a deterministic sample of at most SAMPLE_BLOCKS; ~32k a bin
    # still fixes each bin's variance to about 1.5 %)
    stride = max(1, int(keep.sum()) // SAMPLE_BLOCKS)
    m, d = m[keep][::stride], d[keep][::stride]
    points: list[tuple[float, float, int]] = []
    if m.size:
        edges = np.quantile(m, np.linspace(0, 1, bins + 1))  # equal-count bins over what the photo holds
        idx = np.clip(np.searchsorted(edges, m, side="right") - 1, 0, bins - 1)
        for k in range(bins):
            sel = idx == k
            n = int(sel.sum())
            if n < min_count:
                continue
            dk = d[sel]
            sd = _MAD_TO_STD * float(np.median(np.abs(dk - np.median(dk))))
            points.append((float(m[sel].mean(dtype=np.float64)), sd * sd, n))
    if not points:
        return NoiseFit(0.0, 0.0, ())
    x = np.array([p[0] for p in points])
    v = np.array([p[1] for p in points])
    # weights: a bin's variance estimate has a relative error ~ 1/sqrt(count); weigh by count / var^2
    wts = np.array([p[2] for p in points]) / np.maximum(v, 1e-12) ** 2
    if len(points) == 1:
        return NoiseFit(0.0, float(v[0]), tuple(points))
    A = np.stack([x, np.ones_like(x)], axis=1) * np.sqrt(wts)[:, None]
    a, b = np.linalg.lstsq(A, v * np.sqrt(wts), rcond=None)[0]
    if b < 0:  # all of the variance is signal-dependent: refit through the origin
        a, b = float((wts * x * v).sum() / (wts * x * x).sum()), 0.0
    if a < 0:  # no signal dependence: the mean variance
        a, b = 0.0, float((wts * v).sum() / wts.sum())
    return NoiseFit(float(a), float(b), tuple(points))


# ----------------------------------------------------------------------------------------------
# Noisy training and test pairs (torch): the photo's sRGB curve inverted to a linear mosaic, the
# noise of the model added there, the mosaic encoded again for the network
# ----------------------------------------------------------------------------------------------

#: White-balance gains drawn for the synthetic pairs (R, B; G is 1): noise added to the mosaic
#: *before* white balance reaches the network multiplied by the gains, so a channel's noise
#: parameters become ``(g a, g^2 b)``; the ranges span daylight to tungsten of typical sensors.
WB_RANGE: dict[str, tuple[float, float]] = {"R": (1.3, 2.6), "B": (1.2, 2.2)}


def encode_srgb(x):
    """The sRGB transfer curve (IEC 61966-2-1) on a tensor, odd-symmetric below 0 (a noisy linear
    value under black keeps its sign and its size), not clipped above 1."""
    import torch

    v = x.abs()
    y = torch.where(v <= 0.0031308, 12.92 * v, 1.055 * v.clamp_min(0.0031308) ** (1.0 / 2.4) - 0.055)
    return torch.copysign(y, x)


def decode_srgb(y):
    """The inverse of :func:`encode_srgb`."""
    import torch

    v = y.abs()
    x = torch.where(v <= 0.04045, v / 12.92, ((v.clamp_min(0.04045) + 0.055) / 1.055) ** 2.4)
    return torch.copysign(x, y)


def srgb_slope(x):
    """d encode_srgb / dx at linear ``x >= 0``: how much a small linear noise grows in the
    encoded values (12.92 in the linear toe, 1.055 / 2.4 x^(1/2.4 - 1) above)."""
    import torch

    v = x.clamp_min(0.0)
    return torch.where(v <= 0.0031308, torch.full_like(v, 12.92),
                       (1.055 / 2.4) * v.clamp_min(0.0031308) ** (1.0 / 2.4 - 1.0))


def draw_levels(n: int, seed: tuple[int, ...] | int, *, top: str = "high", clean_share: float = 0.25):
    """``(n, 3, 2)`` float32 tensor: per pair and colour channel (R, G, B) the ``(a, b)`` of the
    noise the *network* sees (after white balance). ``clean_share`` of the pairs are clean
    (0, 0); the others draw ``a`` log-uniformly from a quarter of ``low``'s up to ``top``'s,
    ``b`` from the fitted relation of :data:`LEVELS` times a log-normal spread (sigma 0.5, as
    sensors scatter around it), and white-balance gains from :data:`WB_RANGE`. A pure function
    of ``seed``."""
    import torch

    rng = np.random.default_rng(seed if isinstance(seed, int) else list(seed))
    lo, hi = LEVELS["low"][0] / 4, LEVELS[top][0]
    a = np.exp(rng.uniform(math.log(lo), math.log(hi), size=n))
    b = np.array([_read_variance(v) for v in a]) * np.exp(rng.normal(0.0, 0.5, size=n))
    g = np.ones((n, 3))
    g[:, 0] = rng.uniform(*WB_RANGE["R"], size=n)
    g[:, 2] = rng.uniform(*WB_RANGE["B"], size=n)
    clean = rng.uniform(size=n) < clean_share
    out = np.stack([g * a[:, None], g * g * b[:, None]], axis=-1)
    out[clean] = 0.0
    return torch.from_numpy(out.astype(np.float32))


def level_params(level: str, gains: tuple[float, float, float] = (1.0, 1.0, 1.0)):
    """``(1, 3, 2)`` tensor of a named level of :data:`LEVELS` after white-balance ``gains``."""
    import torch

    a, b = LEVELS[level]
    return torch.tensor([[[g * a, g * g * b] for g in gains]], dtype=torch.float32)


def noisy_mosaic(gt, noise, seed: tuple[int, ...] | int, pattern: str = "RGGB"):
    """The network's noisy observation of sRGB ground truths ``gt`` ``(N, 3, H, W)`` in [0, 1]:
    the sRGB curve inverted, the Bayer mosaic taken, Poisson-Gaussian noise of variance
    ``a_c x + b_c`` added (``noise`` ``(N, 3, 2)``, per colour channel), and the curve applied
    again (:func:`encode_srgb`): ``(N, 1, H, W)``. The noise is a pure function of ``seed``."""
    import torch

    from . import sampling

    lin = sampling.mosaic(decode_srgb(gt), pattern)
    masks = sampling.bayer_masks(gt.shape[-2], gt.shape[-1], pattern, device=gt.device, dtype=gt.dtype)
    a = (masks * noise[..., 0].to(gt).view(-1, 3, 1, 1)).sum(1, keepdim=True)
    b = (masks * noise[..., 1].to(gt).view(-1, 3, 1, 1)).sum(1, keepdim=True)
    g = torch.Generator().manual_seed(int(np.random.SeedSequence(seed if isinstance(seed, int) else list(seed))
                                          .generate_state(1)[0]))
    z = torch.randn(lin.shape, generator=g, dtype=torch.float32).to(gt)
    return encode_srgb(lin + (a * lin + b).clamp_min(0.0).sqrt() * z)


def packed_std_map(known, mask, noise):
    """The noise standard deviation at every site of an encoded mosaic, in the encoded values the
    network reads, packed 2x2 (``(B, 4, H/2, W/2)``, the Bayer phases in ``pixel_unshuffle``'s
    order): ``known`` / ``mask`` ``(B, 3, H, W)`` (H, W even) as the graph models take them, the
    mask a Bayer pattern's (2x2-periodic, as every demosaicking observation is), ``noise``
    ``(B, 3, 2)`` per-channel ``(a, b)`` of the linear values, or None (clean: zeros). The signal
    level is the local mean of the site's own Bayer phase (3x3 sites of that phase, decoded to
    linear), never the unknown clean value, so training and inference compute it alike; the
    linear deviation ``sqrt(a x + b)`` is carried through the curve's slope."""
    import torch
    import torch.nn.functional as F

    B, _, H, W = known.shape
    if noise is None:
        return known.new_zeros(B, 4, H // 2, W // 2)
    lin = decode_srgb(F.pixel_unshuffle(known.sum(dim=1, keepdim=True), 2))
    level = F.avg_pool2d(F.pad(lin, (1, 1, 1, 1), mode="replicate"), 3, stride=1).clamp(0.0, 1.0)
    # each phase's colour channel from the first 2x2 cell, its (a, b) a sum with zeros (exact)
    phase = mask.expand(B, *mask.shape[1:])[:, :, :2, :2].reshape(B, 3, 4).to(known)
    ab = torch.einsum("bcp,bck->bpk", phase, noise.to(known).reshape(-1, 3, 2).expand(B, 3, 2))
    a, b = ab[..., 0].view(B, 4, 1, 1), ab[..., 1].view(B, 4, 1, 1)
    return srgb_slope(level) * (a * level + b).clamp_min(0.0).sqrt()


def std_map(known, mask, noise):
    """:func:`packed_std_map` at every site: ``(B, 1, H, W)``."""
    import torch.nn.functional as F

    return F.pixel_shuffle(packed_std_map(known, mask, noise), 2)
