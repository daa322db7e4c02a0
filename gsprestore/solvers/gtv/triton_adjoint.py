"""The training form of the ADMM edge term on a GPU: the edge steps from the zero state through
the iterates ``x^0 .. x^{S-1}`` (eqs. 19, 21, 23, 24) and the edge part of the next x-update's
right-hand side (eq. 20), as one autograd op (:func:`edge_term`) whose forward is the fused
replay kernel of :mod:`.triton_kernels` and whose backward is one fused kernel
(:func:`backward`): the GPU counterpart of the native ``admm_edge_step_backward``, without the
three edge tensors of 24 planes per channel (D, u, v) that the stateful form
(:func:`~gsprestore.solvers.edge_step.admm_edge_step`) writes, saves and reads back.

One directed edge (tail t, head h, random-walk weight w, ``d^s = x^s_t - x^s_h``, ``r^s = w d^s``)
evolves on its own from ``D = u = v = 0`` (the compact variables of
:func:`~gsprestore.solvers.gtv.gtv_interpolate`)::

    a = (u + v)/2 - 1/(2 gamma)            b = (D/gamma + u - v)/4 - r/2
    u' = relu(a + b)    v' = relu(a - b)   D' = D - gamma (2 r + u' - v')

and after the last step contributes ``e = w e0``, ``e0 = D'/(2 gamma) - (u' - v')/2``, to
``n_t`` and ``-e`` to ``n_h``. Its adjoint, given ``ge = gn_t - gn_h``, runs the steps backwards
(the state before each step recomputed from the zero state in registers: S is at most
:data:`~.triton_kernels.MAX_STEPS`)::

    last step:  gD' += w ge/(2 gamma),   g(u'-v') = -w ge/2,   gw += ge e0
    gU = gu' + g(u'-v') - gamma gD'      gV = gv' - g(u'-v') + gamma gD'
    s1 = gU [a + b > 0]   s2 = gV [a - b > 0]   ga = s1 + s2   gb = s1 - s2
    gr = -2 gamma gD' - gb/2             gD = gD' + gb/(4 gamma)
    gu = ga/2 + gb/4                     gv = ga/2 - gb/4
    gx^s_t += w gr,  gx^s_h -= w gr,     gw += gr d^s,
    ggamma += -gD'(2 r + u' - v') + ga/(2 gamma^2) - gb D/(4 gamma^2) [- w ge D'/(2 gamma^2), last]

(the formulas of ``_AdmmEdgeStep._grads``). Each program owns a block of pixels of one (b, k)
plane and runs its channels in turn; a pixel p evaluates the four directed edges of each of the
12 offsets that touch it (the pair (p, p + o) and the pair (p - o, p), each both ways), so every
edge is evaluated at both its ends, no gradient of ``x`` needs atomics, and the weights'
gradient ``gw[j]`` (stored at the edge's tail, like ``wbar``) and gamma's have one writer per
entry. Runs wherever Triton runs: CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``
(how tests/test_triton_kernels.py checks it against the stateful PyTorch steps)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ...core import backend
from ...graph import window
from .triton_kernels import BLOCK, MAX_STEPS, edge_term_replayed_triton, triton

__all__ = ["usable", "edge_term", "backward"]

if triton is not None:
    import triton.language as tl

    from ...graph.triton_kernels import window_offset

    @triton.jit
    def _step(D, u, v, r, g, inv, hinv):
        """One edge step (eqs. 19, 21, 23, 24 in the compact variables): (D', u', v')."""
        a = 0.5 * (u + v) - hinv
        b = 0.25 * (D * inv + u - v) - 0.5 * r
        U = tl.maximum(a + b, 0.0)
        V = tl.maximum(a - b, 0.0)
        return D - g * (2.0 * r + U - V), U, V

    @triton.jit
    def _edge_adjoint(xp, N, ti, tj, hi_, hj, W, ok, w, ge, g, s_out, S, BLOCK_SIZE: tl.constexpr):
        """The adjoint of one directed edge (tail (ti, tj), head (hi_, hj), weight w) down to step
        ``s_out`` (module docstring): (gr, d, ggamma, ge e0) of that step, the last term 0 unless
        ``s_out`` is the last step. ``xp`` points at the plane of x^0, x^s is ``s N`` further."""
        inv = 1.0 / g
        hinv = 0.5 * inv
        zero = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        gD = zero
        gu = zero
        gv = zero
        gr_o = zero
        d_o = zero
        gg_o = zero
        gwe_o = zero
        for i in range(S - s_out):
            s = S - 1 - i
            D = zero
            u = zero
            v = zero
            for k in range(s):  # the state before step s, from the zero state
                dk = (tl.load(xp + k * N + ti * W + tj, mask=ok, other=0.0)
                      - tl.load(xp + k * N + hi_ * W + hj, mask=ok, other=0.0))
                D, u, v = _step(D, u, v, w * dk, g, inv, hinv)
            d = tl.load(xp + s * N + ti * W + tj, mask=ok, other=0.0) - tl.load(xp + s * N + hi_ * W + hj, mask=ok,
                                                                                  other=0.0)
            r = w * d
            a = 0.5 * (u + v) - hinv
            b = 0.25 * (D * inv + u - v) - 0.5 * r
            diff = tl.maximum(a + b, 0.0) - tl.maximum(a - b, 0.0)
            Dn = D - g * (2.0 * r + diff)
            last = s == S - 1
            gew = ge * w
            gDn = gD + tl.where(last, gew * hinv, 0.0)
            gdiff = tl.where(last, -0.5 * gew, 0.0)
            s1 = tl.where(a + b > 0, gu + gdiff - g * gDn, 0.0)
            s2 = tl.where(a - b > 0, gv - gdiff + g * gDn, 0.0)
            ga = s1 + s2
            gb = s1 - s2
            gr_o = -2.0 * g * gDn - 0.5 * gb
            d_o = d
            gg_o = (-gDn * (2.0 * r + diff) + ga * hinv * inv - 0.25 * gb * D * inv * inv
                    - tl.where(last, gew * Dn * hinv * inv, 0.0))
            gwe_o = tl.where(last, ge * (Dn * hinv - 0.5 * diff), 0.0)
            gD = gDn + 0.25 * gb * inv
            gu = 0.5 * ga + 0.25 * gb
            gv = 0.5 * ga - 0.25 * gb
        return gr_o, d_o, gg_o, gwe_o

    # the shapes are run-time values (specialised, each new tile shape would compile again)
    @triton.jit(do_not_specialize=["N", "C", "KW", "KH", "KG", "H", "W", "S"])
    def _edge_adjoint_kernel(xs_ptr, w_ptr, g_ptr, gn_ptr, gx_ptr, gw_ptr, gg_ptr, N, C, KW, KH, KG, H, W, S,
                             BLOCK_SIZE: tl.constexpr):
        blk = tl.program_id(0)  # the pixel blocks on axis 0 (backend.pixel_grid), the (b, k) planes on 1
        bk = tl.program_id(1)
        HW = H * W
        offs = blk * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_img = offs < HW
        i = offs // W
        j = offs % W
        k = bk % KH
        b = bk // KH
        wp = w_ptr + (b * KW + k % KW).to(tl.int64) * 24 * HW
        gwp = gw_ptr + bk.to(tl.int64) * 24 * HW
        g = tl.load(g_ptr + k % KG)
        ggacc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for c in range(C):
            plane = (bk * C + c).to(tl.int64) * HW
            xp = xs_ptr + plane
            gnp = gn_ptr + plane
            gn_p = tl.load(gnp + offs, mask=in_img, other=0.0)
            for s_out in range(S):
                acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
                for kk in range(12):  # graph.OFFSETS in order
                    dy, dx = window_offset(kk)
                    # the pair (p, q = p + o): p -> q (weight at p, kk) and q -> p (weight at q, kk + 12)
                    qi = i + dy
                    qj = j + dx
                    ok_a = in_img & (qi >= 0) & (qi < H) & (qj >= 0) & (qj < W)
                    gn_q = tl.load(gnp + qi * W + qj, mask=ok_a, other=0.0)
                    wf = tl.load(wp + kk * HW + offs, mask=ok_a, other=0.0)
                    wr = tl.load(wp + (kk + 12) * HW + qi * W + qj, mask=ok_a, other=0.0)
                    gr_f, d_f, gg_f, gwe_f = _edge_adjoint(xp, N, i, j, qi, qj, W, ok_a, wf, gn_p - gn_q, g, s_out, S,
                                                           BLOCK_SIZE)
                    gr_r, _d, _g, _e = _edge_adjoint(xp, N, qi, qj, i, j, W, ok_a, wr, gn_q - gn_p, g, s_out, S,
                                                     BLOCK_SIZE)
                    acc += wf * gr_f - wr * gr_r
                    # the pair (m = p - o, p): m -> p (weight at m, kk) and p -> m (weight at p, kk + 12)
                    mi = i - dy
                    mj = j - dx
                    ok_b = in_img & (mi >= 0) & (mi < H) & (mj >= 0) & (mj < W)
                    gn_m = tl.load(gnp + mi * W + mj, mask=ok_b, other=0.0)
                    wf2 = tl.load(wp + kk * HW + mi * W + mj, mask=ok_b, other=0.0)
                    wr2 = tl.load(wp + (kk + 12) * HW + offs, mask=ok_b, other=0.0)
                    gr_f2, _d2, _g2, _e2 = _edge_adjoint(xp, N, mi, mj, i, j, W, ok_b, wf2, gn_m - gn_p, g, s_out, S,
                                                         BLOCK_SIZE)
                    gr_r2, d_r2, gg_r2, gwe_r2 = _edge_adjoint(xp, N, i, j, mi, mj, W, ok_b, wr2, gn_p - gn_m, g, s_out,
                                                               S, BLOCK_SIZE)
                    acc += wr2 * gr_r2 - wf2 * gr_f2
                    # the two edges whose tail is p: their weights' and gamma's gradients
                    old = tl.load(gwp + kk * HW + offs, mask=in_img, other=0.0)
                    tl.store(gwp + kk * HW + offs, old + tl.where(ok_a, gr_f * d_f + gwe_f, 0.0), mask=in_img)
                    old = tl.load(gwp + (kk + 12) * HW + offs, mask=in_img, other=0.0)
                    tl.store(gwp + (kk + 12) * HW + offs, old + tl.where(ok_b, gr_r2 * d_r2 + gwe_r2, 0.0),
                             mask=in_img)
                    ggacc += tl.where(ok_a, gg_f, 0.0) + tl.where(ok_b, gg_r2, 0.0)
                tl.store(gx_ptr + s_out * N + plane + offs, acc, mask=in_img)
        tl.store(gg_ptr + bk * tl.num_programs(0) + blk, tl.sum(ggacc, axis=0))


def usable(x: Tensor, wbar: Tensor, gamma, steps: int) -> bool:
    """Whether a training step's edge terms (``steps`` edge steps per solve) take this path:
    autograd records, the tensors are where the fused Triton kernels run
    (:func:`~gsprestore.core.backend.gpu_fused_usable`, and not where the native CPU kernels do),
    ``backend.settings.gpu_training`` is on and ``steps`` is at most :data:`~.triton_kernels.MAX_STEPS`."""
    tensors = [t for t in (x, wbar, gamma) if isinstance(t, Tensor)]
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return False
    if triton is None or not backend.settings.gpu_training or not 1 <= steps <= MAX_STEPS or backend.usable(x, wbar):
        return False
    return backend.gpu_fused_usable(x, wbar)


def _stateful(xs: Sequence[Tensor], wbar: Tensor, g: Tensor) -> Tensor:
    """The same term by the stateful edge steps from the zero state (the PyTorch path; recorded by
    autograd where the inputs require it)."""
    from .edge_step import admm_edge_step

    D = u = v = None
    for t, x in enumerate(xs):
        D, u, v, n = admm_edge_step(x, wbar, D, u, v, g, xs[:t])
    return n


class _EdgeTerm(torch.autograd.Function):
    """(wbar, gamma, x^0 .. x^{S-1}) -> n, the edge term of eq. 20 after the S edge steps from the
    zero state: forward by the fused replay kernel, backward by :func:`backward`; saves only its
    inputs (node tensors and the weights)."""

    @staticmethod
    def forward(ctx, wbar, g, *xs):  # type: ignore[override]
        ctx.save_for_backward(wbar, g, *xs)
        return edge_term_replayed_triton(xs, wbar, g)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gn):  # type: ignore[override]
        wbar, g, *xs = ctx.saved_tensors
        if backend.gpu_fused_usable(gn):
            try:
                gxs, gw, gg = backward(xs, wbar, g, gn)
                return (gw, gg, *gxs)
            except Exception as exc:  # noqa: BLE001 - a Triton that cannot compile here: said once
                backend.gpu_fused_failed("ADMM edge training kernel", exc)
        leaves = [t.detach().requires_grad_(need) for t, need in zip((wbar, g, *xs), ctx.needs_input_grad)]
        with torch.enable_grad():
            n = _stateful(leaves[2:], leaves[0], leaves[1])
            want = [t for t in leaves if t.requires_grad]
            got = iter(torch.autograd.grad(n, want, gn, allow_unused=True))
        return tuple(next(got) if t.requires_grad else None for t in leaves)


