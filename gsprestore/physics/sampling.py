"""The sampling matrix H of the paper (Sec. 3.1) for both tasks, and its adjoint H^T.

* Demosaicking: H keeps one colour per pixel following a Bayer colour filter array. The four
  patterns are named by their top-left 2x2 block read row by row (``RGGB`` = R G / G B).
* 2x interpolation: H keeps every 4th pixel, ``HR[..., 0::2, 0::2]`` (no anti-aliasing).

Tensors are ``(..., C, H, W)`` floats. ``mosaic`` returns a single-channel ``(..., 1, H, W)`` raw
image; ``mosaic_adjoint`` puts the raw values back into their colour plane (zeros elsewhere), so
``<mosaic(x), y> == <x, mosaic_adjoint(y)>``. Likewise for ``decimate`` / ``decimate_adjoint``.
Every operator here is linear and exact; the adjoint test lives in ``tests/test_sampling.py``.
:func:`mosaic_array` is :func:`mosaic` on a numpy ``(H, W, 3)`` image, for the commands that need
no torch (``gsprestore mosaic``): this module imports torch only inside the functions that use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch
    from torch import Tensor

PATTERNS: tuple[str, ...] = ("RGGB", "BGGR", "GRBG", "GBRG")
CHANNEL = {"R": 0, "G": 1, "B": 2}


def check_pattern(pattern: str) -> str:
    """Return the canonical (upper-case) pattern name or raise :class:`UsageError`."""
    p = str(pattern).upper()
    if p not in PATTERNS:
        raise UsageError(f"unknown Bayer pattern {pattern!r}; expected one of {', '.join(PATTERNS)}")
    return p


def bayer_masks(
    height: int,
    width: int,
    pattern: str = "RGGB",
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Per-channel 0/1 masks ``(3, H, W)`` (``dtype`` default float32) of a Bayer CFA:
    ``masks[c, i, j] = 1`` where pixel ``(i, j)`` records colour ``c``. Works for odd sizes too
    (the pattern is simply cut)."""
    import torch

    p = check_pattern(pattern)
    masks = torch.zeros(3, height, width, device=device, dtype=dtype or torch.float32)
    for k, colour in enumerate(p):
        di, dj = divmod(k, 2)
        masks[CHANNEL[colour], di::2, dj::2] = 1
    return masks


def mosaic(rgb: Tensor, pattern: str = "RGGB") -> Tensor:
    """H x for demosaicking: ``(..., 3, H, W)`` RGB to the ``(..., 1, H, W)`` Bayer mosaic."""
    if rgb.shape[-3] != 3:
        raise UsageError(f"mosaic needs 3 colour channels, got shape {tuple(rgb.shape)}")
    m = bayer_masks(rgb.shape[-2], rgb.shape[-1], pattern, device=rgb.device, dtype=rgb.dtype)
    return (rgb * m).sum(dim=-3, keepdim=True)


def mosaic_array(rgb: "np.ndarray", pattern: str = "RGGB") -> "np.ndarray":
    """:func:`mosaic` of a numpy ``(H, W, 3)`` image: the ``(H, W)`` Bayer mosaic, same dtype (no
    torch needed)."""
    import numpy as np

    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise UsageError(f"mosaic needs 3 colour channels, got shape {tuple(rgb.shape)}")
    p = check_pattern(pattern)
    out = np.empty(rgb.shape[:2], dtype=rgb.dtype)
    for k, colour in enumerate(p):
        di, dj = divmod(k, 2)
        out[di::2, dj::2] = rgb[di::2, dj::2, CHANNEL[colour]]
    return out


def mosaic_adjoint(raw: Tensor, pattern: str = "RGGB") -> Tensor:
    """H^T y for demosaicking: ``(..., 1, H, W)`` mosaic to ``(..., 3, H, W)`` with zeros at
    the colours a pixel did not record."""
    if raw.shape[-3] != 1:
        raise UsageError(f"a Bayer mosaic has 1 channel, got shape {tuple(raw.shape)}")
    m = bayer_masks(raw.shape[-2], raw.shape[-1], pattern, device=raw.device, dtype=raw.dtype)
    return raw * m


def decimate(hr: Tensor) -> Tensor:
    """H x for 2x interpolation: keep every 4th pixel, ``hr[..., 0::2, 0::2]``."""
    return hr[..., 0::2, 0::2]


def decimate_adjoint(lr: Tensor, size: tuple[int, int] | None = None) -> Tensor:
    """H^T y for 2x interpolation: place ``lr`` on the even grid of a zero image of ``size``
    (default ``(2h, 2w)``)."""
    h, w = lr.shape[-2:]
    H, W = size if size is not None else (2 * h, 2 * w)
    if (H + 1) // 2 != h or (W + 1) // 2 != w:
        raise UsageError(f"size {(H, W)} does not decimate to {(h, w)}")
    out = lr.new_zeros(*lr.shape[:-2], H, W)
    out[..., 0::2, 0::2] = lr
    return out


def decimation_mask(
    height: int, width: int, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> Tensor:
    """0/1 mask ``(1, H, W)`` (``dtype`` default float32) of the pixels kept by :func:`decimate`."""
    import torch

    m = torch.zeros(1, height, width, device=device, dtype=dtype or torch.float32)
    m[:, 0::2, 0::2] = 1
    return m
