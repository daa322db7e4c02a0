"""Small constant tensors (filter taps, colour weights), made once per (values, dtype, device).

Building them with ``torch.tensor(..., device=...)`` inside a forward pass copies from host memory
on every call: a synchronous copy per call on a GPU, and an operation that CUDA-graph capture of a
training step refuses (:mod:`gsprestore.training.graphed_step`). Callers must not modify the returned tensor
in place (views are fine)."""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor


@lru_cache(maxsize=128)
def constant(values: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """``torch.tensor(values, dtype=dtype, device=device)``, cached. Made outside inference
    mode: a tensor first asked for under ``torch.inference_mode()`` must still serve a later
    forward that autograd records."""
    with torch.inference_mode(False):
        return torch.tensor(values, dtype=dtype, device=device)
