"""Conjugate gradient for the systems of eqs. 9 and 20, in its two forms and their fast paths.

* :func:`cg_exact`: textbook CG with computed step sizes (Shewchuk 1994).
* :func:`cg_unrolled`: the unrolled form with learned step sizes of the appendix "Parameters
  Learning in CG", optionally diagonally preconditioned.

Each is written once as the autograd form (plain PyTorch ops, differentiable). Without autograd
(``torch.no_grad``/``inference_mode``) the same recurrence updates its buffers in place, and
unrolled CG on a :class:`StencilOperator` runs as one fused native kernel (each step one pass
over memory: ``A v`` and the three vector updates), where :mod:`gsprestore.core.backend` has the
native kernels; on a GPU with Triton, as one fused Triton kernel per step
(:mod:`.triton_kernels`). All forms are tested equal.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, TypeGuard, Union

import torch
from torch import Tensor

from ...core import backend
from ...core.shapes import broadcasts_to
from ...graph import operators as G
from .adjoint import full_rows, step_table

__all__ = ["cg_exact", "cg_unrolled", "StencilOperator", "Operator", "CGSpec", "Trace"]

Operator = Callable[[Tensor], Tensor]
#: ``trace(t, x, r)``: called by the CG solvers with each iterate x^t and its residual b - A x^t.
Trace = Callable[[int, Tensor, Tensor], None]
CGSpec = Union[str, tuple]

_DIMS = (-3, -2, -1)


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
    trace: Optional[Trace] = None,
) -> Tensor:
    """Textbook conjugate gradient for ``A x = b`` (A symmetric PD), the solver of eqs. 9 and 20
    (Shewchuk 1994): ``r = b - A x, p = r``; per step ``alpha = r.r / p.Ap``, ``x += alpha p``,
    ``r -= alpha Ap``, ``beta = r'.r' / r.r``, ``p = r + beta p``.

    Reductions run over ``dims`` (default C, H, W), so every (batch, head) system is solved
    independently. ``tol > 0`` stops once every system has ``||r|| <= tol ||b||`` (that check
    synchronises; ``tol = 0`` runs exactly ``iters`` steps). Differentiable by plain autograd.
    ``trace(t, x, r)``, if given, sees every iterate ``x^t`` and its residual ``r^t = b - A x^t``
    (the recurrence's, equal to rounding), t = 0 .. the last step."""
    if not torch.is_grad_enabled():  # inference: the same recurrence in place
        return _cg_exact_inplace(apply_A, b, x0, iters, tol, dims, trace)
    x = torch.zeros_like(b) if x0 is None else x0
    r = b if x0 is None else b - apply_A(x)
    p = r
    rr = _dot(r, r, dims)
    if trace is not None:
        trace(0, x, r)
    stop = None
    if tol > 0:
        stop = (tol**2) * _dot(b, b, dims)
    for k in range(iters):
        if stop is not None and bool((rr <= stop).all()):
            break
        Ap = apply_A(p)
        alpha = _safe_div(rr, _dot(p, Ap, dims))
        x = torch.addcmul(x, alpha, p)
        r = torch.addcmul(r, alpha, Ap, value=-1.0)
        rr_new = _dot(r, r, dims)
        p = torch.addcmul(r, _safe_div(rr_new, rr), p)
        rr = rr_new
        if trace is not None:
            trace(k + 1, x, r)
    return x


def _cg_exact_inplace(apply_A: Operator, b: Tensor, x0: Optional[Tensor], iters: int, tol: float,
                      dims: Sequence[int], trace: Optional[Trace] = None) -> Tensor:
    """:func:`cg_exact` without autograd: same arithmetic, buffers updated in place (a ``trace``
    sees the buffers: it must copy what it keeps)."""
    x = torch.zeros_like(b) if x0 is None else x0.expand(b.shape).clone(memory_format=torch.contiguous_format)
    r = b.clone() if x0 is None else b - apply_A(x)
    p = r.clone()
    rr = _dot(r, r, dims)
    stop = (tol**2) * _dot(b, b, dims) if tol > 0 else None
    if trace is not None:
        trace(0, x, r)
    for k in range(iters):
        if stop is not None and bool((rr <= stop).all()):
            break
        Ap = apply_A(p)
        alpha = _safe_div(rr, _dot(p, Ap, dims))
        x.addcmul_(alpha, p)
        r.addcmul_(alpha, Ap, value=-1.0)
        rr_new = _dot(r, r, dims)
        torch.addcmul(r, _safe_div(rr_new, rr), p, out=p)
        rr = rr_new
        if trace is not None:
            trace(k + 1, x, r)
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


def _cg_unrolled_native(op: StencilOperator, b: Tensor, x0: Tensor, alphas: Tensor, betas: Tensor,
                        precond: Optional[Tensor] = None) -> Tensor:
    """:func:`cg_unrolled` without autograd through the fused native kernel: the same recurrence,
    each step one pass over the rows (``A v`` and the three vector updates together)."""
    T = alphas.shape[0]
    K = b.shape[1]
    # x, g, v, v2 in planes padded apart (backend.padded_planes: no cache-set conflicts between channels)
    x, g, v, v2 = (backend.padded_planes(b, *b.shape) for _ in range(4))
    x.copy_(x0.expand(b.shape))  # the kernel starts with g = A x - b, v = P^-1 g
    diag, keep, pre = (full_rows(t, b.shape) for t in (op.diag, op.keep, precond))
    backend.native().cg_unrolled(backend.rows_contiguous(op.w), diag, keep, pre, backend.rows_contiguous(b), x, g, v, v2,
                            step_table(alphas, T, K, b), step_table(betas, T, K, b),
                                backend.settings.fused_cg_mode)
    return x


def _stencil_tensors(op, b: Tensor, x0: Tensor, precond: Optional[Tensor]) -> Optional[list[Tensor]]:
    """The tensors a fused CG kernel reads, if it can take this problem: a
    :class:`StencilOperator` with (B, K|1, 12, H, W) weights, every tensor of ``b``'s dtype and
    broadcasting to its (B, K, C, H, W) shape; else None."""
    if not isinstance(op, StencilOperator) or b.dim() != 5 or op.w.dim() != 5 or op.w.shape[1] not in (1, b.shape[1]):
        return None
    ts = [t for t in (op.w, op.diag, op.keep, b, x0, precond) if t is not None]
    if any(t.dtype != b.dtype for t in ts):
        return None
    return ts if all(broadcasts_to(t.shape, b.shape) for t in ts[1:]) else None


def _fused_cg_ok(op, b: Tensor, x0: Tensor, precond: Optional[Tensor] = None) -> TypeGuard[StencilOperator]:
    """The fused native CPU kernel applies (:func:`backend.usable`)."""
    ts = _stencil_tensors(op, b, x0, precond)
    return ts is not None and backend.usable(*ts)


def _triton_cg_ok(op, b: Tensor, x0: Tensor, precond: Optional[Tensor] = None) -> TypeGuard[StencilOperator]:
    """The fused Triton kernel applies: float32 on a GPU (:func:`backend.gpu_fused_usable`)."""
    ts = _stencil_tensors(op, b, x0, precond)
    return ts is not None and backend.gpu_fused_usable(*ts)


def _adjoint_ok(op, b: Tensor, x0: Tensor, alphas: Tensor, precond: Optional[Tensor]) -> TypeGuard[StencilOperator]:
    """The adjoint backward (:mod:`.adjoint`) applies: the setting on, a stencil problem of one
    dtype and device (:func:`_stencil_tensors`), step tables (T,) or (T, K)."""
    if not backend.settings.cg_adjoint:
        return False
    ts = _stencil_tensors(op, b, x0, precond)
    if ts is None or any(t.device != b.device for t in ts):
        return False
    return alphas.dim() == 1 or (alphas.dim() == 2 and alphas.shape[1] == b.shape[1])


def cg_unrolled(apply_A: Operator, b: Tensor, x0: Tensor, alphas: Tensor, betas: Tensor,
                precond: Optional[Tensor] = None, trace: Optional[Trace] = None) -> Tensor:
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
    ``A`` keeps its unscaled weights, which the channels of a head share (tested equal).

    ``trace(t, x, r)``, if given, sees every iterate ``x^t`` and its residual ``r^t = -g^t = b -
    A x^t`` (the recurrence's), t = 0 .. T (the last gradient update then runs too; without
    autograd the tensors are buffers updated in place: copy what you keep). Tracing runs the
    PyTorch loop, never the fused kernel. Under autograd, on a :class:`StencilOperator`, the whole
    recurrence is one op with a hand-written adjoint backward (:mod:`.adjoint`; turned off by
    ``backend.configure(cg_adjoint=0)``, which differentiates every step by plain autograd)."""
    T = alphas.shape[0]
    if betas.shape[0] != T:
        raise ValueError(f"alphas and betas need the same length, got {alphas.shape[0]} and {betas.shape[0]}")
    if not torch.is_grad_enabled():  # inference: the same recurrence in place
        if trace is None and _fused_cg_ok(apply_A, b, x0, precond):
            return _cg_unrolled_native(apply_A, b, x0, alphas, betas, precond)
        if trace is None and _triton_cg_ok(apply_A, b, x0, precond):
            from .triton_kernels import cg_unrolled_triton

            try:
                return cg_unrolled_triton(apply_A.w, apply_A.diag, apply_A.keep, b, x0, alphas, betas, precond)
            except Exception as exc:  # noqa: BLE001 - a Triton that cannot compile here: said once
                backend.gpu_fused_failed("CG", exc)
        x = x0.expand(b.shape).clone(memory_format=torch.contiguous_format)
        g = apply_A(x).sub_(b)
        v = g.clone() if precond is None else precond * g
        if trace is not None:
            trace(0, x, g.neg())
        for t in range(T):
            a = _step(alphas, t, g)
            if t > 0:
                torch.addcmul(g if precond is None else precond * g, _step(betas, t, g), v, out=v)
            x.addcmul_(a, v, value=-1.0)
            if t + 1 < T or trace is not None:
                g.addcmul_(a, apply_A(v), value=-1.0)
            if trace is not None:
                trace(t + 1, x, g.neg())
        return x
    if trace is None and _adjoint_ok(apply_A, b, x0, alphas, precond):  # training: the adjoint backward
        from .adjoint import cg_unrolled_adjoint

        return cg_unrolled_adjoint(apply_A.w, apply_A.diag, apply_A.keep, b, x0, alphas, betas, precond)
    x = x0
    g = apply_A(x0) - b
    v: Optional[Tensor] = None  # type: ignore[no-redef]  # (the inference branch's v has returned)
    if trace is not None:
        trace(0, x, g.neg())
    for t in range(T):
        a = _step(alphas, t, g)
        pg = g if precond is None else precond * g
        v = pg if v is None else torch.addcmul(pg, _step(betas, t, g), v)
        x = torch.addcmul(x, a, v, value=-1.0)
        if t + 1 < T or trace is not None:
            g = torch.addcmul(g, a, apply_A(v), value=-1.0)
        if trace is not None:
            trace(t + 1, x, g.neg())
    return x


def parse_cg(cg: CGSpec):
    if isinstance(cg, str):
        if cg != "exact":
            raise ValueError(f"cg must be 'exact' or ('unrolled', alphas, betas), got {cg!r}")
        return "exact", None, None
    if isinstance(cg, (tuple, list)) and len(cg) == 3 and cg[0] == "unrolled":
        return "unrolled", cg[1], cg[2]
    raise ValueError(f"cg must be 'exact' or ('unrolled', alphas, betas), got {cg!r}")


def solve_cg(apply_A: Operator, b: Tensor, x0: Tensor, kind: str, iters: int, alphas, betas, tol: float = 0.0):
    if kind == "exact":
        return cg_exact(apply_A, b, x0, iters=iters, tol=tol)
    return cg_unrolled(apply_A, b, x0, alphas, betas)


def as5d(t: Tensor, name: str) -> Tensor:
    if t.dim() == 4:
        return t.unsqueeze(1)
    if t.dim() != 5:
        raise ValueError(f"{name} must be (B, C, H, W) or (B, K, C, H, W), got {tuple(t.shape)}")
    return t
