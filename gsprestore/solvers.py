"""Graph-smoothness interpolation solvers of the paper (Secs. 3-4 and the appendix).

* :func:`cg_exact` / :func:`cg_unrolled` - conjugate gradient with computed step sizes, and the
  unrolled form with learned step sizes of the appendix "Parameters Learning in CG".
* :func:`glr_interpolate` - GLR interpolation, eq. 9: ``L_{S'S'} x_{S'} = -L_{S'S} y``.
* :func:`gtv_interpolate` - GTV interpolation, the LP ``min ||C-bar x||_1 s.t. H x = y`` (eq. 10)
  by the ADMM of Sec. 4.2, eqs. 19-24.

Signals are ``(B, K, C, H, W)`` (K heads sharing nothing, C channels sharing the head's graph);
observations ``known``/``mask`` are ``(B, C, H, W)`` (broadcast over heads) or ``(B, K, C, H, W)``
with ``mask == 1`` where a sample is observed (``H^T H = diag(mask)``, ``H^T y = mask * known``).
Every system is independent per (batch, head): CG reductions run over (C, H, W) only.

GTV state. The ADMM of eqs. 19-24 carries nine edge vectors (z, q1, q2, q~1, q~2 and the
multipliers mu_a, mu_b, mu_d, mu_e). Only three combinations of them matter for the iterate x
(derivation in :func:`gtv_interpolate`), so the default solver keeps three edge tensors
``(D, u, v) = (mu_a + mu_d - mu_b - mu_e, q~1, q~2)``; :func:`gtv_admm_reference` runs the plain
nine-vector form, one function per equation, and the tests check that both give the same x and
the same gradients. Everything edge-sized between two x-updates is one fused custom op,
:func:`admm_edge_step` (eqs. 19, 21, 23, 24 and the edge term of the next eq. 20): without
autograd it updates (D, u, v) in place; with autograd it saves only node tensors (the earlier
iterates) and replays the edge state in its backward pass.

Without autograd (``torch.no_grad``/``inference_mode``) both CG forms update their buffers in
place, and unrolled CG on a :class:`StencilOperator` (the matrices of eqs. 9 and 20) runs as one
fused native kernel: each step is one pass over memory (``A v`` and the three vector updates). ``python -m gsprestore.solvers`` times the operators and one solver block
(:func:`benchmark`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import torch
from torch import Tensor

from . import backend, window
from . import graph as G

__all__ = [
    "cg_exact",
    "cg_unrolled",
    "glr_interpolate",
    "gtv_interpolate",
    "gtv_admm_reference",
    "admm_edge_step",
    "StencilOperator",
]

Operator = Callable[[Tensor], Tensor]
CGSpec = Union[str, tuple]

_DIMS = (-3, -2, -1)


# --------------------------------------------------------------------------------------------
# conjugate gradient
# --------------------------------------------------------------------------------------------


def _dot(a: Tensor, b: Tensor, dims: Sequence[int]) -> Tensor:
    return (a * b).sum(dim=tuple(dims), keepdim=True)


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    """num / den where den > 0, else 0 (a converged system stops moving; no NaN in gradients)."""
    pos = den > 0
    return torch.where(pos, num / torch.where(pos, den, torch.ones_like(den)), torch.zeros_like(num))


def cg_exact(
    apply_A: Operator,
    b: Tensor,
    x0: Optional[Tensor] = None,
    iters: int = 50,
    tol: float = 0.0,
    dims: Sequence[int] = _DIMS,
) -> Tensor:
    """Textbook conjugate gradient for ``A x = b`` (A symmetric PD), the solver of eqs. 9 and 20
    (Shewchuk 1994): ``r = b - A x, p = r``; per step ``alpha = r.r / p.Ap``, ``x += alpha p``,
    ``r -= alpha Ap``, ``beta = r'.r' / r.r``, ``p = r + beta p``.

    Reductions run over ``dims`` (default C, H, W), so every (batch, head) system is solved
    independently. ``tol > 0`` stops once every system has ``||r|| <= tol ||b||`` (that check
    synchronises; ``tol = 0`` runs exactly ``iters`` steps). Differentiable by plain autograd."""
    if not torch.is_grad_enabled():  # inference: the same recurrence in place
        return _cg_exact_inplace(apply_A, b, x0, iters, tol, dims)
    x = torch.zeros_like(b) if x0 is None else x0
    r = b if x0 is None else b - apply_A(x)
    p = r
    rr = _dot(r, r, dims)
    stop = None
    if tol > 0:
        stop = (tol**2) * _dot(b, b, dims)
    for _ in range(iters):
        if stop is not None and bool((rr <= stop).all()):
            break
        Ap = apply_A(p)
        alpha = _safe_div(rr, _dot(p, Ap, dims))
        x = torch.addcmul(x, alpha, p)
        r = torch.addcmul(r, alpha, Ap, value=-1.0)
        rr_new = _dot(r, r, dims)
        p = torch.addcmul(r, _safe_div(rr_new, rr), p)
        rr = rr_new
    return x


def _cg_exact_inplace(apply_A: Operator, b: Tensor, x0: Optional[Tensor], iters: int, tol: float,
                      dims: Sequence[int]) -> Tensor:
    """:func:`cg_exact` without autograd: same arithmetic, buffers updated in place."""
    x = torch.zeros_like(b) if x0 is None else x0.expand(b.shape).clone(memory_format=torch.contiguous_format)
    r = b.clone() if x0 is None else b - apply_A(x)
    p = r.clone()
    rr = _dot(r, r, dims)
    stop = (tol**2) * _dot(b, b, dims) if tol > 0 else None
    for _ in range(iters):
        if stop is not None and bool((rr <= stop).all()):
            break
        Ap = apply_A(p)
        alpha = _safe_div(rr, _dot(p, Ap, dims))
        x.addcmul_(alpha, p)
        r.addcmul_(alpha, Ap, value=-1.0)
        rr_new = _dot(r, r, dims)
        torch.addcmul(r, _safe_div(rr_new, rr), p, out=p)
        rr = rr_new
    return x


def _step(param: Tensor, t: int, like: Tensor) -> Tensor:
    """``param[t]`` shaped to broadcast against ``like`` (B, K, ...): a scalar, or one value per
    head (``param`` of shape (T, K))."""
    p = param[t]
    if p.dim() == 0:
        return p
    return p.reshape((1, -1) + (1,) * (like.dim() - 2))


class StencilOperator:
    """``v -> keep * (diag * v - W v)``: the matrices of eqs. 9 and 20 (W the symmetric adjacency
    of undirected weights ``w`` (B, K|1, 12, H, W); ``diag``/``keep`` broadcast against
    ``(B, K, C, H, W)``; ``keep=None`` means 1). A plain callable for the solvers; without
    autograd :func:`cg_unrolled` recognises it and runs the whole unrolled CG through one fused
    native kernel (one pass over memory per step) when the native kernels are in use."""

    __slots__ = ("w", "diag", "keep")

    def __init__(self, w: Tensor, diag: Tensor, keep: Optional[Tensor] = None):
        self.w, self.diag, self.keep = w, diag, keep

    def __call__(self, v: Tensor) -> Tensor:
        out = G.diag_minus_adjacency_apply(self.w, v, self.diag)
        return out if self.keep is None else self.keep * out


def _step_table(param: Tensor, T: int, K: int, like: Tensor) -> Tensor:
    """(T,) or (T, K) step sizes as a contiguous (T, K) table of ``like``'s dtype."""
    p = param.detach().to(dtype=like.dtype)
    return (p.reshape(T, 1) if p.dim() == 1 else p).expand(T, K).contiguous()


