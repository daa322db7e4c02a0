"""Hard-patch mining: where in a photo restoration is hard, measured by a reference method's error.

Most patches of ordinary photos are smooth: any demosaicker restores them, and a network trained
on them learns little. Gharbi et al. (SIGGRAPH Asia 2016, "Deep joint demosaicking and denoising",
Sec. 4) built demosaicnet's data by keeping the patches a *reference* method gets wrong (moire and
zippering); Kokkinos & Lefkimmiatis (ECCV 2018, Table 1) showed the same network gaining several dB
on McM from such mined patches alone. Here the reference is the task's best classical method:

* ``demosaic``: Menon 2007 (:func:`gsprestore.classical.demosaic.demosaic_menon`) on the RGGB
  mosaic of the photo. Its error is large exactly at fine colour structure (colour moire) and at
  sharp edges across which it interpolates (zippering);
* ``upscale2x``: the grid-aligned bicubic (:func:`gsprestore.classical.upscale.upscale_bicubic`) of
  the photo decimated by two, scored in BT.601 luma as the protocol scores 2x.

:func:`error_map` is that squared error per pixel (8-bit units squared), :func:`window_means` its
mean over every ``size`` x ``size`` window whose top-left corner is on the even grid (aligned with
the 2x2 Bayer block: the positions :func:`gsprestore.training.patches.place_patches` draws from).
The training patches are then drawn partly by that difficulty (``TrainConfig.mine_share``), and
training packs keep crops by it (``gsprestore train-pack --score menon``).
"""

from __future__ import annotations

import numpy as np

#: Reference error a difficulty score can be measured with, per task.
SCORERS = ("none", "reference")
#: Pixels at each border of a photo whose error is not counted (the reference methods' own
#: boundary extension is not what a patch inside a photo sees).
BORDER = 4


def error_map(rgb: np.ndarray, task: str = "demosaic") -> np.ndarray:
    """Squared error per pixel ``(H, W)`` float32, in 8-bit units squared, of the task's reference
    method on ``rgb`` (``uint8 (H, W, 3)``; even ``H`` and ``W`` for an exact grid, else the last
    row / column is dropped): summed over R, G, B for demosaicking, luma for 2x. The ``BORDER``
    pixels at each edge read 0."""
    import torch

    from ..metrics import rgb_to_y
    from ..physics.tasks import check_task, observe

    check_task(task)
    h, w = (rgb.shape[0] // 2) * 2, (rgb.shape[1] // 2) * 2
    out = np.zeros(rgb.shape[:2], dtype=np.float32)
    if h < 2 * BORDER + 2 or w < 2 * BORDER + 2:
        return out
    gt = torch.from_numpy(np.ascontiguousarray(rgb[:h, :w].transpose(2, 0, 1))).float().div_(255.0)[None]
    y = observe(task, gt)
    with torch.no_grad():
        if task == "demosaic":
            from ..classical.demosaic import demosaic_menon

            est = demosaic_menon(y)
            err = ((est - gt) * 255.0).pow(2).sum(1)[0]
        else:
            from ..classical.upscale import upscale_bicubic

            est = upscale_bicubic(y)
            err = ((rgb_to_y(est) - rgb_to_y(gt)) * 255.0).pow(2)[0, 0]
    b = BORDER
    out[b:h - b, b:w - b] = err[b:h - b, b:w - b].numpy()
    return out


def window_means(err: np.ndarray, size: int) -> np.ndarray:
    """Mean of ``err`` over every ``size`` x ``size`` window with an even top-left corner: array
    ``(rows, cols)`` where entry ``(i, j)`` is the window at ``(2i, 2j)`` (the positions of
    :meth:`gsprestore.training.patches.Source.positions`). Summed-area table, float64."""
    h, w = err.shape
    rows, cols = (h - size) // 2 + 1, (w - size) // 2 + 1
    if rows <= 0 or cols <= 0:
        return np.zeros((max(rows, 0), max(cols, 0)))
    sat = np.zeros((h + 1, w + 1), dtype=np.float64)
    sat[1:, 1:] = err.astype(np.float64).cumsum(0).cumsum(1)
    r = np.arange(rows) * 2
    c = np.arange(cols) * 2
    total = (sat[np.ix_(r + size, c + size)] - sat[np.ix_(r, c + size)]
             - sat[np.ix_(r + size, c)] + sat[np.ix_(r, c)])
    # the differences of a summed-area table round a window of zeros to +-1e-13, not to 0
    return np.maximum(total / (size * size), 0.0)


def hard_share(scores: np.ndarray, drawn: np.ndarray, quantile: float = 0.9) -> float:
    """Share of ``drawn`` window scores at or above the ``quantile`` of all ``scores``: how much
    the hardest ``1 - quantile`` of positions are over-represented (``1 - quantile`` when drawn
    uniformly)."""
    if scores.size == 0 or drawn.size == 0:
        return 0.0
    cut = float(np.quantile(scores, quantile))
    return float((drawn >= cut).mean())
