"""The ADMM of Sec. 4.2 (eqs. 17-24) for GTV interpolation, ``min ||C-bar x||_1 s.t. H x = y``
(eq. 10), in its plain form: every variable kept (:class:`AdmmState`) and one function per
equation - z (eq. 19, :func:`z_update`), x (eq. 20, :func:`x_update_rhs` and CG), q (eq. 21,
:func:`q_update`), q~ (eq. 23, :func:`qtilde_update`), mu (eq. 24, :func:`multiplier_update`).
This is the specification: the compact, replayed and native forms of :mod:`.gtv` are tested
equal to :func:`gtv_admm_reference`. The problem both forms share (:class:`GtvProblem`) and
their common start (:func:`admm_start`) live here too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch
from torch import Tensor

from ...graph import operators as G
from ..cg.solver import CGSpec, Operator, StencilOperator, as5d, parse_cg, solve_cg

__all__ = ["gtv_laplacian", "AdmmState", "z_update", "x_update_rhs", "q_update", "qtilde_update", "multiplier_update",
           "gtv_admm_reference"]


# --------------------------------------------------------------------------------------------
# the problem shared by every ADMM form
# --------------------------------------------------------------------------------------------


def gamma_per_head(gamma: Union[float, Tensor], ndim: int) -> Union[float, Tensor]:
    """gamma as a scalar or a per-head tensor broadcasting over (B, K, ...) with ``ndim`` dims."""
    if isinstance(gamma, Tensor) and gamma.dim() > 0:
        return gamma.reshape((1, -1) + (1,) * (ndim - 2))
    return gamma


@dataclass
class GtvProblem:
    """The fixed parts of one GTV interpolation: graph, observation and the x-update operator."""

    wbar: Tensor  # (B, K|1, 24, H, W)
    mask: Tensor  # (B, K|1, C, H, W)
    y: Tensor  # mask * known
    s: Tensor  # undirected weights of L-bar = C-bar^T C-bar
    diag: Tensor  # degree(s) + mask: the diagonal of L-bar + H^T H

    def apply_A(self, v: Tensor) -> Tensor:
        """(C-bar^T C-bar + H^T H) v, the matrix of eq. 20."""
        return G.diag_minus_adjacency_apply(self.s, v, self.diag)

    @property
    def operator(self) -> "StencilOperator":
        """:meth:`apply_A` as a :class:`StencilOperator` (the fused inference CG knows it)."""
        return StencilOperator(self.s, self.diag)


def gtv_laplacian(wbar: Tensor) -> tuple[Tensor, Tensor]:
    """The graph-only part of eq. 20's matrix: ``L-bar = C-bar^T C-bar`` as its undirected
    weights ``s`` (B, K, 12, H, W) and degrees (B, K, 1, H, W). Every GTV solve on the same
    graph (e.g. G and then R - G, B - G in one block) can share it (``laplacian=`` of
    :func:`~gsprestore.solvers.gtv_interpolate`)."""
    s = G.incidence_laplacian_weights(wbar)
    return s, G.degree(s)


def make_problem(wbar: Tensor, known: Tensor, mask: Tensor,
                  laplacian: Optional[tuple[Tensor, Tensor]] = None) -> GtvProblem:
    s, deg = gtv_laplacian(wbar) if laplacian is None else laplacian
    return GtvProblem(wbar=wbar, mask=mask, y=mask * known, s=s, diag=deg + mask)


def mu_c_update(pb: GtvProblem, mu_c: Tensor, x: Tensor, gamma) -> Tensor:
    """Eq. 24, block c: ``mu_c' = mu_c + gamma (H x - y)`` (kept as ``H^T mu_c``)."""
    return mu_c + gamma_per_head(gamma, 5) * (pb.mask * x - pb.y)


def admm_start(wbar: Tensor, known: Tensor, mask: Tensor, cg: CGSpec, mu_init: float, x0: Optional[Tensor],
                laplacian: Optional[tuple[Tensor, Tensor]] = None):
    """Common start of both ADMM forms: the problem (``laplacian``: :func:`gtv_laplacian` of
    ``wbar`` if already computed), the (B, K, C, H, W) shape, x^0 (default H^T y) and mu_c^0 =
    mu_init on the samples, and the parsed CG spec."""
    known5, mask5 = as5d(known, "known"), as5d(mask, "mask")
    pb = make_problem(wbar, known5, mask5, laplacian)
    K = max(wbar.shape[1], known5.shape[1])
    B, _, C, H, W = known5.shape
    shape = (B, K, C, H, W)
    x = (pb.y if x0 is None else as5d(x0, "x0")).expand(shape)
    return pb, shape, x, (mu_init * mask5).expand(shape), parse_cg(cg)