def _cg_unrolled_native(op: StencilOperator, b: Tensor, x0: Tensor, alphas: Tensor, betas: Tensor,
                        precond: Optional[Tensor] = None) -> Tensor:
    """:func:`cg_unrolled` without autograd through the fused native kernel: the same recurrence,
    each step one pass over the rows (``A v`` and the three vector updates together)."""
    T = alphas.shape[0]
    K = b.shape[1]
    # x, g, v, v2 in planes padded apart (backend.padded_planes: no cache-set conflicts between channels)
    x, g, v, v2 = (backend.padded_planes(b, *b.shape) for _ in range(4))
    x.copy_(x0.expand(b.shape))  # the kernel starts with g = A x - b, v = P^-1 g
    diag = backend.rows_contiguous(op.diag.expand(b.shape))
    keep = None if op.keep is None else backend.rows_contiguous(op.keep.expand(b.shape))
    pre = None if precond is None else backend.rows_contiguous(precond.expand(b.shape))
    backend.native().cg_unrolled(backend.rows_contiguous(op.w), diag, keep, pre, backend.rows_contiguous(b), x, g, v, v2,
                            _step_table(alphas, T, K, b), _step_table(betas, T, K, b),
                                backend.settings.fused_cg_mode)
    return x


def _fused_cg_ok(op, b: Tensor, x0: Tensor, precond: Optional[Tensor] = None) -> bool:
    if not isinstance(op, StencilOperator) or b.dim() != 5:
        return False
    ts = [t for t in (op.w, op.diag, op.keep, b, x0, precond) if t is not None]
    if any(t.dtype != b.dtype for t in ts) or op.w.dim() != 5 or op.w.shape[1] not in (1, b.shape[1]):
        return False
    try:
        ok = all(torch.broadcast_shapes(t.shape, b.shape) == b.shape for t in ts[1:])
    except RuntimeError:
        return False
    return ok and backend.usable(*ts)


def cg_unrolled(apply_A: Operator, b: Tensor, x0: Tensor, alphas: Tensor, betas: Tensor,
                precond: Optional[Tensor] = None) -> Tensor:
    """Unrolled CG with learned step sizes (appendix "Parameters Learning in CG") for
    ``A x = b``, ``T = len(alphas)`` steps, no global dot products::

        g^0 = A x^0 - b,   v^{-1} = 0
        for t = 0 .. T-1:
            v^t     = P^-1 g^t + beta_t v^{t-1}     (so v^0 = P^-1 g^0; beta_0 is unused)
            x^{t+1} = x^t - alpha_t v^t
            g^{t+1} = g^t - alpha_t A v^t           (= A x^{t+1} - b exactly; skipped at t = T-1)

    This is the appendix recurrence ``g^t = g^{t-1} - alpha A v^{t-1}, v^t = g^t + beta v^{t-1},
    x^{t+1} = x^t - alpha v^t`` with the gradient update indexed so that ``g^t`` stays the true
    gradient ``A x^t - b`` (the printed form uses alpha_t where x moved by alpha_{t-1}; both are
    identical for constant alpha). ``T`` steps cost ``T`` applications of A. ``alphas``/``betas``
    are ``(T,)`` (shared) or ``(T, K)`` (one per head, broadcast over ``b``'s dim 1).

    ``precond`` (``P^-1``, broadcasting against ``b``; default none, ``P = I``) makes it the
    diagonally preconditioned recurrence. With ``P`` the diagonal of ``A`` it is exactly the plain
    recurrence run on the Jacobi-scaled system ``(P^-1/2 A P^-1/2) z = P^-1/2 b`` in the variable
    ``z = P^1/2 x`` (substitute ``x = P^-1/2 z``, ``v_x = P^-1/2 v_z``, ``g_x = P^1/2 g_z``), but
    ``A`` keeps its unscaled weights, which the channels of a head share (tested equal)."""
    T = alphas.shape[0]
    if betas.shape[0] != T:
        raise ValueError(f"alphas and betas need the same length, got {alphas.shape[0]} and {betas.shape[0]}")
    if not torch.is_grad_enabled():  # inference: the same recurrence in place
        if _fused_cg_ok(apply_A, b, x0, precond):
            return _cg_unrolled_native(apply_A, b, x0, alphas, betas, precond)
        x = x0.expand(b.shape).clone(memory_format=torch.contiguous_format)
        g = apply_A(x).sub_(b)
        v = g.clone() if precond is None else precond * g
        for t in range(T):
            a = _step(alphas, t, g)
            if t > 0:
                torch.addcmul(g if precond is None else precond * g, _step(betas, t, g), v, out=v)
            x.addcmul_(a, v, value=-1.0)
            if t + 1 < T:
                g.addcmul_(a, apply_A(v), value=-1.0)
        return x
    x = x0
    g = apply_A(x0) - b
    v: Optional[Tensor] = None
    for t in range(T):
        a = _step(alphas, t, g)
        pg = g if precond is None else precond * g
        v = pg if v is None else torch.addcmul(pg, _step(betas, t, g), v)
        x = torch.addcmul(x, a, v, value=-1.0)
        if t + 1 < T:
            g = torch.addcmul(g, a, apply_A(v), value=-1.0)
    return x


