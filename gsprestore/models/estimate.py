"""The initial estimate x^0 every graph model starts from (paper, appendix "Experimental Details":
"the target signal x was estimated using linear interpolation of known values in 5 x 5 pixel
neighborhood").

We read "linear interpolation in a 5x5 neighbourhood" as *normalised convolution* with the
separable tent kernel ``t = [1, 2, 3, 2, 1] / 3`` (a linear B-spline of half-width 3 sampled on
the 5 taps), per channel:

    x^0_i = sum_j t_ij m_j y_j / sum_j t_ij m_j        (unknown i),    x^0_i = y_i  (known i)

where ``m`` is the observation mask and ``t_ij = t[dy] t[dx]``. On the Bayer red/blue lattice and on
the 2x grid this is exactly bilinear interpolation (the two or four nearest known samples at
distance 1 get weight 2/3 or 4/9, all others at least three times less); on the green quincunx it
averages the four direct neighbours plus the eight knight-move ones at 1/3 the weight. Border
pixels only average the in-image samples (zero padding of both numerator and denominator), so
no reflection is invented. A pixel with no known sample in its 5x5 window gets 0 (never happens
for Bayer or 2x sampling).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

#: 1-D taps of the separable tent kernel (index 0 = offset -2).
TENT_TAPS: tuple[float, ...] = (1 / 3, 2 / 3, 1.0, 2 / 3, 1 / 3)


def _separable_tent(x: Tensor) -> Tensor:
    """Correlate every ``(N, 1, H, W)`` plane with the 5x5 tent kernel, zero padding."""
    t = torch.tensor(TENT_TAPS, dtype=x.dtype, device=x.device)
    x = F.conv2d(x, t.view(1, 1, 1, 5), padding=(0, 2))
    return F.conv2d(x, t.view(1, 1, 5, 1), padding=(2, 0))


def initial_estimate(known: Tensor, mask: Tensor) -> Tensor:
    """Normalised-convolution (tent) interpolation of the known samples, per channel.

    ``known`` is ``H^T y`` and ``mask`` is ``H^T 1`` (1 where observed), both ``(..., C, H, W)``
    (``mask`` may broadcast). Known samples are returned bit-exactly. Linear in ``known``.
    """
    mask = mask.expand_as(known)
    lead, (H, W) = known.shape[:-2], known.shape[-2:]
    m = mask.reshape(-1, 1, H, W).to(known.dtype)
    num = _separable_tent((known * m.view_as(known)).reshape(-1, 1, H, W))
    den = _separable_tent(m)
    est = torch.where(den > 0, num / den.clamp_min(1e-12), torch.zeros_like(num))
    return torch.where(mask > 0, known, est.reshape(*lead, H, W))
