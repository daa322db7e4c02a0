"""Graph-smoothness interpolation solvers of the paper (Secs. 3-4 and the appendix), one home per
solver, each holding its reference, native and Triton forms side by side:

* :mod:`.cg` - conjugate gradient: :func:`cg_exact` (computed step sizes) and :func:`cg_unrolled`
  (learned step sizes, appendix "Parameters Learning in CG"), their fast paths and training
  backward; :class:`StencilOperator` (the matrices of eqs. 9 and 20).
* :mod:`.glr` - GLR interpolation, eq. 9: ``L_{S'S'} x_{S'} = -L_{S'S} y`` (:func:`glr_interpolate`,
  :func:`glr_solve` in the :data:`GLR_LAPLACIANS` forms).
* :mod:`.gtv` - the ADMM of Sec. 4.2 for GTV interpolation (the LP ``min ||C-bar x||_1 s.t.
  H x = y``, eq. 10): the plain nine-vector spec (:func:`gtv_admm_reference`, :mod:`.gtv.reference`),
  the fast form (:func:`gtv_interpolate`, :mod:`.gtv.admm`) and its fused edge step
  (:func:`admm_edge_step`, :mod:`.gtv.edge_step`).

Signals are ``(B, K, C, H, W)`` (K heads sharing nothing, C channels sharing the head's graph);
observations ``known``/``mask`` are ``(B, C, H, W)`` (broadcast over heads) or ``(B, K, C, H, W)``
with ``mask == 1`` where a sample is observed (``H^T H = diag(mask)``, ``H^T y = mask * known``).
Every system is independent per (batch, head): CG reductions run over (C, H, W) only.
:mod:`gsprestore.core.backend` chooses between the PyTorch formulas and the native kernels.
``python -m gsprestore.solvers`` times the operators and one solver block (:mod:`.__main__`).
"""

from __future__ import annotations

from .cg import CGSpec, Operator, StencilOperator, cg_exact, cg_unrolled
from .glr import GLR_LAPLACIANS, GlrGraph, glr_graph, glr_interpolate, glr_solve
from .gtv import (AdmmState, admm_edge_step, gtv_admm_reference, gtv_interpolate, gtv_laplacian, multiplier_update,
                  q_update, qtilde_update, x_update_rhs, z_update)

__all__ = [
    "cg_exact",
    "cg_unrolled",
    "glr_interpolate",
    "glr_solve",
    "glr_graph",
    "GlrGraph",
    "GLR_LAPLACIANS",
    "gtv_interpolate",
    "gtv_laplacian",
    "gtv_admm_reference",
    "admm_edge_step",
    "StencilOperator",
    "AdmmState",
    "z_update",
    "x_update_rhs",
    "q_update",
    "qtilde_update",
    "multiplier_update",
    "Operator",
    "CGSpec",
]