def _parse_cg(cg: CGSpec):
    if isinstance(cg, str):
        if cg != "exact":
            raise ValueError(f"cg must be 'exact' or ('unrolled', alphas, betas), got {cg!r}")
        return "exact", None, None
    if isinstance(cg, (tuple, list)) and len(cg) == 3 and cg[0] == "unrolled":
        return "unrolled", cg[1], cg[2]
    raise ValueError(f"cg must be 'exact' or ('unrolled', alphas, betas), got {cg!r}")


def _solve(apply_A: Operator, b: Tensor, x0: Tensor, kind: str, iters: int, alphas, betas, tol: float = 0.0):
    if kind == "exact":
        return cg_exact(apply_A, b, x0, iters=iters, tol=tol)
    return cg_unrolled(apply_A, b, x0, alphas, betas)


def _as5d(t: Tensor, name: str) -> Tensor:
    if t.dim() == 4:
        return t.unsqueeze(1)
    if t.dim() != 5:
        raise ValueError(f"{name} must be (B, C, H, W) or (B, K, C, H, W), got {tuple(t.shape)}")
    return t


# --------------------------------------------------------------------------------------------
# GLR interpolation (Sec. 3)
# --------------------------------------------------------------------------------------------


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
) -> Tensor:
    """GLR interpolation (eq. 9): ``L_{S'S'} x_{S'} = -L_{S'S} y`` with ``L`` the symmetric
    normalised Laplacian ``D^-1/2 L D^-1/2`` of the undirected weights ``w`` (B, K|1, 12, H, W)
    (Sec. 5.2; ``normalized=False``: combinatorial ``L = D - W``), restricted to the unknown
    nodes ``S'`` of each channel (``mask == 0``).

    With ``P = diag(1 - mask)`` and ``y = mask * known`` the system is solved on the unknowns as
    ``P L P x = -P L y`` (PD by App. A.2), by exact CG (``iters`` steps, optional relative
    ``tol``) or unrolled CG (``cg=("unrolled", alphas, betas)``) from ``x0`` (default: 0 on the
    unknowns). Returns ``(B, K, C, H, W)`` with the known samples kept exactly."""
    known5, mask5 = _as5d(known, "known"), _as5d(mask, "mask")
    kind, alphas, betas = _parse_cg(cg)
    if normalized:
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
        xs = (keep * _as5d(x0, "x0")).expand(shape)
    xs = _solve(apply_A, b, xs, kind, iters, alphas, betas, tol)
    return y + keep * xs


# --------------------------------------------------------------------------------------------
# GTV interpolation: ADMM of Sec. 4.2 (eqs. 19-24), compact three-tensor form
# --------------------------------------------------------------------------------------------


def _per_head(gamma: Union[float, Tensor], ndim: int) -> Union[float, Tensor]:
    """gamma as a scalar or a per-head tensor broadcasting over (B, K, ...) with ``ndim`` dims."""
    if isinstance(gamma, Tensor) and gamma.dim() > 0:
        return gamma.reshape((1, -1) + (1,) * (ndim - 2))
    return gamma


@dataclass
class _GtvProblem:
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


def _make_problem(wbar: Tensor, known: Tensor, mask: Tensor) -> _GtvProblem:
    s = G.incidence_laplacian_weights(wbar)
    return _GtvProblem(wbar=wbar, mask=mask, y=mask * known, s=s, diag=G.degree(s) + mask)


def _mu_c_update(pb: _GtvProblem, mu_c: Tensor, x: Tensor, gamma) -> Tensor:
    """Eq. 24, block c: ``mu_c' = mu_c + gamma (H x - y)`` (kept as ``H^T mu_c``)."""
    return mu_c + _per_head(gamma, 5) * (pb.mask * x - pb.y)


# ---- fused edge step: eqs. 19, 21, 23, 24 and the edge part of the next eq. 20, one custom op


def _gamma_tensor(gamma, like: Tensor) -> Tensor:
    """gamma as a tensor broadcasting over (B, K, C, h, w) node-shaped slices."""
    if isinstance(gamma, Tensor):
        return gamma.reshape((1, -1, 1, 1, 1)) if gamma.dim() > 0 else gamma
    return torch.tensor(float(gamma), dtype=like.dtype, device=like.device)


