"""Photometric augmentation of training patches: exposure and colour-balance jitter.

The symmetries of the square (flips, 90-degree rotations) are applied when the patches are cut
(:func:`gsprestore.training.patches.dihedral`, before the mosaic is made, so the Bayer phase stays
right). This module adds what a camera changes from shot to shot: the exposure (one gain per patch)
and the white balance (one gain per channel), applied to the ground truth before the observation
``y = H x`` is made from it, so the observation and its target always agree. Values pushed above
1 clip, as highlights do in a camera.
"""

from __future__ import annotations

import numpy as np


def jitter(gt, spread: float, seed: tuple[int, ...]):
    """``gt`` ``(N, 3, H, W)`` float in [0, 1] times ``exp(u)`` per patch (``u ~ U(-spread, spread)``)
    and ``exp(v_c)`` per patch and channel (``v_c ~ U(-spread / 2, spread / 2)``), clipped to
    [0, 1]. A pure function of ``seed`` (the run's seed and the step: a resumed run draws the same
    gains). ``spread = 0`` returns ``gt`` unchanged."""
    import torch

    if spread <= 0:
        return gt
    rng = np.random.default_rng(list(seed))
    n = gt.shape[0]
    u = rng.uniform(-spread, spread, size=(n, 1, 1, 1))
    v = rng.uniform(-spread / 2, spread / 2, size=(n, gt.shape[1], 1, 1))
    gain = torch.from_numpy(np.exp(u + v)).to(gt.dtype)
    return (gt * gain.to(gt.device)).clamp_(0.0, 1.0)
