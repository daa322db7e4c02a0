"""GLR interpolation (Sec. 3): the system of eq. 9, ``L_{S'S'} x_{S'} = -L_{S'S} y``, set up
once (:func:`glr_interpolate`) and solved by either CG form; :func:`glr_solve` poses it in the
three Laplacian forms that iGLR and uGLR use (:data:`GLR_LAPLACIANS`)."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch
from torch import Tensor

from ..graph import operators as G
from .cg.solver import CGSpec, StencilOperator, as5d, parse_cg, solve_cg

__all__ = ["GLR_LAPLACIANS", "GlrGraph", "glr_graph", "glr_interpolate", "glr_solve"]


def glr_interpolate(
    w: Tensor,
    known: Tensor,
    mask: Tensor,
    *,
    iters: int = 50,
    cg: CGSpec = "exact",
    x0: Optional[Tensor] = None,
    normalized: bool = True,
    tol: float = 0.0,
    operator: Optional[tuple[Tensor, Tensor]] = None,
) -> Tensor:
    """GLR interpolation (eq. 9): ``L_{S'S'} x_{S'} = -L_{S'S} y`` with ``L`` the symmetric
    normalised Laplacian ``D^-1/2 L D^-1/2`` of the undirected weights ``w`` (B, K|1, 12, H, W)
    (Sec. 5.2; ``normalized=False``: combinatorial ``L = D - W``), restricted to the unknown
    nodes ``S'`` of each channel (``mask == 0``).

    With ``P = diag(1 - mask)`` and ``y = mask * known`` the system is solved on the unknowns as
    ``P L P x = -P L y`` (PD by App. A.2), by exact CG (``iters`` steps, optional relative
    ``tol``) or unrolled CG (``cg=("unrolled", alphas, betas)``) from ``x0`` (default: 0 on the
    unknowns). Returns ``(B, K, C, H, W)`` with the known samples kept exactly. ``operator``:
    the Laplacian's ``(weights, diagonal)`` if the caller already has them (see :func:`glr_graph`)."""
    known5, mask5 = as5d(known, "known"), as5d(mask, "mask")
    kind, alphas, betas = parse_cg(cg)
    if operator is not None:
        wop, diag = operator
    elif normalized:
        wop, diag = G.normalized_weights(w)
    else:
        wop, diag = w, G.degree(w)
    keep = 1.0 - mask5
    y = mask5 * known5
    K = max(w.shape[1], known5.shape[1])
    B, _, C, H, W = known5.shape
    shape = (B, K, C, H, W)

    apply_A = StencilOperator(wop, diag, keep)  # P L P v (v already lives on the unknowns)

    b = -(keep * G.diag_minus_adjacency_apply(wop, y, diag))
    b = b.expand(shape) if b.shape != shape else b
    if x0 is None:
        xs = torch.zeros(shape, dtype=b.dtype, device=b.device)
    else:
        xs = (keep * as5d(x0, "x0")).expand(shape)
    xs = solve_cg(apply_A, b, xs, kind, iters, alphas, betas, tol)
    return y + keep * xs


GLR_LAPLACIANS: tuple[str, ...] = ("preconditioned", "normalized", "combinatorial")


class GlrGraph(NamedTuple):
    """The graph-only parts of eq. 9's system in one :data:`GLR_LAPLACIANS` form: the degrees,
    the Laplacian's weights and diagonal (``L x = diag * x - W x``). Every solve on the same
    graph can share them (G and then R - G, B - G in one uGLR block)."""

    laplacian: str
    degree: Tensor
    weights: Tensor
    diag: Tensor


def glr_graph(w: Tensor, laplacian: str = "preconditioned") -> GlrGraph:
    """:class:`GlrGraph` of the undirected weights ``w`` (B, K, 12, H, W): one degree
    computation for both the normalisation and the preconditioner."""
    if laplacian not in GLR_LAPLACIANS:
        raise ValueError(f"unknown GLR Laplacian {laplacian!r}; expected one of {GLR_LAPLACIANS}")
    deg = G.degree(w)
    if laplacian == "combinatorial":
        return GlrGraph(laplacian, deg, w, deg)
    return GlrGraph(laplacian, deg, *G.normalized_weights(w, deg))


def glr_solve(w: Tensor, known: Tensor, mask: Tensor, x0: Tensor | None, cg: Any, iters: int,
              laplacian: str = "preconditioned", tol: float = 0.0, graph: Optional[GlrGraph] = None) -> Tensor:
    """GLR interpolation (eq. 9) on the graphs ``w`` ``(B, K, 12, H, W)``, ``known``/``mask``/``x0``
    ``(B, 1|K, C, H, W)``, three ways (``laplacian``):

    * ``"normalized"``: the objective x^T L_n x with L_n = D^-1/2 L D^-1/2 (Sec. 5.2 as written);
      its minimiser does not reproduce constants where degrees vary (edges, borders);
    * ``"preconditioned"``: the objective x^T L x (combinatorial), solved in the variable
      z = D^1/2 x, where the system L_{S'S'} x = -L_{S'S} y becomes exactly the normalized one,
      (L_n)_{S'S'} z = -(L_n)_{S'S} (D^1/2 y). CG then runs on L_n (eigenvalues in [0, 2], so
      the same step sizes fit every graph) and x = D^-1/2 z reproduces constants;
    * ``"combinatorial"``: x^T L x with CG on L itself (step sizes must scale with the degrees).

    Returns ``(B, K, C, H, W)``; known samples are exact up to rounding in the preconditioned
    form (callers re-impose them). ``graph``: :func:`glr_graph` of ``w`` in this ``laplacian``
    form, when the caller solves more than once on the same graph (computed here otherwise)."""
    if graph is None:
        graph = glr_graph(w, laplacian)
    elif graph.laplacian != laplacian:
        raise ValueError(f"graph was built for the {graph.laplacian!r} Laplacian, not {laplacian!r}")
    operator = (graph.weights, graph.diag)
    if laplacian == "preconditioned":
        s = graph.degree.clamp_min(1e-12).sqrt()  # (B, K, 1, H, W)
        z = glr_interpolate(w, s * known, mask, iters=iters, cg=cg,
                            x0=None if x0 is None else s * x0, normalized=True, tol=tol, operator=operator)
        return z / s
    return glr_interpolate(w, known, mask, iters=iters, cg=cg, x0=x0,
                           normalized=laplacian == "normalized", tol=tol, operator=operator)