def _edges(x: Tensor):
    """Directed edges (j, tail rows, tail cols, head rows, head cols) band by band of rows."""
    H, W = x.shape[-2:]
    rows = window.band_rows(x[..., :1, :].numel(), H, x.device)
    for r0, r1 in window.bands(H, rows):
        for j, _, (ty, tx), (hy, hx), _ in window.directed_regions(H, W, r0, r1):
            yield j, ty, tx, hy, hx


def _edge_step_forward(x: Tensor, wbar: Tensor, D, u, v, g: Tensor, inplace: bool, out=None):
    """Forward of :class:`_AdmmEdgeStep`, one directed offset j at a time (temporaries are
    1/24 of an edge tensor). With ``inplace`` the new state overwrites D, u, v; ``out`` may
    give three edge tensors to write a new state into (e.g. reused buffers)."""
    B, K, C, H, W = x.shape
    nu = len(G.OFFSETS)
    first = D is None
    if first or not inplace:
        shape = (B, K, C, 2 * nu, H, W)
        if out is not None and all(t.shape == shape and t.dtype == x.dtype and t.device == x.device for t in out):
            D2, u2, v2 = out
        else:
            D2, u2, v2 = (x.new_empty(shape) for _ in range(3))
        for t in (D2, u2, v2):
            window.zero_outside(t, H, W)  # edges leaving the image stay 0; every other entry is written
    else:
        D2, u2, v2 = D, u, v
    n = x.new_zeros(B, K, C, H, W)
    if backend.usable(x, wbar, D, u, v, g):
        x = x.contiguous()
        gk = g.reshape(-1).to(dtype=x.dtype).contiguous()
        backend.native().admm_edge_step(x, wbar.contiguous(), D, u, v, D2, u2, v2, gk, n)
        return D2, u2, v2, n
    half_inv = 0.5 / g
    for j, ty, tx, hy, hx in _edges(x):
        wj = wbar[:, :, j : j + 1, ty, tx]
        r = torch.sub(x[..., ty, tx], x[..., hy, hx]).mul_(wj)  # r = C-bar x on edge j
        if first:
            a = -half_inv.expand_as(r) if half_inv.dim() else torch.full_like(r, -float(half_inv))
            b = r.mul(-0.5)
        else:
            Dj, uj, vj = D[:, :, :, j, ty, tx], u[:, :, :, j, ty, tx], v[:, :, :, j, ty, tx]
            a = torch.add(uj, vj).mul_(0.5).sub_(half_inv)
            b = torch.sub(uj, vj).addcmul_(Dj, 1.0 / g).mul_(0.25).sub_(r, alpha=0.5)
        U, V, Dn = u2[:, :, :, j, ty, tx], v2[:, :, :, j, ty, tx], D2[:, :, :, j, ty, tx]
        torch.add(a, b, out=U).relu_()  # a, b are fresh temporaries: safe in place
        torch.sub(a, b, out=V).relu_()
        diff = torch.sub(U, V)  # u' - v'
        step = torch.add(diff, r, alpha=2.0)
        if first:
            torch.mul(step, g, out=Dn).neg_()
        else:
            torch.addcmul(Dj, g, step, value=-1.0, out=Dn)
        e = torch.mul(Dn, half_inv).sub_(diff, alpha=0.5).mul_(wj)  # wbar * (D'/(2g) - (u'-v')/2)
        n[..., ty, tx].add_(e)
        n[..., hy, hx].sub_(e)
    return D2, u2, v2, n


