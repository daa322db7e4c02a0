"""Classical 2x interpolation: bicubic (Keys 1981), aligned to the decimation grid or with OpenCV's
half-pixel convention. Pure torch functions on a batch (CPU or GPU), keeping the input's floating
dtype, never clipping.

2x interpolation follows docs/protocol.md: the low-resolution input is ``HR[0::2, 0::2]``.
:func:`upscale_bicubic` is aligned to that grid (known pixels stay exactly where they are);
:func:`upscale_bicubic_halfpixel` reproduces OpenCV's ``cv2.resize(..., INTER_CUBIC)``, the
paper's baseline, whose half-pixel convention is a quarter pixel off the decimation grid.
Agreement with OpenCV is tested in ``tests/test_baselines.py`` (see docs/baselines.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.errors import UsageError

__all__ = ["upscale_bicubic", "upscale_bicubic_halfpixel", "keys_weight", "HALO"]

#: Exact context a tile needs, in output pixels (``tests/test_baselines.py`` checks it is tight).
HALO: dict[str, int] = {"bicubic": 4, "bicubic-halfpixel": 4}


def _replicate(x: Tensor, dim: int, lo: int, hi: int) -> Tensor:
    """Extend ``x`` by ``lo`` / ``hi`` copies of its edge along ``dim`` (indices clamped)."""
    n = x.shape[dim]
    index = torch.arange(-lo, n + hi, device=x.device).clamp_(0, n - 1)
    return x.index_select(dim, index)


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
    xp = _replicate(x, dim, lo, hi)
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
    The default ``a = -0.75`` (OpenCV's) reproduces docs/protocol.md's "aligned bicubic" rows;
    ``a = -0.5`` makes the half-way weights the cubic Lagrange ones ``[-1, 9, 9, -1] / 16``
    (exact for cubic polynomials away from the border). Exact tiling halo: 4 output pixels.
    """
    _check_lr(lr, "bicubic interpolation")
    w = (a / 8, (4 - a) / 8, (4 - a) / 8, a / 8)
    phases = ((0, (1.0,)), (-1, w))
    return _upsample_dim(_upsample_dim(lr, -2, phases), -1, phases)


def upscale_bicubic_halfpixel(lr: Tensor) -> Tensor:
    """2x bicubic interpolation with OpenCV's ``cv2.resize(lr, (2w, 2h), interpolation=
    cv2.INTER_CUBIC)`` convention, the paper's bicubic baseline (docs/protocol.md): output pixel ``d``
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
