"""GTV interpolation by the ADMM of Sec. 4.2 in its fast forms (:func:`gtv_interpolate`): the
compact three-edge-tensor state, the native replay without edge state, and the Jacobi-scaled
x-update (:class:`_JacobiSystem`). The plain nine-vector form, one function per equation, is the
reference in :mod:`.reference`; the tests check that both give the same x and gradients."""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor

from ...core import backend
from ...graph import operators as G
from .edge_step import admm_edge_step, can_replay, edge_term_replayed, gamma_tensor, node_update
from .reference import (admm_start, cg_params, gamma_per_head, GtvProblem, gtv_admm_reference, gtv_laplacian,
                             mu_c_update)
from ..cg.solver import CGSpec, StencilOperator, solve_cg, cg_exact, cg_unrolled

__all__ = ["gtv_interpolate", "gtv_laplacian"]


def gtv_interpolate(
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
    workspace: Optional[dict] = None,
    precondition: bool = False,
    laplacian: Optional[tuple[Tensor, Tensor]] = None,
) -> Tensor:
    """GTV interpolation ``min ||C-bar x||_1 s.t. H x = y`` (eq. 10) by the ADMM of Sec. 4.2.

    ``wbar`` (B, K|1, 24, H, W) are the random-walk weights of eq. 28 (:func:`graph.random_walk_weights`),
    ``gamma`` the ADMM weight (float, or a (K,) tensor: one per head, learnable), ``mu_init`` the
    initial value of every multiplier, ``q~`` starts at 0, ``x0`` (default ``mask * known``) is the
    initial estimate (warm start of the first CG). Each of the ``admm_iters`` iterations runs the
    x-update (eq. 20) by ``cg_iters`` steps of exact CG, or unrolled CG with ``cg=("unrolled",
    alphas, betas)`` (``(T,)``/``(T, K)`` shared by all ADMM iterations, or ``(admm_iters, T)``/
    ``(admm_iters, T, K)``), warm-started from the previous x; then the q~ threshold (eq. 23) and the
    multiplier update (eq. 24). ``cg_tol > 0`` lets exact CG stop early at that relative residual.
    ``workspace``: a dict the caller keeps across calls (e.g. the blocks of one network forward);
    without autograd the three edge-state tensors are kept there and reused, which saves
    re-faulting ~1 GB of fresh memory per call on large images (drop the dict to free them).
    Returns the last x (B, K, C, H, W); ``H x = y`` holds only at
    convergence, so callers that need the samples exactly re-impose them.

    Compact state. Write ``S+ = mu_a + mu_d``, ``S- = mu_b + mu_e``, ``D = S+ - S-``,
    ``u = q~1``, ``v = q~2``, ``r = C-bar x^{t+1}``. Eq. 20 only needs ``D``, ``u - v`` and ``mu_c``.
    Substituting z (eq. 19) into q (eq. 21): ``q1 + mu_d/gamma = (z - r)/2 + (mu_a + mu_d)/(2 gamma)
    + u/2`` and ``z = -1/gamma - (S+ + S-)/(2 gamma) + (u + v)/2``, so the sums cancel and
    ``q1 + mu_d/gamma = -1/(2 gamma) + D/(4 gamma) + (3u + v)/4 - r/2`` (symmetrically for q2);
    eq. 24 summed over a+d and b+e gives ``D' = D - gamma (2 r + u' - v')``. Hence (D, u, v, mu_c)
    evolve on their own and x is identical to the nine-vector ADMM (:func:`gtv_admm_reference`,
    checked in the tests). Memory: three edge tensors instead of nine. Inference on the CPU
    (native kernels, no autograd, ``admm_iters - 1 <=`` ``backend.settings.max_replayed_steps``) keeps none:
    each iteration's edge term is replayed from the iterates (:func:`.edge_step.edge_term_replayed`) and
    the node part is kept as ``c = H^T mu_c / gamma`` (:func:`.edge_step.node_update`). Training on a GPU
    (autograd, the fused Triton kernels usable, ``admm_iters - 1 <=`` ``triton_kernels.MAX_STEPS``)
    keeps none either: each edge term is the differentiable replay of
    :func:`.triton_adjoint.edge_term` (forward and backward fused kernels).

    ``precondition=True`` runs each x-update's CG on the Jacobi-scaled system (see
    :class:`_JacobiSystem`): the same linear system of eq. 20, but its eigenvalues stay in
    (0, 2] whatever the learned graph, so fixed or learned unrolled step sizes cannot diverge.

    ``laplacian``: :func:`~gsprestore.solvers.reference.gtv_laplacian` of ``wbar``, when
    the caller solves more than once on the same graph (computed here otherwise).

    If ``history`` is a list, the plain form :func:`gtv_admm_reference` runs instead (it has z and
    q to report) and appends one dict of per-(batch, head) residuals per iteration."""
    if history is not None:
        if precondition:
            raise ValueError("history (the plain ADMM form) has no preconditioned variant")
        return gtv_admm_reference(wbar, known, mask, gamma=gamma, admm_iters=admm_iters, cg_iters=cg_iters,
                                  cg=cg, mu_init=mu_init, x0=x0, history=history, cg_tol=cg_tol)
    pb, shape, x, mu_c, (kind, alphas, betas) = admm_start(wbar, known, mask, cg, mu_init, x0, laplacian)
    # mu_a = mu_b = mu_d = mu_e = mu_init and q~ = 0 give D = u = v = 0 (None: no tensors needed)
    D = u = v = n = None
    replay: Optional[bool] = None  # replay the edge state (native inference) or keep it
    fused_training: Optional[bool] = None  # training on a GPU: the edge terms by the Triton op
    jac = _JacobiSystem(pb, shape) if precondition else None
    xs: list = []  # iterates fed to the edge steps (their backward replays the state from them)
    c: Optional[Tensor] = None  # the replay form keeps H^T mu_c / gamma instead of mu_c
    rhs: Optional[Tensor] = None
    for t in range(admm_iters):
        a_t, b_t = cg_params(alphas, betas, t)
        if rhs is None:
            rhs = pb.y - pb.mask * mu_c / gamma_per_head(gamma, 5)  # eq. 20, node part
            if n is not None:
                rhs = rhs + n  # eq. 20, edge part C-bar^T (D - gamma (u - v)) / (2 gamma)
        if jac is not None:
            x = jac.solve(rhs, x, kind, cg_iters, a_t, b_t, cg_tol)
        else:
            x = solve_cg(pb.operator, rhs, x, kind, cg_iters, a_t, b_t, cg_tol)
        rhs = None
        if t + 1 == admm_iters:
            break  # the remaining updates do not change the returned x
        if replay is None:
            replay = can_replay(x, wbar, gamma, admm_iters - 1)
        if replay:  # inference on the CPU: the edge state replayed instead of stored
            if c is None:
                c = (pb.mask * mu_c / gamma_per_head(gamma, 5)).expand(shape).contiguous()
            base = node_update(c, pb, x)  # eq. 24, block c (divided by gamma); y - c
            xs.append(x)
            # eq. 20's right-hand side: y - H^T mu_c / gamma plus the edge term (eqs. 19, 21, 23, 24)
            rhs = edge_term_replayed(xs, wbar, gamma, base=base)
        elif fused_training or (fused_training is None and _fused_training(x, wbar, gamma, admm_iters - 1)):
            from . import triton_adjoint

            fused_training = True  # autograd on a GPU: each edge term replayed from the iterates, no edge state
            xs.append(x)
            n = triton_adjoint.edge_term(xs, wbar, gamma_tensor(gamma, x))  # eqs. 19, 21, 23, 24
            mu_c = mu_c_update(pb, mu_c, x, gamma)  # eq. 24, block c
        else:
            fused_training = False
            reuse = workspace.get("gtv_edge_state") if (workspace is not None and D is None) else None
            D, u, v, n = admm_edge_step(x, wbar, D, u, v, gamma, xs, out=reuse)  # eqs. 19, 21, 23, 24
            if workspace is not None and not torch.is_grad_enabled():
                workspace["gtv_edge_state"] = (D, u, v)
            xs.append(x)
            mu_c = mu_c_update(pb, mu_c, x, gamma)  # eq. 24, block c
    return x