class _AdmmEdgeStep(torch.autograd.Function):
    """(x, wbar, D, u, v, gamma) -> (D', u', v', n) with r = C-bar x,
    a = (u + v)/2 - 1/(2 gamma), b = (D/gamma + u - v)/4 - r/2 (eqs. 19, 21),
    u' = relu(a + b), v' = relu(a - b) (eq. 23), D' = D - gamma (2 r + u' - v') (eq. 24),
    n = C-bar^T (D' - gamma (u' - v')) / (2 gamma) (the edge part of eq. 20's right-hand side).
    Saves only its inputs; the backward pass recomputes r, a, b per directed offset. Given the
    iterates ``hist = (x^1, ..., x^{t-1})`` that produced (D, u, v) from the zero state, it saves
    those node tensors instead of the three edge tensors and replays the earlier steps in the
    backward pass (edge memory O(1) instead of O(ADMM iterations))."""

    @staticmethod
    def forward(ctx, x, wbar, D, u, v, gamma, *hist):  # type: ignore[override]
        ctx.first = D is None
        ctx.replay = bool(hist)
        if ctx.replay:
            ctx.save_for_backward(x, wbar, None, None, None, gamma, *hist)
        else:
            ctx.save_for_backward(x, wbar, D, u, v, gamma)
        return _edge_step_forward(x, wbar, D, u, v, gamma, inplace=False)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gD2, gu2, gv2, gn):  # type: ignore[override]
        x, wbar, D, u, v, g, *hist = ctx.saved_tensors
        first = ctx.first
        if ctx.replay:  # recompute the state from the zero state and the earlier iterates
            for xh in hist:
                D, u, v, _ = _edge_step_forward(xh, wbar, D, u, v, g, inplace=True)
        grads = _AdmmEdgeStep._grads(ctx, x, wbar, D, u, v, g, gD2, gu2, gv2, gn, first)
        return grads + (None,) * len(hist)

    @staticmethod
    def _grads(ctx, x, wbar, D, u, v, g, gD2, gu2, gv2, gn, first):
        B, K, C, H, W = x.shape
        nu = len(G.OFFSETS)
        need_x, need_w, need_D, need_u, need_v, need_g = ctx.needs_input_grad[:6]
        if backend.usable(x, wbar, D, u, v, g, gD2, gu2, gv2, gn):
            return _edge_step_backward_native(x, wbar, D, u, v, g, gD2, gu2, gv2, gn, first)
        gx = torch.zeros_like(x) if need_x else None
        gw = torch.zeros(B, K, 2 * nu, H, W, dtype=x.dtype, device=x.device) if need_w else None
        gD = torch.zeros_like(D) if (need_D and not first) else None
        gu = torch.zeros_like(u) if (need_u and not first) else None
        gv = torch.zeros_like(v) if (need_v and not first) else None
        gg = torch.zeros_like(g) if need_g else None
        inv = 1.0 / g
        half_inv = 0.5 * inv
        for j, ty, tx, hy, hx in _edges(x):
            wj = wbar[:, :, j : j + 1, ty, tx]
            dx_ = x[..., ty, tx] - x[..., hy, hx]
            r = dx_ * wj
            if first:
                a = -half_inv * torch.ones_like(r)
                b = -0.5 * r
            else:
                Dj, uj, vj = D[:, :, :, j, ty, tx], u[:, :, :, j, ty, tx], v[:, :, :, j, ty, tx]
                a = 0.5 * (uj + vj) - half_inv
                b = 0.25 * (Dj * inv + uj - vj) - 0.5 * r
            U, V = torch.relu(a + b), torch.relu(a - b)
            diff = U - V
            Dn = (-g * (2 * r + diff)) if first else Dj - g * (2 * r + diff)
            e0 = Dn * half_inv - 0.5 * diff  # n = C-bar^T e0 on edge j
            z = lambda t: torch.zeros_like(r) if t is None else t[:, :, :, j, ty, tx]  # noqa: E731
            ggn = (gn[..., ty, tx] - gn[..., hy, hx]) if gn is not None else torch.zeros_like(r)
            ge = ggn * wj
            gDn = z(gD2) + ge * half_inv
            gU = z(gu2) - 0.5 * ge - g * gDn
            gV = z(gv2) + 0.5 * ge + g * gDn
            gr = -2.0 * g * gDn
            s1 = gU * (a + b > 0)
            s2 = gV * (a - b > 0)
            ga, gb = s1 + s2, s1 - s2
            gr = gr - 0.5 * gb
            if need_w:
                gw[:, :, j, ty, tx].add_(_sum_c(ggn * e0 + gr * dx_, wbar))
            if need_x:
                t = gr * wj
                gx[..., ty, tx].add_(t)
                gx[..., hy, hx].sub_(t)
            if not first:
                if gD is not None:
                    gD[:, :, :, j, ty, tx] = gDn + 0.25 * gb * inv
                if gu is not None:
                    gu[:, :, :, j, ty, tx] = 0.5 * ga + 0.25 * gb
                if gv is not None:
                    gv[:, :, :, j, ty, tx] = 0.5 * ga - 0.25 * gb
            if need_g:
                # d e0/dg = -Dn/(2 g^2); dDn/dg = -(2r + diff); da/dg = 1/(2 g^2); db/dg = -D/(4 g^2)
                t = -ge * Dn * half_inv * inv - gDn * (2 * r + diff) + ga * half_inv * inv
                if not first:
                    t = t - gb * Dj * 0.25 * inv * inv
                gg += window.sum_to(t, gg.shape if gg.dim() else torch.Size([1] * t.dim())).reshape(gg.shape)
        if need_w:
            gw = window.sum_to(gw, wbar.shape)
        return gx, gw, gD, gu, gv, gg


def _edge_step_backward_native(x, wbar, D, u, v, g, gD2, gu2, gv2, gn, first):
    """:class:`_AdmmEdgeStep` backward through the native kernel (same formulas)."""
    B, K, C, H, W = x.shape
    c = lambda t: None if t is None else t.contiguous()  # noqa: E731
    gx = torch.zeros_like(x)
    gw = x.new_zeros(B, K, 2 * len(G.OFFSETS), H, W)
    gD, gu, gv = (None, None, None) if first else (torch.zeros_like(D), torch.zeros_like(u), torch.zeros_like(v))
    gg = x.new_zeros(B * K)
    gk = g.reshape(-1).to(dtype=x.dtype).contiguous()
    backend.native().admm_edge_step_backward(x.contiguous(), wbar.contiguous(), D, u, v, gk, c(gD2), c(gu2), c(gv2),
                                        c(gn), gx, gw, gD, gu, gv, gg)
    gg = gg.view(B, K).sum(0)
    gg = gg.reshape(g.shape) if g.dim() else gg.sum()
    return gx, window.sum_to(gw, wbar.shape), gD, gu, gv, gg


def _sum_c(t: Tensor, wbar: Tensor) -> Tensor:
    """Sum an edge-slice gradient (B, K, C, h, w) over channels (and heads if wbar has K = 1)."""
    t = t.sum(dim=2)
    if wbar.shape[1] == 1 and t.shape[1] != 1:
        t = t.sum(dim=1, keepdim=True)
    return t


