"""The initial estimate x^0 every graph model starts from (paper, appendix "Experimental Details":
"the target signal x was estimated using linear interpolation of known values in 5 x 5 pixel
neighborhood").

We read "linear interpolation in the 5x5 neighbourhood" as *normalised convolution* with a
separable tent (linear B-spline) kernel, per channel:

    x^0_i = sum_j t_ij m_j y_j / sum_j t_ij m_j        (unknown i),    x^0_i = y_i  (known i)

where ``m`` is the observation mask and ``t_ij = t[dy] t[dx]``. The tent has half-width 2
(taps ``[1/2, 1, 1/2]``), so on the Bayer lattices and on the 2x grid this is exactly bilinear
interpolation (the classical bilinear demosaicker in the interior; the mean of the 2 or 4 nearest
samples for 2x). A pixel with no known sample in its 3x3 window (sparser masks) falls back to the
half-width-3 tent ``[1/3, 2/3, 1, 2/3, 1/3]`` over the full 5x5 window. Border pixels only average
the in-image samples (zero padding of both numerator and denominator), so nothing is invented
there. A pixel with no known sample in its 5x5 window gets 0 (never for Bayer or 2x sampling).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .constants import constant

#: 1-D taps (offsets -1..1) of the bilinear tent, and (offsets -2..2) of the 5x5 fallback tent.
TENT_3: tuple[float, ...] = (0.5, 1.0, 0.5)
TENT_5: tuple[float, ...] = (1 / 3, 2 / 3, 1.0, 2 / 3, 1 / 3)


def _separable(x: Tensor, taps: tuple[float, ...]) -> Tensor:
    """Correlate every ``(N, 1, H, W)`` plane with the separable kernel ``taps x taps``, zero padding."""
    n = len(taps)
    t = constant(taps, x.dtype, x.device)
    x = F.conv2d(x, t.view(1, 1, 1, n), padding=(0, n // 2))
    return F.conv2d(x, t.view(1, 1, n, 1), padding=(n // 2, 0))


def _normalised(y: Tensor, m: Tensor, taps: tuple[float, ...]) -> tuple[Tensor, Tensor]:
    num, den = _separable(y, taps), _separable(m, taps)
    return num / den.clamp_min(1e-12), den


def initial_estimate(known: Tensor, mask: Tensor) -> Tensor:
    """Linear (tent) normalised-convolution interpolation of the known samples, per channel.

    ``known`` is ``H^T y`` and ``mask`` is ``H^T 1`` (1 where observed), both ``(..., C, H, W)``
    (``mask`` may broadcast). Known samples are returned bit-exactly. Linear in ``known``.
    """
    mask = mask.expand_as(known)
    lead, (H, W) = known.shape[:-2], known.shape[-2:]
    m = mask.reshape(-1, 1, H, W).to(known.dtype)
    y = known.reshape(-1, 1, H, W) * m
    est, den = _normalised(y, m, TENT_3)
    sparse = den <= 0
    if known.is_cuda or bool(sparse.any()):  # no host sync on a GPU (graph capture): blend unconditionally
        est5, den5 = _normalised(y, m, TENT_5)
        est = torch.where(sparse, torch.where(den5 > 0, est5, torch.zeros_like(est5)), est)
    return torch.where(mask > 0, known, est.reshape(*lead, H, W))