def cg_params(alphas, betas, t: int):
    """Per-ADMM-iteration CG parameters: 3-D (admm, T, K) / 2-D (admm, T) only when marked so."""
    if alphas is None:
        return None, None
    if alphas.dim() == 3:
        return alphas[t], betas[t]
    return alphas, betas


# --------------------------------------------------------------------------------------------
# GTV interpolation: the plain nine-vector ADMM, one function per equation (reference)
# --------------------------------------------------------------------------------------------


@dataclass
class AdmmState:
    """All ADMM variables of eqs. 17-24 (edge vectors are (B, K, C, 24, H, W); ``mu_c`` is
    kept as ``H^T mu_c`` in node space)."""

    x: Tensor
    z: Tensor
    q1: Tensor
    q2: Tensor
    qt1: Tensor
    qt2: Tensor
    mu_a: Tensor
    mu_b: Tensor
    mu_c: Tensor
    mu_d: Tensor
    mu_e: Tensor


def z_update(st: AdmmState, gamma) -> Tensor:
    """Eq. 19: ``z = -1/gamma - (mu_a + mu_b + mu_d + mu_e) / (2 gamma) + (q~1 + q~2) / 2``."""
    g = gamma_per_head(gamma, 6)
    return -1.0 / g - (st.mu_a + st.mu_b + st.mu_d + st.mu_e) / (2 * g) + 0.5 * (st.qt1 + st.qt2)


def x_update_rhs(pb: GtvProblem, st: AdmmState, gamma) -> Tensor:
    """Right-hand side of eq. 20: ``C^T (mu_a - mu_b + mu_d - mu_e) / (2 gamma) - H^T mu_c / gamma
    - C^T (q~1 - q~2) / 2 + H^T y`` (its matrix is ``C^T C + H^T H``, :meth:`GtvProblem.apply_A`)."""
    ge, gn = gamma_per_head(gamma, 6), gamma_per_head(gamma, 5)
    e = (st.mu_a - st.mu_b + st.mu_d - st.mu_e) / (2 * ge) - 0.5 * (st.qt1 - st.qt2)
    return G.incidence_adjoint(pb.wbar, e) - pb.mask * st.mu_c / gn + pb.y


def q_update(st: AdmmState, z: Tensor, r: Tensor, gamma) -> tuple[Tensor, Tensor]:
    """Eq. 21 with ``r = C x^{t+1}``: ``q1 = (z - r)/2 + (mu_a - mu_d + gamma q~1)/(2 gamma)``,
    ``q2 = (z + r)/2 + (mu_b - mu_e + gamma q~2)/(2 gamma)``."""
    g = gamma_per_head(gamma, 6)
    q1 = 0.5 * (z - r) + (st.mu_a - st.mu_d + g * st.qt1) / (2 * g)
    q2 = 0.5 * (z + r) + (st.mu_b - st.mu_e + g * st.qt2) / (2 * g)
    return q1, q2


def qtilde_update(q1: Tensor, q2: Tensor, st: AdmmState, gamma) -> tuple[Tensor, Tensor]:
    """Eq. 23, the ReLU-like threshold: ``q~ = max(q + mu_{d,e} / gamma, 0)`` term by term."""
    g = gamma_per_head(gamma, 6)
    return torch.relu(q1 + st.mu_d / g), torch.relu(q2 + st.mu_e / g)


def _residual_blocks(pb: GtvProblem, st: AdmmState, r: Tensor) -> tuple[Tensor, ...]:
    """The blocks of ``B [z; x; q] - [b; q~]`` (eq. 18): ``(z - r - q1, z + r - q2, Hx - y,
    q1 - q~1, q2 - q~2)`` with ``r = C x``."""
    return (st.z - r - st.q1, st.z + r - st.q2, pb.mask * st.x - pb.y, st.q1 - st.qt1, st.q2 - st.qt2)