def edge_term(xs: Sequence[Tensor], wbar: Tensor, g: Tensor) -> Tensor:
    """``n``, the edge part of eq. 20's right-hand side after the edge steps of the iterates
    ``xs`` (each (B, K|1, C, H, W), 1 to MAX_STEPS of them) from the zero state, on the
    random-walk weights ``wbar`` (B, K|1, 24, H, W), ``g`` gamma as a tensor (a scalar, or one per
    head shaped (1, K, 1, 1, 1)); differentiable in all of them (:class:`_EdgeTerm`). If the
    fused forward fails, says so once and returns the stateful PyTorch form."""
    K = max(wbar.shape[1], *(x.shape[1] for x in xs))
    shape = (xs[-1].shape[0], K, *xs[-1].shape[2:])
    xs = [x.expand(shape) for x in xs]  # autograd sums the heads of a shared x
    gt = g if g.dim() else g.reshape(1)
    try:
        n = _EdgeTerm.apply(wbar, gt, *xs)
    except Exception as exc:  # noqa: BLE001 - a Triton that cannot compile here: said once
        backend.gpu_fused_failed("ADMM edge training kernel", exc)
        return _stateful(xs, wbar, g)
    return n


def backward(xs: Sequence[Tensor], wbar: Tensor, g: Tensor, gn: Tensor):
    """The gradients of ``sum(gn * n)`` (n = the term of :func:`edge_term`) with respect to each
    iterate, the weights ``wbar`` (summed to its shape) and gamma (summed to ``g``'s shape), by
    :func:`_edge_adjoint_kernel`: (gxs, gw, gg), float32."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    S = len(xs)
    B, K, C, H, W = xs[-1].shape
    N = B * K * C * H * W
    xs_c = torch.stack([x.expand(B, K, C, H, W) for x in xs]).contiguous()
    wc = wbar.contiguous()
    gk = g.reshape(-1).to(torch.float32).contiguous()
    gx = torch.empty_like(xs_c)
    gw = torch.zeros(B, K, 24, H, W, dtype=torch.float32, device=wc.device)
    grid = backend.pixel_grid(H * W, BLOCK, B * K)
    gg = torch.empty(B * K, grid[0], dtype=torch.float32, device=wc.device)
    _edge_adjoint_kernel[grid](xs_c, wc, gk, gn.contiguous(), gx, gw, gg, N, C, wc.shape[1], K, gk.numel(), H, W, S,
                               BLOCK_SIZE=BLOCK)
    ggk = gg.sum(1).view(B, K).sum(0)
    ggk = ggk.reshape(g.shape) if g.numel() == K else ggk.sum().reshape(g.shape)
    return list(gx.unbind(0)), window.sum_to(gw, wbar.shape), ggk
