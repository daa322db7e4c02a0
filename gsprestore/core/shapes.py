"""Broadcasting of shapes, as NumPy and PyTorch define it, without ``torch.broadcast_shapes``:
that one goes through ``torch._refs`` and imports sympy on its first call (about a second, on
every command that restores with a graph network)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def broadcast_shape(*shapes: Sequence[int]) -> torch.Size:
    """The shape ``shapes`` broadcast to (right-aligned; each dimension equal or 1), as
    ``torch.broadcast_shapes``; RuntimeError when they do not broadcast."""
    out: list[int] = []
    for shape in shapes:
        shape = tuple(int(n) for n in shape)
        if len(shape) > len(out):
            out = [1] * (len(shape) - len(out)) + out
        for i, n in enumerate(shape, start=len(out) - len(shape)):
            if out[i] == 1:
                out[i] = n
            elif n != 1 and n != out[i]:
                raise RuntimeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast (dimension {i - len(out)}: "
                                   f"{out[i]} against {n})")
    return torch.Size(out)


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """``shape`` broadcasts to exactly ``target`` (every right-aligned dimension equal or 1)."""
    if len(shape) > len(target):
        return False
    return all(n in (1, t) for n, t in zip(reversed(tuple(shape)), reversed(tuple(target))))
