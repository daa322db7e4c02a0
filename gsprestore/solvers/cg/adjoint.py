"""Unrolled CG (appendix "Parameters Learning in CG") as one autograd op with a hand-written
backward: the adjoint recurrence.

For a fixed operator ``A = keep * (diag - W)`` (:class:`~gsprestore.solvers.cg.StencilOperator`,
the matrices of eqs. 9 and 20), the unrolled CG of :func:`~gsprestore.solvers.cg.cg_unrolled`
with learned steps is a linear recurrence in ``(x, g, v)``::

    g^0 = A x^0 - b
    v^t = P g^t + beta_t v^{t-1}        (v^0 = P g^0)
    x^{t+1} = x^t - alpha_t v^t
    g^{t+1} = g^t - alpha_t A v^t       (t < T - 1)

Its adjoint runs the same recurrence backwards. With ``x_bar`` the gradient of the returned
``x^T`` (it passes unchanged to every ``x^t``), ``g_bar`` the running adjoint of ``g`` and
``v_bar`` that of ``v``, for t = T-1 .. 0::

    v_bar^t  = -alpha_t x_bar + beta_{t+1} v_bar^{t+1} - alpha_t A^T g_bar^{t+1}
    alpha_bar_t = -<x_bar, v^t> - <A^T g_bar^{t+1}, v^t>
    A_bar   += -alpha_t g_bar^{t+1} (v^t)^T
    g_bar^t  = g_bar^{t+1} + P v_bar^t,   P_bar += v_bar^t g^t,   beta_bar_t = <v_bar^t, v^{t-1}>

and at the start ``b_bar = -g_bar^0``, ``x0_bar = x_bar + A^T g_bar^0``, ``A_bar += g_bar^0 (x^0)^T``.
``A_bar`` reaches the operator's tensors as per-edge products (the undirected weights' gradient,
accumulated in one buffer over all steps by the same kernel as
:func:`gsprestore.graph.operators.diag_minus_adjacency_apply`'s backward), ``diag_bar += keep * sum of
the products`` and ``keep_bar``. ``A^T u = diag * (keep u) - W (keep u)`` (W symmetric).

The forward pass runs the in-place inference recurrence (the native stencil on the CPU) and keeps
only ``v^0 .. v^{T-1}`` (and ``g^t`` when the preconditioner needs a gradient): no autograd graph
of T x 6 elementwise nodes, no per-step gradient buffers for the weights, and a backward that
costs two stencil passes per step. Tested against plain autograd of the same recurrence
(float64 ``gradcheck`` and whole-model gradients).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ...core import backend
from ...graph import operators as G
from ...graph.window import sum_to

__all__ = ["cg_unrolled_adjoint"]

_SPATIAL = (2, 3, 4)  # C, H, W: the dims a (B, K) system's inner products run over


def _step(table: Tensor, t: int) -> Tensor:
    """Step size ``t`` of a (T,) or (T, K) table, shaped to broadcast over (B, K, C, H, W)."""
    p = table[t]
    return p if p.dim() == 0 else p.reshape(1, -1, 1, 1, 1)


def step_table(param: Tensor, T: int, K: int, like: Tensor) -> Tensor:
    """(T,) or (T, K) step sizes as a contiguous (T, K) table of ``like``'s dtype (what the native
    kernels read)."""
    p = param.detach().to(dtype=like.dtype)
    return (p.reshape(T, 1) if p.dim() == 1 else p).expand(T, K).contiguous()


def full_rows(t: Optional[Tensor], shape) -> Optional[Tensor]:
    """``t`` broadcast to ``shape`` with contiguous rows (broadcast dims stay stride 0), as the
    native CG kernels read their per-pixel operands; None stays None."""
    return None if t is None else backend.rows_contiguous(t.expand(shape))


def _dot(a: Tensor, b: Tensor, like: Tensor) -> Tensor:
    """Per-step-size inner product: ``sum(a * b)`` reduced to the shape of one entry of the step
    table ``like`` (a scalar, or one value per head)."""
    s = torch.mul(a, b).sum(dim=(0,) + _SPATIAL)  # (K,)
    return s if like.dim() == 1 else s.sum()


def _stencil(w: Tensor, diag: Tensor, u: Tensor) -> Tensor:
    """``diag * u - W u`` without autograd (the native kernel on the CPU)."""
    return G.diag_minus_adjacency_apply(w, u, diag)


def _forward_native(w, diag, keep, precond, b, x0, alphas, betas, need_pre):
    """The forward recurrence in the fused native kernel (one sweep over the rows for all T
    steps, the inference kernel's) recording every ``v^t`` (and ``g^t`` when the preconditioner
    needs a gradient) into buffers of their own: (x^T, v (T, B, K, C, H, W), g or None)."""
    T, shape = alphas.shape[0], b.shape
    x = torch.empty(shape, dtype=b.dtype)
    x.copy_(x0.expand(shape))
    g = torch.empty(shape, dtype=b.dtype)
    vrec = torch.empty((T,) + tuple(shape), dtype=b.dtype)
    grec = torch.empty((T,) + tuple(shape), dtype=b.dtype) if need_pre else None
    rc, full = backend.rows_contiguous, lambda t: full_rows(t, shape)  # noqa: E731
    with torch.no_grad():
        backend.native().cg_unrolled_record(rc(w), full(diag), full(keep), full(precond), rc(b), x, g, vrec, grec,
                                            step_table(alphas, T, shape[1], b), step_table(betas, T, shape[1], b),
                                            backend.settings.fused_cg_mode)
    return x, vrec, grec


def _backward_native(ctx, w, diag, keep, precond, x0, alphas, betas, vrec, grec, xbar):
    """The adjoint recurrence in one native sweep per plane (``cg_unrolled_backward``: the
    stencils, the vector updates, the step sizes' inner products and the per-edge weight
    gradient of every step together); ``keep`` needs no gradient."""
    need_p = ctx.needs_input_grad[3]
    T, shape = ctx.T, xbar.shape
    B, K, C, H, W = shape
    rc, full = backend.rows_contiguous, lambda t: full_rows(t, shape)  # noqa: E731
    gw = xbar.new_empty(B, K, G.NU, H, W)
    gd, gb, gx0 = (torch.empty_like(xbar) for _ in range(3))
    gp = torch.empty_like(xbar) if (need_p and precond is not None) else None
    ga, gbe = xbar.new_empty(B * K, T), xbar.new_empty(B * K, T)
    backend.native().cg_unrolled_backward(rc(w), full(diag), full(keep), full(precond), vrec,
                                          grec if gp is not None else None, full(x0), xbar,
                                          step_table(alphas, T, K, xbar), step_table(betas, T, K, xbar),
                                          gw, gd, gp, gb, gx0, ga, gbe)
    per_step = lambda g: g.view(B, K, T).sum(0).t()  # noqa: E731 - one sum per plane and step -> (T, K)
    return _input_grads(ctx, w, diag, precond, x0, alphas, betas, gw, gd, gp, gb, gx0, per_step(ga), per_step(gbe))


def _input_grads(ctx, w, diag, precond, x0, alphas, betas, gw, gd, gp, gb, gx0, ga, gbe):
    """The fused backwards' full-size gradients (``ga``/``gbe`` (T, K)) reduced to the shapes of
    :class:`_UnrolledCG`'s inputs, None where no gradient is wanted (``keep``: never)."""
    need_w, need_d, _, _, need_b, need_x0, need_a, need_be = ctx.needs_input_grad

    def steps(g: Tensor, like: Tensor) -> Tensor:  # (T, K) -> (T,) or (T, K)
        return (g.sum(1) if like.dim() == 1 else g).to(like.dtype)

    return (sum_to(gw, w.shape) if need_w else None,
            sum_to(gd, diag.shape) if need_d else None,
            None,
            sum_to(gp, precond.shape) if gp is not None else None,
            sum_to(gb, ctx.b_shape) if need_b else None,
            sum_to(gx0, x0.shape) if need_x0 else None,
            steps(ga, alphas) if need_a else None,
            steps(gbe, betas) if need_be else None)