class _JacobiSystem:
    """The x-update system of eq. 20, ``A x = rhs`` with ``A = C-bar^T C-bar + H^T H = P - W_s``
    (``P`` its diagonal: degree of L-bar plus the mask), solved in ``z = P^1/2 x``:
    ``(P^-1/2 A P^-1/2) z = P^-1/2 rhs``, then ``x = P^-1/2 z`` (symmetric Jacobi scaling; the
    exact solution is unchanged). The scaled matrix is ``I - P^-1/2 W_s P^-1/2``, whose
    eigenvalues lie in (0, 2) (a generalised normalized Laplacian), whereas those of ``A`` grow
    with the learned graph (a pixel that many neighbours point to gets degree up to ~25), which
    made unrolled CG with learned steps diverge during training.

    Unrolled CG runs this as the equivalent ``P^-1``-preconditioned recurrence in ``x``
    (:func:`cg_unrolled` with ``precond``), so the stencil keeps the unscaled weights that the
    channels of a head share. Exact CG runs on the scaled matrix itself; ``P`` depends on the
    channel (the mask does), so there the channels are folded into the head dimension."""

    def __init__(self, pb: "GtvProblem", shape):
        self.pb, self.shape = pb, shape
        self._pinv: Optional[Tensor] = None  # built once per problem, on first use
        self._scaled_op: Optional[tuple["StencilOperator", Tensor]] = None

    def _fold(self, t: Tensor) -> Tensor:
        B, K, C, H, W = self.shape
        return t.expand(self.shape).reshape(B, K * C, 1, H, W)

    def _scaled(self) -> tuple["StencilOperator", Tensor]:
        if self._scaled_op is None:
            self._scaled_op = self._build_scaled()
        return self._scaled_op

    def _build_scaled(self) -> tuple["StencilOperator", Tensor]:
        B, K, C, H, W = self.shape
        pb = self.pb
        d = self._fold(pb.diag)
        s = pb.s.expand(B, K, pb.s.shape[2], H, W).unsqueeze(2).expand(B, K, C, pb.s.shape[2], H, W)
        wn, a = G.normalized_weights(s.reshape(B, K * C, s.shape[3], H, W), d)
        return StencilOperator(wn, a), d.clamp_min(1e-12).sqrt()

    def solve(self, rhs: Tensor, x: Tensor, kind: str, iters: int, alphas, betas, tol: float) -> Tensor:
        if kind == "unrolled":
            if self._pinv is None:
                self._pinv = self.pb.diag.clamp_min(1e-12).reciprocal()
            return cg_unrolled(self.pb.operator, rhs, x, alphas, betas, precond=self._pinv)
        op, sqrt_d = self._scaled()
        z = cg_exact(op, self._fold(rhs) / sqrt_d, self._fold(x) * sqrt_d, iters=iters, tol=tol)
        return (z / sqrt_d).reshape(self.shape)


def _fused_training(x: Tensor, wbar: Tensor, gamma, steps: int) -> bool:
    """:func:`.triton_adjoint.usable`, its module (and Triton) imported only where the fused
    kernels may run at all (:func:`~gsprestore.core.backend.gpu_fused_usable`)."""
    if not backend.gpu_fused_usable(x, wbar):
        return False
    from . import triton_adjoint

    return triton_adjoint.usable(x, wbar, gamma, steps)
