"""Run an RGGB-trained demosaicking model on any Bayer pattern.

A pattern differs from RGGB by a one-pixel phase along rows and/or columns (the position of R in
the 2x2 block). Along an axis that needs a phase change:

* even length: flip the axis (index i -> n-1-i swaps the parity, no pixel invented) and flip the
  result back, an exact relabelling of the same data;
* odd length: a flip keeps the parity, so pad one mirrored line in front (``reflect``: line -1
  copies line 1, which has the colour line -1 would have) and crop it from the result.

Either way the transformed mosaic is exactly the RGGB mosaic of the transformed scene, so the
known samples land in the right colour planes and ``H x = y`` holds in the caller's pattern.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor

from ..physics.sampling import check_pattern


def red_phase(pattern: str) -> tuple[int, int]:
    """(row, column) of the red sample in the pattern's top-left 2x2 block."""
    k = check_pattern(pattern).index("R")
    return divmod(k, 2)


def _axis_ops(n: int, dim: int, shift: int) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]:
    if not shift:
        return (lambda t: t), (lambda t: t)
    if n % 2 == 0:
        return (lambda t: t.flip(dim)), (lambda t: t.flip(dim))
    # odd length: one mirrored line in front; dim is -2 (rows) or -1 (columns)
    pad = (0, 0, 1, 0) if dim == -2 else (1, 0, 0, 0)
    mode = "reflect" if n >= 2 else "replicate"

    def fwd(t: Tensor) -> Tensor:
        return F.pad(t, pad, mode=mode)

    def back(t: Tensor) -> Tensor:
        return t[..., 1:, :] if dim == -2 else t[..., :, 1:]

    return fwd, back


def to_rggb(image: Tensor, pattern: str) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
    """``image`` (``(B, C, H, W)``, a mosaic in ``pattern`` or anything aligned with it) ->
    ``(image in the RGGB frame, undo)``; ``undo`` maps an RGGB-frame result back."""
    dy, dx = red_phase(pattern)
    H, W = image.shape[-2:]
    fy, by = _axis_ops(H, -2, dy)
    fx, bx = _axis_ops(W, -1, dx)
    return fx(fy(image)), (lambda t: by(bx(t)))