def admm_edge_step(x: Tensor, wbar: Tensor, D, u, v, gamma, history: Sequence[Tensor] = (), out=None):
    """One fused ADMM edge step in the compact variables (see :func:`gtv_interpolate`):
    eqs. 19, 21, 23 (``u' = relu(a + b)``, ``v' = relu(a - b)``), eq. 24 (``D' = D - gamma (2 r
    + u' - v')``) and the edge term ``n = C-bar^T (D' - gamma (u' - v')) / (2 gamma)`` of the next
    x-update (eq. 20), with ``r = C-bar x``. ``D = u = v = None`` is the zero initial state.
    Returns ``(D', u', v', n)``. A custom autograd op (saves its inputs only, or with
    ``history`` = the earlier iterates x^1..x^{t-1} that led to (D, u, v), only node tensors: the
    state is recomputed in the backward pass); without autograd the state is updated in place
    (from the zero state: written into ``out``, three edge tensors, when their shape fits)."""
    g = _gamma_tensor(gamma, x)
    K = max(x.shape[1], wbar.shape[1])
    if x.shape[1] != K:
        x = x.expand(x.shape[0], K, *x.shape[2:])
    tensors = [t for t in (x, wbar, D, u, v, g) if isinstance(t, Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        hist = tuple(h.expand(h.shape[0], K, *h.shape[2:]) if h.shape[1] != K else h for h in history)
        return _AdmmEdgeStep.apply(x, wbar, D, u, v, g, *(hist if D is not None else ()))
    return _edge_step_forward(x, wbar, D, u, v, g, inplace=True, out=out)


def _can_replay(x: Tensor, wbar: Tensor, gamma, steps: int) -> bool:
    """Whether :func:`_edge_term_replayed` can run ``steps`` edge steps: native CPU kernels, no
    autograd to record, at most ``backend.settings.max_replayed_steps``."""
    if steps > backend.settings.max_replayed_steps:
        return False
    tensors = [t for t in (x, wbar, gamma) if isinstance(t, Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return backend.usable(*tensors)


def _edge_term_replayed(xs: Sequence[Tensor], wbar: Tensor, gamma, base: Optional[Tensor] = None) -> Tensor:
    """The edge term ``n`` that :func:`admm_edge_step` returns after the iterates ``xs = (x^1, ...,
    x^S)`` from the zero state, without keeping the edge state: the native kernel replays each
    directed edge's (D, u, v) through the S steps in cache (an edge's state depends only on its
    own ``r^s = wbar (x^s_tail - x^s_head)``), so the 3 x 24 values per pixel and channel that the
    stateful form reads and writes per iteration never reach memory; the arithmetic is S steps
    instead of one. Inference on the CPU only (see :func:`_can_replay`). ``base`` (a contiguous
    tensor of the full shape, overwritten) is added to n: the node part of the right-hand side."""
    x = xs[-1]
    K = max(x.shape[1], wbar.shape[1])
    shape = (x.shape[0], K, *x.shape[2:])
    gk = _gamma_tensor(gamma, x).reshape(-1).to(dtype=x.dtype).contiguous()
    n = x.new_zeros(shape) if base is None else base
    xs = [h.expand(shape) for h in xs]
    if not all(backend.plane_stride(h) is not None and h.stride() == xs[0].stride() for h in xs):
        xs = [h.contiguous() for h in xs]
    if backend.plane_stride(n) is None:
        raise ValueError("the base of the replayed edge term needs planes with contiguous rows")
    return backend.native().admm_edge_replay(xs, wbar.contiguous(), gk, n)


def _node_update(c: Tensor, pb: "_GtvProblem", x: Tensor) -> Tensor:
    """In place ``c += m (m x - y)`` (eq. 24, block c, in ``c = H^T mu_c / gamma``); returns
    ``y - c``, the node part of eq. 20's right-hand side (one native pass where it can run)."""
    xf = x.expand(c.shape)
    if backend.plane_stride(xf) is not None and c.is_contiguous() and backend.usable(c, x, pb.mask, pb.y):
        rhs = torch.empty_like(c)
        backend.native().admm_node_update(c, backend.rows_contiguous(pb.mask), xf, backend.rows_contiguous(pb.y), rhs)
        return rhs
    c.addcmul_(pb.mask, torch.mul(pb.mask, x).sub_(pb.y))
    return torch.sub(pb.y, c)


def _admm_start(wbar: Tensor, known: Tensor, mask: Tensor, cg: CGSpec, mu_init: float, x0: Optional[Tensor]):
    """Common start of both ADMM forms: the problem, the (B, K, C, H, W) shape, x^0 (default
    H^T y) and mu_c^0 = mu_init on the samples, and the parsed CG spec."""
    known5, mask5 = _as5d(known, "known"), _as5d(mask, "mask")
    pb = _make_problem(wbar, known5, mask5)
    K = max(wbar.shape[1], known5.shape[1])
    B, _, C, H, W = known5.shape
    shape = (B, K, C, H, W)
    x = (pb.y if x0 is None else _as5d(x0, "x0")).expand(shape)
    return pb, shape, x, (mu_init * mask5).expand(shape), _parse_cg(cg)


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
    each iteration's edge term is replayed from the iterates (:func:`_edge_term_replayed`) and
    the node part is kept as ``c = H^T mu_c / gamma`` (:func:`_node_update`).

    ``precondition=True`` runs each x-update's CG on the Jacobi-scaled system (see
    :class:`_JacobiSystem`): the same linear system of eq. 20, but its eigenvalues stay in
    (0, 2] whatever the learned graph, so fixed or learned unrolled step sizes cannot diverge.

    If ``history`` is a list, the plain form :func:`gtv_admm_reference` runs instead (it has z and
    q to report) and appends one dict of per-(batch, head) residuals per iteration."""
    if history is not None:
        if precondition:
            raise ValueError("history (the plain ADMM form) has no preconditioned variant")
        return gtv_admm_reference(wbar, known, mask, gamma=gamma, admm_iters=admm_iters, cg_iters=cg_iters,
                                  cg=cg, mu_init=mu_init, x0=x0, history=history, cg_tol=cg_tol)
    pb, shape, x, mu_c, (kind, alphas, betas) = _admm_start(wbar, known, mask, cg, mu_init, x0)
    # mu_a = mu_b = mu_d = mu_e = mu_init and q~ = 0 give D = u = v = 0 (None: no tensors needed)
    D = u = v = n = None
    replay: Optional[bool] = None  # replay the edge state (native inference) or keep it
    jac = _JacobiSystem(pb, shape) if precondition else None
    xs: list = []  # iterates fed to the edge steps (their backward replays the state from them)
    c: Optional[Tensor] = None  # the replay form keeps H^T mu_c / gamma instead of mu_c
    rhs: Optional[Tensor] = None
    for t in range(admm_iters):
        a_t, b_t = _cg_params(alphas, betas, t)
        if rhs is None:
            rhs = pb.y - pb.mask * mu_c / _per_head(gamma, 5)  # eq. 20, node part
            if n is not None:
                rhs = rhs + n  # eq. 20, edge part C-bar^T (D - gamma (u - v)) / (2 gamma)
        if jac is not None:
            x = jac.solve(rhs, x, kind, cg_iters, a_t, b_t, cg_tol)
        else:
            x = _solve(pb.operator, rhs, x, kind, cg_iters, a_t, b_t, cg_tol)
        rhs = None
        if t + 1 == admm_iters:
            break  # the remaining updates do not change the returned x
        if replay is None:
            replay = _can_replay(x, wbar, gamma, admm_iters - 1)
        if replay:  # inference on the CPU: the edge state replayed instead of stored
            if c is None:
                c = (pb.mask * mu_c / _per_head(gamma, 5)).expand(shape).contiguous()
            base = _node_update(c, pb, x)  # eq. 24, block c (divided by gamma); y - c
            xs.append(x)
            # eq. 20's right-hand side: y - H^T mu_c / gamma plus the edge term (eqs. 19, 21, 23, 24)
            rhs = _edge_term_replayed(xs, wbar, gamma, base=base)
        else:
            reuse = workspace.get("gtv_edge_state") if (workspace is not None and D is None) else None
            D, u, v, n = admm_edge_step(x, wbar, D, u, v, gamma, xs, out=reuse)  # eqs. 19, 21, 23, 24
            if workspace is not None and not torch.is_grad_enabled():
                workspace["gtv_edge_state"] = (D, u, v)
            xs.append(x)
            mu_c = _mu_c_update(pb, mu_c, x, gamma)  # eq. 24, block c
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

    def __init__(self, pb: "_GtvProblem", shape):
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


def _cg_params(alphas, betas, t: int):
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
    g = _per_head(gamma, 6)
    return -1.0 / g - (st.mu_a + st.mu_b + st.mu_d + st.mu_e) / (2 * g) + 0.5 * (st.qt1 + st.qt2)


def x_update_rhs(pb: _GtvProblem, st: AdmmState, gamma) -> Tensor:
    """Right-hand side of eq. 20: ``C^T (mu_a - mu_b + mu_d - mu_e) / (2 gamma) - H^T mu_c / gamma
    - C^T (q~1 - q~2) / 2 + H^T y`` (its matrix is ``C^T C + H^T H``, :meth:`_GtvProblem.apply_A`)."""
    ge, gn = _per_head(gamma, 6), _per_head(gamma, 5)
    e = (st.mu_a - st.mu_b + st.mu_d - st.mu_e) / (2 * ge) - 0.5 * (st.qt1 - st.qt2)
    return G.incidence_adjoint(pb.wbar, e) - pb.mask * st.mu_c / gn + pb.y


def q_update(st: AdmmState, z: Tensor, r: Tensor, gamma) -> tuple[Tensor, Tensor]:
    """Eq. 21 with ``r = C x^{t+1}``: ``q1 = (z - r)/2 + (mu_a - mu_d + gamma q~1)/(2 gamma)``,
    ``q2 = (z + r)/2 + (mu_b - mu_e + gamma q~2)/(2 gamma)``."""
    g = _per_head(gamma, 6)
    q1 = 0.5 * (z - r) + (st.mu_a - st.mu_d + g * st.qt1) / (2 * g)
    q2 = 0.5 * (z + r) + (st.mu_b - st.mu_e + g * st.qt2) / (2 * g)
    return q1, q2


def qtilde_update(q1: Tensor, q2: Tensor, st: AdmmState, gamma) -> tuple[Tensor, Tensor]:
    """Eq. 23, the ReLU-like threshold: ``q~ = max(q + mu_{d,e} / gamma, 0)`` term by term."""
    g = _per_head(gamma, 6)
    return torch.relu(q1 + st.mu_d / g), torch.relu(q2 + st.mu_e / g)


def _residual_blocks(pb: _GtvProblem, st: AdmmState, r: Tensor) -> tuple[Tensor, ...]:
    """The blocks of ``B [z; x; q] - [b; q~]`` (eq. 18): ``(z - r - q1, z + r - q2, Hx - y,
    q1 - q~1, q2 - q~2)`` with ``r = C x``."""
    return (st.z - r - st.q1, st.z + r - st.q2, pb.mask * st.x - pb.y, st.q1 - st.qt1, st.q2 - st.qt2)


def multiplier_update(pb: _GtvProblem, st: AdmmState, r: Tensor, gamma) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Eq. 24: ``mu^{t+1} = mu^t + gamma (B [z; x; q] - [b; q~])`` for the five blocks
    (a, b, c, d, e) of eq. 18; returns the new multipliers and the residual blocks."""
    ge, gn = _per_head(gamma, 6), _per_head(gamma, 5)
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
) -> Tensor:
    """The ADMM of Sec. 4.2 in its plain form, every variable of eqs. 17-24 kept and each step a
    function: z (eq. 19), x (eq. 20, CG), q (eq. 21), q~ (eq. 23), mu (eq. 24). Same arguments
    and result as :func:`gtv_interpolate` (which it checks). If ``history`` is a list, one dict
    per iteration is appended with per-(batch, head) tensors: ``primal_residual``
    ``||B [z; x; q] - [b; q~]||_2``, ``constraint`` ``||H x - y||_2``, ``objective``
    ``||C x||_1`` (the GTV of the iterate) and ``lp_objective`` ``1^T z``. ``x_solver(apply_A, b,
    x0, cg_spec) -> x`` replaces the x-update's CG (e.g. a CG that records its residuals)."""
    pb, shape, x, mu_c, (kind, alphas, betas) = _admm_start(wbar, known, mask, cg, mu_init, x0)
    B, K, C, H, W = shape
    eshape = (B, K, C, 2 * len(G.OFFSETS), H, W)
    zeros = torch.zeros(eshape, dtype=x.dtype, device=x.device)
    mu = torch.full(eshape, mu_init, dtype=x.dtype, device=x.device)
    st = AdmmState(x=x, z=zeros, q1=zeros, q2=zeros, qt1=zeros, qt2=zeros,
                   mu_a=mu, mu_b=mu, mu_c=mu_c, mu_d=mu, mu_e=mu)
    for t in range(admm_iters):
        a_t, b_t = _cg_params(alphas, betas, t)
        st.z = z_update(st, gamma)
        rhs = x_update_rhs(pb, st, gamma)
        if x_solver is None:
            st.x = _solve(pb.operator, rhs, st.x, kind, cg_iters, a_t, b_t, cg_tol)
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
    return st.x


# --------------------------------------------------------------------------------------------
# micro-benchmark: ``python -m gsprestore.solvers [--threads N] [--size HxW] [--no-native]``
# --------------------------------------------------------------------------------------------


def benchmark(height: int = 512, width: int = 768, heads: int = 4, channels: int = 3, repeats: int = 3) -> dict:
    """Time the graph operators and one GTV / GLR solver block (paper settings: 5 ADMM x 10
    unrolled CG; 10 CG) on a ``(1, heads, channels, height, width)`` signal, next to one
    48-to-48-channel 3x3 convolution at the same resolution. Returns milliseconds (best of
    ``repeats``); no autograd."""
    import time

    def best(fn, n=repeats):
        fn()
        t_best = float("inf")
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            t_best = min(t_best, time.perf_counter() - t0)
        return 1e3 * t_best

    B, K, C, H, W = 1, heads, channels, height, width
    gen = torch.Generator().manual_seed(0)
    out: dict = {"native": backend.available(), "threads": torch.get_num_threads()}
    with torch.no_grad():
        conv = torch.nn.Conv2d(48, 48, 3, padding=1)
        xc = torch.randn(1, 48, H, W, generator=gen)
        out["conv48_ms"] = best(lambda: conv(xc))
        xc = None  # free it (the lambdas above have run)
        w = G.edge_weights(torch.randn(B, K, 12, H, W, generator=gen), torch.eye(12) * 0.05)
        deg = G.degree(w)
        wbar = G.random_walk_weights(w)
        x = torch.randn(B, K, C, H, W, generator=gen)
        out["laplacian_apply_ms"] = best(lambda: G.laplacian_apply(w, x, deg))
        out["incidence_apply_ms"] = best(lambda: G.incidence_apply(wbar, x))
        e = G.incidence_apply(wbar, x)
        out["incidence_adjoint_ms"] = best(lambda: G.incidence_adjoint(wbar, e))
        e = None
        gamma = torch.full((K,), 10.0)
        state = admm_edge_step(x, wbar, None, None, None, gamma)[:3]
        out["admm_edge_step_ms"] = best(lambda: admm_edge_step(x, wbar, *state, gamma))
        state = None
        mask = torch.zeros(B, 1, C, H, W)
        mask[..., 0::2, 0::2] = 1
        known = torch.rand(B, 1, C, H, W, generator=gen) * mask
        al, be = torch.full((10, K), 0.5), torch.full((10, K), 0.3)
        run = lambda ws=None: gtv_interpolate(wbar, known, mask, gamma=gamma, admm_iters=5,  # noqa: E731
                                              cg_iters=10, cg=("unrolled", al, be), x0=x, workspace=ws)
        out["gtv_block_ms"] = best(run, 1)
        ws: dict = {}
        out["gtv_block_workspace_ms"] = best(lambda: run(ws), 1)  # as in a network: buffers reused
        ws = {}
        out["glr_block_ms"] = best(lambda: glr_interpolate(w, known, mask, cg=("unrolled", al, be), x0=x), 1)
    out["gtv_block_in_convs"] = out["gtv_block_ms"] / out["conv48_ms"]
    out["gtv_block_workspace_in_convs"] = out["gtv_block_workspace_ms"] / out["conv48_ms"]
    out["glr_block_in_convs"] = out["glr_block_ms"] / out["conv48_ms"]
    return out


# ---- GLR interpolation in the three Laplacian forms (used by iGLR and uGLR)

GLR_LAPLACIANS: tuple[str, ...] = ("preconditioned", "normalized", "combinatorial")


def glr_solve(w: Tensor, known: Tensor, mask: Tensor, x0: Tensor | None, cg: Any, iters: int,
              laplacian: str = "preconditioned", tol: float = 0.0) -> Tensor:
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
    form (callers re-impose them)."""
    if laplacian == "preconditioned":
        s = G.degree(w).clamp_min(1e-12).sqrt()  # (B, K, 1, H, W)
        z = glr_interpolate(w, s * known, mask, iters=iters, cg=cg,
                                    x0=None if x0 is None else s * x0, normalized=True, tol=tol)
        return z / s
    return glr_interpolate(w, known, mask, iters=iters, cg=cg, x0=x0,
                                   normalized=laplacian == "normalized", tol=tol)


if __name__ == "__main__":  # pragma: no cover
    import argparse
    import json

    ap = argparse.ArgumentParser(description=benchmark.__doc__)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--size", default="512x768", help="HxW")
    ap.add_argument("--no-native", action="store_true", help="PyTorch path only")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.no_native:
        backend.use("torch")
    h, w = (int(v) for v in args.size.lower().split("x"))
    print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in benchmark(h, w).items()}, indent=1))
