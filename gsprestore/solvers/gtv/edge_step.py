"""The fused ADMM edge step (eqs. 19, 21, 23, 24 and the edge term of the next eq. 20) in the
compact variables ``(D, u, v)`` of :func:`gsprestore.solvers.gtv.gtv_interpolate`: one custom
autograd op (:func:`admm_edge_step`, PyTorch and native forward and backward), the native
replay that keeps no edge state (:func:`edge_term_replayed`) and the node update of the
replay form (:func:`node_update`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import torch
from torch import Tensor

from ...core import backend
from ...graph import window
from ...graph import operators as G

if TYPE_CHECKING:  # pragma: no cover
    from .reference import GtvProblem

__all__ = ["admm_edge_step"]


def gamma_tensor(gamma, like: Tensor) -> Tensor:
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


def _steps_from_zero(xs: Sequence[Tensor], wbar: Tensor, g: Tensor):
    """``(D, u, v, n)`` after the edge steps of the iterates ``xs`` from the zero state (the
    stateful form, state updated in place)."""
    D = u = v = n = None
    for xh in xs:
        D, u, v, n = _edge_step_forward(xh, wbar, D, u, v, g, inplace=True)
    return D, u, v, n


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
        # the last step's state (D', u', v') feeds nothing: its gradients stay None instead of
        # three zero-filled edge tensors (the kernel and the formulas read None as zero)
        ctx.set_materialize_grads(False)
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
            D, u, v, _ = _steps_from_zero(hist, wbar, g)
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
            z = lambda t: torch.zeros_like(r) if t is None else t[:, :, :, j, ty, tx]  # noqa: E731, B023 (used in this iteration)
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
                gw[:, :, j, ty, tx].add_((ggn * e0 + gr * dx_).sum(dim=2))  # over channels; heads by sum_to below
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
    gD = gu = gv = None
    if not first:  # the kernel writes every in-image edge: only the edges leaving the image need zeros
        gD, gu, gv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (D, u, v))
        for t in (gD, gu, gv):
            window.zero_outside(t, H, W)
    gg = x.new_zeros(B * K)
    gk = g.reshape(-1).to(dtype=x.dtype).contiguous()
    backend.native().admm_edge_step_backward(x.contiguous(), wbar.contiguous(), D, u, v, gk, c(gD2), c(gu2), c(gv2),
                                        c(gn), gx, gw, gD, gu, gv, gg)
    gg = gg.view(B, K).sum(0)
    gg = gg.reshape(g.shape) if g.numel() == K else gg.sum().reshape(g.shape)  # one gamma per head, or shared
    return gx, window.sum_to(gw, wbar.shape), gD, gu, gv, gg


def admm_edge_step(x: Tensor, wbar: Tensor, D, u, v, gamma, history: Sequence[Tensor] = (), out=None):
    """One fused ADMM edge step in the compact variables (see :func:`gtv_interpolate`):
    eqs. 19, 21, 23 (``u' = relu(a + b)``, ``v' = relu(a - b)``), eq. 24 (``D' = D - gamma (2 r
    + u' - v')``) and the edge term ``n = C-bar^T (D' - gamma (u' - v')) / (2 gamma)`` of the next
    x-update (eq. 20), with ``r = C-bar x``. ``D = u = v = None`` is the zero initial state.
    Returns ``(D', u', v', n)``. A custom autograd op (saves its inputs only, or with
    ``history`` = the earlier iterates x^1..x^{t-1} that led to (D, u, v), only node tensors: the
    state is recomputed in the backward pass); without autograd the state is updated in place
    (from the zero state: written into ``out``, three edge tensors, when their shape fits)."""
    g = gamma_tensor(gamma, x)
    K = max(x.shape[1], wbar.shape[1])
    if x.shape[1] != K:
        x = x.expand(x.shape[0], K, *x.shape[2:])
    tensors = [t for t in (x, wbar, D, u, v, g) if isinstance(t, Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        hist = tuple(h.expand(h.shape[0], K, *h.shape[2:]) if h.shape[1] != K else h for h in history)
        return _AdmmEdgeStep.apply(x, wbar, D, u, v, g, *(hist if D is not None else ()))
    return _edge_step_forward(x, wbar, D, u, v, g, inplace=True, out=out)


def can_replay(x: Tensor, wbar: Tensor, gamma, steps: int) -> bool:
    """Whether :func:`edge_term_replayed` can run ``steps`` edge steps: no autograd to record,
    and native CPU kernels (at most ``backend.settings.max_replayed_steps``) or the fused Triton
    kernel on a GPU (at most :data:`~gsprestore.solvers.triton_kernels.MAX_STEPS`)."""
    tensors = [t for t in (x, wbar, gamma) if isinstance(t, Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    if backend.usable(*tensors):
        return steps <= backend.settings.max_replayed_steps
    if not backend.gpu_fused_usable(x, wbar):  # checked first: Triton is imported only where it may run
        return False
    from . import triton_kernels

    return steps <= triton_kernels.MAX_STEPS


def edge_term_replayed(xs: Sequence[Tensor], wbar: Tensor, gamma, base: Optional[Tensor] = None) -> Tensor:
    """The edge term ``n`` that :func:`admm_edge_step` returns after the iterates ``xs = (x^1, ...,
    x^S)`` from the zero state, without keeping the edge state: the native kernel replays each
    directed edge's (D, u, v) through the S steps in cache (an edge's state depends only on its
    own ``r^s = wbar (x^s_tail - x^s_head)``), so the 3 x 24 values per pixel and channel that the
    stateful form reads and writes per iteration never reach memory; the arithmetic is S steps
    instead of one. Inference with the native CPU kernels, or on a GPU with Triton
    (:mod:`.triton_kernels`; see :func:`can_replay`). ``base`` (a contiguous tensor of the full
    shape, overwritten on the CPU) is added to n: the node part of the right-hand side."""
    x = xs[-1]
    if not backend.usable(x, wbar):  # the GPU form (see can_replay)
        from .triton_kernels import edge_term_replayed_triton

        g = gamma_tensor(gamma, x)
        try:
            return edge_term_replayed_triton(xs, wbar, g, base=base)
        except Exception as exc:  # noqa: BLE001 - a Triton that cannot compile here: said once
            backend.gpu_fused_failed("ADMM kernel", exc)
            n = _steps_from_zero(xs, wbar, g)[3]  # the same term by the stateful steps
            return n if base is None else n + base
    K = max(x.shape[1], wbar.shape[1])
    shape = (x.shape[0], K, *x.shape[2:])
    gk = gamma_tensor(gamma, x).reshape(-1).to(dtype=x.dtype).contiguous()
    n = x.new_zeros(shape) if base is None else base
    xs = [h.expand(shape) for h in xs]
    if not all(backend.plane_stride(h) is not None and h.stride() == xs[0].stride() for h in xs):
        xs = [h.contiguous() for h in xs]
    if backend.plane_stride(n) is None:
        raise ValueError("the base of the replayed edge term needs planes with contiguous rows")
    return backend.native().admm_edge_replay(xs, wbar.contiguous(), gk, n)


def node_update(c: Tensor, pb: "GtvProblem", x: Tensor) -> Tensor:
    """In place ``c += m (m x - y)`` (eq. 24, block c, in ``c = H^T mu_c / gamma``); returns
    ``y - c``, the node part of eq. 20's right-hand side (one native pass where it can run)."""
    xf = x.expand(c.shape)
    if backend.plane_stride(xf) is not None and c.is_contiguous() and backend.usable(c, x, pb.mask, pb.y):
        rhs = torch.empty_like(c)
        backend.native().admm_node_update(c, backend.rows_contiguous(pb.mask), xf, backend.rows_contiguous(pb.y), rhs)
        return rhs
    c.addcmul_(pb.mask, torch.mul(pb.mask, x).sub_(pb.y))
    return torch.sub(pb.y, c)
