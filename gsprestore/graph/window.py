"""The 5x5 window of the pixel graph (Sec. 2 and Sec. 5.2): its offsets, and the index slices
through which every stencil loop of :mod:`gsprestore.graph.operators` and :mod:`gsprestore.solvers` reads a
pixel and its neighbour (views, never shifted copies), band of rows by band of rows.

An undirected edge is stored once, at its first end ``p``, under one of the 12 :data:`OFFSETS`
``o`` (the other end is ``p + o``); the directed graph has 24 edges per node, indexed by
:data:`DIRECTED_OFFSETS` (``OFFSETS`` followed by their negatives).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch
from torch import Tensor

from ..core import backend

__all__ = ["WINDOW_RADIUS", "OFFSETS", "DIRECTED_OFFSETS", "NU", "regions", "directed_regions", "bands",
           "band_rows", "sum_to", "zero_outside", "check_weights", "check_signal"]

WINDOW_RADIUS = 2
#: The 12 undirected offsets (dy, dx) of the 5x5 window with dy > 0 or (dy == 0 and dx > 0),
#: in raster order.
OFFSETS: tuple[tuple[int, int], ...] = tuple(
    (dy, dx)
    for dy in range(0, WINDOW_RADIUS + 1)
    for dx in range(-WINDOW_RADIUS, WINDOW_RADIUS + 1)
    if dy > 0 or dx > 0
)
#: The 24 directed offsets: ``OFFSETS`` then their negatives (same order).
DIRECTED_OFFSETS: tuple[tuple[int, int], ...] = OFFSETS + tuple((-dy, -dx) for dy, dx in OFFSETS)
NU = len(OFFSETS)  # 12





def regions(height: int, width: int):
    """For each undirected offset k yield ``(k, P, Q)`` with ``P``/``Q`` pairs of slices such that
    ``x[..., *P]`` holds every pixel ``p`` whose neighbour ``p + o_k`` is inside the image and
    ``x[..., *Q]`` holds those neighbours (same shape). Offsets that leave a tiny image entirely
    are skipped."""
    for k, (dy, dx) in enumerate(OFFSETS):
        h, w = height - abs(dy), width - abs(dx)
        if h <= 0 or w <= 0:
            continue
        py, qy = max(0, -dy), max(0, dy)
        px, qx = max(0, -dx), max(0, dx)
        yield k, (slice(py, py + h), slice(px, px + w)), (slice(qy, qy + h), slice(qx, qx + w))


def band_rows(numel_per_row: int, height: int, device: Optional[torch.device] = None) -> int:
    """Rows per band for operands of ``numel_per_row`` elements per row (:data:`backend.settings`
    ``.band_elements``; GPUs: one band)."""
    n = backend.settings.band_elements
    if n <= 0 or (device is not None and device.type != "cpu"):  # GPUs: fewer, larger ops
        return height
    return max(4, min(height, n // max(1, numel_per_row)))


@functools.lru_cache(maxsize=256)
def directed_regions(height: int, width: int, r0: int, r1: int):
    """The 24 directed edge sets whose tails lie in rows ``[r0, r1)``: tuples
    ``(j, k, tail, head, at)`` of slice pairs, ``tail`` the tails p, ``head`` = p + o_j (inside the
    image), ``k`` the undirected offset and ``at`` where its weight is stored (the tail for
    ``j < 12``, the head for the reversed offsets)."""
    out = []
    for k, (dy, dx) in enumerate(OFFSETS):
        n = width - abs(dx)
        if n <= 0 or height - dy <= 0:
            continue
        px, qx = max(0, -dx), max(0, dx)
        # forward j = k: tails p in rows [0, H - dy), head p + o
        a, b = max(r0, 0), min(r1, height - dy)
        if b > a:
            tail = (slice(a, b), slice(px, px + n))
            head = (slice(a + dy, b + dy), slice(qx, qx + n))
            out.append((k, k, tail, head, tail))
        # reverse j = 12 + k: tails q in rows [dy, H), head q - o
        a, b = max(r0, dy), min(r1, height)
        if b > a:
            tail = (slice(a, b), slice(qx, qx + n))
            head = (slice(a - dy, b - dy), slice(px, px + n))
            out.append((NU + k, k, tail, head, head))
    return tuple(out)


def bands(height: int, rows: int):
    return [(r0, min(height, r0 + rows)) for r0 in range(0, height, rows)]


def sum_to(t: Tensor, shape: torch.Size) -> Tensor:
    """Sum ``t`` over the dimensions in which ``shape`` was broadcast (same number of dims)."""
    dims = [i for i, (a, b) in enumerate(zip(t.shape, shape)) if b == 1 and a != 1]
    if dims:
        t = t.sum(dim=dims, keepdim=True)
    return t


def check_weights(w: Tensor, n: int, name: str) -> None:
    if w.dim() != 5 or w.shape[2] != n:
        raise ValueError(f"{name} must have shape (B, K, {n}, H, W), got {tuple(w.shape)}")


def check_signal(w: Tensor, x: Tensor) -> None:
    if x.dim() != 5 or x.shape[-2:] != w.shape[-2:] or x.shape[0] != w.shape[0]:
        raise ValueError(
            f"signal must have shape (B, K, C, H, W) matching weights {tuple(w.shape)}, got {tuple(x.shape)}"
        )


def zero_outside(e: Tensor, H: int, W: int) -> None:
    """Zero the entries of an edge tensor (..., 24, H, W) whose directed edge leaves the image."""
    for j, (dy, dx) in enumerate(DIRECTED_OFFSETS):
        ej = e[..., j, :, :]
        if dy > 0:
            ej[..., H - dy :, :] = 0
        elif dy < 0:
            ej[..., : -dy, :] = 0
        if dx > 0:
            ej[..., :, W - dx :] = 0
        elif dx < 0:
            ej[..., :, : -dx] = 0
