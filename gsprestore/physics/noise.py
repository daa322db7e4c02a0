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


def estimate(mosaic: np.ndarray, *, bins: int = 16, low: float = 0.02, high: float = 0.85,
             min_count: int = 200) -> NoiseFit:
    """Fit ``var = a x + b`` to a linear Bayer mosaic (``(H, W)``, [0, 1], before white balance):
    see the module docstring. The four Bayer phases are pooled (one sensor, one model; a
    per-phase gain difference is what white balance undoes later). Bins of local mean outside
    ``[low, high]`` (black clipping, highlight clipping) or with fewer than ``min_count`` samples
    are not used; ``a`` and ``b`` are clipped at 0."""
    y = np.asarray(mosaic, dtype=np.float64)
    h, w = (y.shape[0] // 4) * 4, (y.shape[1] // 4) * 4
    means, details = [], []
    for i in range(2):
        for j in range(2):
            p = y[i:h:2, j:w:2]  # one Bayer phase, (h/2, w/2): even sides
            p00, p01, p10, p11 = p[0::2, 0::2], p[0::2, 1::2], p[1::2, 0::2], p[1::2, 1::2]
            details.append(((p00 - p01 - p10 + p11) / 2).ravel())
            means.append(((p00 + p01 + p10 + p11) / 4).ravel())
    m, d = np.concatenate(means), np.concatenate(details)
    keep = (m >= low) & (m <= high)
    m, d = m[keep], d[keep]
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
            points.append((float(m[sel].mean()), sd * sd, n))
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
