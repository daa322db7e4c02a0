"""Conjugate gradient for the linear systems of eqs. 9 (GLR) and 20 (the GTV ADMM's x-update), every
form of it side by side:

* :mod:`.solver` - :func:`cg_exact` (computed step sizes) and :func:`cg_unrolled` (the learned step
  sizes of the appendix "Parameters Learning in CG"), their in-place and fused native inference
  paths, :class:`StencilOperator` (the 5x5-window matrices both equations solve with);
* :mod:`.adjoint` - the unrolled CG's hand-written training backward (the adjoint recurrence);
* :mod:`.triton_kernels` and :mod:`.triton_adjoint` - the same forward and backward as Triton
  kernels on a GPU.

All forms are tested equal to the autograd form of :mod:`.solver`.
"""

from __future__ import annotations

from .solver import CGSpec, Operator, StencilOperator, Trace, cg_exact, cg_unrolled

__all__ = ["cg_exact", "cg_unrolled", "StencilOperator", "Operator", "CGSpec", "Trace"]