def _triton_ok(w, diag, keep, precond, b, x0) -> bool:
    """The Triton training kernels apply: float32 on a GPU (or under ``TRITON_INTERPRET=1``)."""
    return backend.gpu_fused_usable(w, diag, keep, precond, b, x0)


def _backward_triton(ctx, w, diag, keep, precond, x0, alphas, betas, vrec, grec, xbar):
    """The adjoint recurrence as Triton kernels (:mod:`.triton_adjoint`); ``keep`` needs no
    gradient."""
    from . import triton_adjoint

    T, K = ctx.T, xbar.shape[1]
    want_gp = ctx.needs_input_grad[3] and precond is not None
    grads = triton_adjoint.backward(w, diag, keep, precond, vrec, grec, x0, xbar, step_table(alphas, T, K, xbar),
                                       step_table(betas, T, K, xbar), want_gp)
    return _input_grads(ctx, w, diag, precond, x0, alphas, betas, *grads)


class _UnrolledCG(torch.autograd.Function):
    """(w, diag, keep, precond, b, x0, alphas, betas) -> x^T of the unrolled CG recurrence (see
    the module docstring); ``keep``/``precond`` may be None (1)."""

    @staticmethod
    def forward(ctx, w, diag, keep, precond, b, x0, alphas, betas):  # type: ignore[override]
        T = alphas.shape[0]
        need_pre = precond is not None and ctx.needs_input_grad[3]
        shape = b.shape
        ctx.T, ctx.b_shape = T, b.shape
        ctx.recorded = backend.usable(w, diag, keep, precond, b, x0, alphas, betas)
        ctx.triton = False
        if not ctx.recorded and _triton_ok(w, diag, keep, precond, b, x0):
            from . import triton_adjoint

            try:
                x, vrec, grec = triton_adjoint.forward_recorded(w, diag, keep, precond, b, x0, alphas, betas,
                                                                   need_pre)
                ctx.recorded = ctx.triton = True
            except Exception as exc:  # noqa: BLE001 - a Triton that cannot compile here: said once
                backend.gpu_fused_failed("CG training kernel", exc)
        elif ctx.recorded:
            x, vrec, grec = _forward_native(w, diag, keep, precond, b, x0, alphas, betas, need_pre)
        if ctx.recorded:  # v^t (and g^t) as one (T, B, K, C, H, W) tensor each
            ctx.save_for_backward(w, diag, keep, precond, x0, alphas, betas, vrec, grec)
            return x
        x = x0.expand(shape).clone(memory_format=torch.contiguous_format)
        g = _stencil(w, diag, x)
        if keep is not None:
            g.mul_(keep)
        g.sub_(b)
        vs: list[Tensor] = []
        gs: list[Tensor] = []
        v: Optional[Tensor] = None
        for t in range(T):
            a = _step(alphas, t)
            if need_pre:
                gs.append(g.clone())
            pg = g.clone() if precond is None else precond * g
            v = pg if v is None else pg.addcmul_(_step(betas, t), v)
            vs.append(v)
            x.addcmul_(a, v, value=-1.0)
            if t + 1 < T:
                av = _stencil(w, diag, v)
                if keep is not None:
                    av.mul_(keep)
                g.addcmul_(a, av, value=-1.0)
        ctx.save_for_backward(w, diag, keep, precond, x0, alphas, betas, *vs, *gs)
        return x

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, xbar):  # type: ignore[override]
        T = ctx.T
        w, diag, keep, precond, x0, alphas, betas, *rest = ctx.saved_tensors
        need_w, need_d, need_k, need_p, need_b, need_x0, need_a, need_be = ctx.needs_input_grad
        xbar = xbar.contiguous()
        if ctx.recorded:
            vrec, grec = rest
            if ctx.triton and not (need_k and keep is not None) and backend.gpu_fused_usable(xbar):
                try:
                    return _backward_triton(ctx, w, diag, keep, precond, x0, alphas, betas, vrec, grec, xbar)
                except Exception as exc:  # noqa: BLE001 - the PyTorch adjoint below, said once
                    backend.gpu_fused_failed("CG training kernel", exc)
            elif not ctx.triton and not (need_k and keep is not None) and backend.usable(xbar):
                return _backward_native(ctx, w, diag, keep, precond, x0, alphas, betas, vrec, grec, xbar)
            vs, gs = vrec.unbind(0), (() if grec is None else grec.unbind(0))
        else:
            vs, gs = rest[:T], rest[T:]
        shape = xbar.shape
        B, K, C, H, W = shape
        # A_bar is the sum over terms c_s (g_s (v_s)^T): the weights' gradient accumulates in one
        # buffer, diag's and keep's in full-size buffers reduced once at the end
        gw = xbar.new_zeros(B, K, G.NU, H, W) if need_w else None
        gd = torch.zeros_like(xbar) if need_d else None
        gk = torch.zeros_like(xbar) if (need_k and keep is not None) else None
        gp = torch.zeros_like(xbar) if (need_p and precond is not None) else None
        ga = torch.zeros_like(alphas) if need_a else None
        gbe = torch.zeros_like(betas) if need_be else None

        def operator_grad(gbar: Tensor, coef, v: Tensor) -> None:
            """A_bar += coef * gbar v^T, spread over w, diag, keep."""
            kg = gbar if keep is None else keep * gbar
            if gw is not None:
                G.adjacency_grad_w_accumulate(gw, kg if coef is None else kg * coef, v)
            if gd is not None:
                gd.addcmul_(kg if coef is None else kg * coef, v)
            if gk is not None:
                av = _stencil(w, diag, v)
                gk.addcmul_(gbar if coef is None else gbar * coef, av)

        def adjoint_apply(gbar: Tensor) -> Tensor:
            """A^T gbar = diag * (keep gbar) - W (keep gbar)."""
            return _stencil(w, diag, gbar if keep is None else keep * gbar)

        gbar: Optional[Tensor] = None  # adjoint of g^{t+1}
        carry: Optional[Tensor] = None  # beta_{t+1} v_bar^{t+1}
        for t in range(T - 1, -1, -1):
            a = _step(alphas, t)
            v = vs[t]
            vbar = torch.mul(xbar, -a)
            if carry is not None:
                vbar.add_(carry)
            if ga is not None:
                ga[t] -= _dot(xbar, v, alphas[t])
            if gbar is not None and t + 1 < T:  # g^{t+1} = g^t - alpha_t A v^t
                u = adjoint_apply(gbar)
                vbar.addcmul_(a, u, value=-1.0)
                if ga is not None:
                    ga[t] -= _dot(u, v, alphas[t])
                operator_grad(gbar, -a, v)
            # v^t = P g^t + beta_t v^{t-1}
            pv = vbar if precond is None else precond * vbar
            if gbar is None:  # g_bar^{T-1} = P v_bar^{T-1}, a buffer of its own (v_bar is scaled below)
                gbar = pv.clone() if pv is vbar else pv
            else:
                gbar.add_(pv)
            if gp is not None:
                gp.addcmul_(vbar, gs[t])
            if t > 0:
                bt = _step(betas, t)
                if gbe is not None:
                    gbe[t] += _dot(vbar, vs[t - 1], betas[t])
                carry = vbar.mul_(bt)
        # g^0 = A x^0 - b
        assert gbar is not None
        gb = gbar.neg() if need_b else None
        gx0 = xbar + adjoint_apply(gbar) if need_x0 else None
        operator_grad(gbar, None, x0.expand(shape))
        return (None if gw is None else sum_to(gw, w.shape),
                None if gd is None else sum_to(gd, diag.shape),
                None if gk is None else sum_to(gk, keep.shape),
                None if gp is None else sum_to(gp, precond.shape),
                None if gb is None else sum_to(gb, ctx.b_shape),
                None if gx0 is None else sum_to(gx0, x0.shape),
                ga, gbe)


def cg_unrolled_adjoint(w: Tensor, diag: Tensor, keep: Optional[Tensor], b: Tensor, x0: Tensor,
                        alphas: Tensor, betas: Tensor, precond: Optional[Tensor] = None) -> Tensor:
    """:func:`~gsprestore.solvers.cg.cg_unrolled` on ``A = keep * (diag - W(w))`` as one autograd op
    whose backward is the adjoint recurrence (module docstring). ``b`` is (B, K, C, H, W); the
    other tensors broadcast against it (``w`` (B, K|1, 12, H, W)). Same value as the autograd form,
    gradients equal to rounding (tested)."""
    return _UnrolledCG.apply(w, diag, keep, precond, b, x0, alphas, betas)