def multiplier_update(pb: GtvProblem, st: AdmmState, r: Tensor, gamma) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Eq. 24: ``mu^{t+1} = mu^t + gamma (B [z; x; q] - [b; q~])`` for the five blocks
    (a, b, c, d, e) of eq. 18; returns the new multipliers and the residual blocks."""
    ge, gn = gamma_per_head(gamma, 6), gamma_per_head(gamma, 5)
    ra, rb, rc, rd, re = _residual_blocks(pb, st, r)
    mus = (st.mu_a + ge * ra, st.mu_b + ge * rb, st.mu_c + gn * rc, st.mu_d + ge * rd, st.mu_e + ge * re)
    return mus, (ra, rb, rc, rd, re)


def gtv_admm_reference(
    wbar: Tensor,
    known: Tensor,
    mask: Tensor,
    *,
    gamma: Union[float, Tensor] = 10.0,
    admm_iters: int = 5,
    cg_iters: int = 10,
    cg: CGSpec = "exact",
    mu_init: float = 0.1,
    x0: Optional[Tensor] = None,
    history: Optional[list] = None,
    cg_tol: float = 0.0,
    x_solver: Optional[Callable[[Operator, Tensor, Tensor, CGSpec], Tensor]] = None,
    trace: Optional[Callable[[int, "AdmmState", tuple], None]] = None,
) -> Tensor:
    """The ADMM of Sec. 4.2 in its plain form, every variable of eqs. 17-24 kept and each step a
    function: z (eq. 19), x (eq. 20, CG), q (eq. 21), q~ (eq. 23), mu (eq. 24). Same arguments
    and result as :func:`~gsprestore.solvers.gtv.gtv_interpolate` (which it checks). If
    ``history`` is a list, one dict per iteration is appended with per-(batch, head) tensors: ``primal_residual``
    ``||B [z; x; q] - [b; q~]||_2``, ``constraint`` ``||H x - y||_2``, ``objective``
    ``||C x||_1`` (the GTV of the iterate) and ``lp_objective`` ``1^T z``. ``x_solver(apply_A, b,
    x0, cg_spec) -> x`` replaces the x-update's CG (e.g. one that traces its residuals, as
    :func:`gsprestore.viz.explain.gtv_trace` does). ``trace(t, state, residuals)``, if given, sees the
    state after every iteration t = 1..admm_iters (the iterate is ``state.x``) and the residual
    blocks ``(z - r - q1, z + r - q2, Hx - y, q1 - q~1, q2 - q~2)`` of eq. 18 (``r = C x``)."""
    pb, shape, x, mu_c, (kind, alphas, betas) = admm_start(wbar, known, mask, cg, mu_init, x0)
    B, K, C, H, W = shape
    eshape = (B, K, C, 2 * len(G.OFFSETS), H, W)
    zeros = torch.zeros(eshape, dtype=x.dtype, device=x.device)
    mu = torch.full(eshape, mu_init, dtype=x.dtype, device=x.device)
    st = AdmmState(x=x, z=zeros, q1=zeros, q2=zeros, qt1=zeros, qt2=zeros,
                   mu_a=mu, mu_b=mu, mu_c=mu_c, mu_d=mu, mu_e=mu)
    for t in range(admm_iters):
        a_t, b_t = cg_params(alphas, betas, t)
        st.z = z_update(st, gamma)
        rhs = x_update_rhs(pb, st, gamma)
        if x_solver is None:
            st.x = solve_cg(pb.operator, rhs, st.x, kind, cg_iters, a_t, b_t, cg_tol)
        else:
            st.x = x_solver(pb.apply_A, rhs, st.x, "exact" if kind == "exact" else ("unrolled", a_t, b_t))
        r = G.incidence_apply(wbar, st.x)
        st.q1, st.q2 = q_update(st, st.z, r, gamma)
        st.qt1, st.qt2 = qtilde_update(st.q1, st.q2, st, gamma)
        (st.mu_a, st.mu_b, st.mu_c, st.mu_d, st.mu_e), res = multiplier_update(pb, st, r, gamma)
        if history is not None:
            sq = lambda e: e.detach().square().sum(dim=tuple(range(2, e.dim())))  # noqa: E731
            history.append({
                "iteration": t + 1,
                "primal_residual": sum(sq(e) for e in res).sqrt(),
                "constraint": sq(res[2]).sqrt(),
                "objective": r.detach().abs().sum(dim=(2, 3, 4, 5)),
                "lp_objective": st.z.detach().sum(dim=(2, 3, 4, 5)),
            })
        if trace is not None:
            trace(t + 1, st, res)
    return st.x
