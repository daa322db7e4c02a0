"""The training form of unrolled CG on a GPU: the forward recurrence recording its search
directions, and the adjoint recurrence of :mod:`.cg_adjoint` (its module docstring derives it),
as fused Triton kernels: the GPU counterpart of the native CPU kernels ``cg_unrolled_record`` /
``cg_unrolled_backward``.

The forward is :func:`~.cg_triton.cg_unrolled_triton` with every ``v^t`` written to a buffer of
its own (and ``g^t`` copied before step t when the preconditioner needs a gradient). The backward
is one kernel launch per step, t = T-1 .. 0, and a last one; each program owns a block of pixels
of one (b, k) plane and runs its channels in turn, so the weights' gradient (summed over the
channels) has one writer per entry. Per pixel p of a step (y = keep * g_bar^{t+1}, read over the
5x5 window; u = A^T g_bar^{t+1} = diag y - W y)::

    v_bar   = -a_t x_bar + beta_{t+1} v_bar^{t+1} - a_t u
    g_bar^t = g_bar^{t+1} + P v_bar          gd += -a_t y v^t,   gp += v_bar g^t
    gw[o, p] -= -a_t (y_p v^t_q + y_q v^t_p)   for the 12 edges (p, q = p + o) stored at p
    partial sums of <x_bar + u, v^t> (alpha_t) and <v_bar, v^{t-1}> (beta_t) per block

and the last launch: ``gb = -g_bar^0``, ``gx0 = x_bar + A^T g_bar^0``, ``gd += y x^0``,
``gw -= y_p x^0_q + y_q x^0_p``. Runs wherever Triton runs: CUDA tensors, or CPU tensors under
``TRITON_INTERPRET=1`` (how tests/test_triton_kernels.py checks it against the PyTorch adjoint).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import backend
from ..graph_triton import _dense
from .cg_triton import BLOCK, cg_unrolled_triton, triton

if triton is not None:
    import triton.language as tl

    from .cg_triton import _stencil

    @triton.jit
    def _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, DY: tl.constexpr,
                   DX: tl.constexpr, KK: tl.constexpr):
        """gw[KK, p] -= coef (y_p x_q + y_q x_p), q = p + o, on the edges inside the image."""
        fi = i + DY
        fj = j + DX
        fwd = in_img & (fi >= 0) & (fi < H) & (fj >= 0) & (fj < W)
        yq = tl.load(y_ptr + fi * W + fj, mask=fwd, other=0.0)
        xq = tl.load(x_ptr + fi * W + fj, mask=fwd, other=0.0)
        old = tl.load(gw_ptr + KK * HW + i * W + j, mask=fwd, other=0.0)
        tl.store(gw_ptr + KK * HW + i * W + j, old - coef * (yp * xq + yq * xp), mask=fwd)

    @triton.jit
    def _edge_grads(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img):
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 0, 1, 0)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 0, 2, 1)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 1, -2, 2)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 1, -1, 3)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 1, 0, 4)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 1, 1, 5)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 1, 2, 6)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 2, -2, 7)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 2, -1, 8)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 2, 0, 9)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 2, 1, 10)
        _edge_grad(gw_ptr, y_ptr, x_ptr, yp, xp, coef, i, j, H, W, HW, in_img, 2, 2, 11)

    # the step index and the shapes are run-time values (no recompilation per step or tile shape)
    @triton.jit(do_not_specialize=["t", "C", "KW", "KH", "H", "W", "NB"])
    def _adjoint_step_kernel(w_ptr, diag_ptr, keep_ptr, pre_ptr, xbar_ptr, v_ptr, vprev_ptr, gt_ptr, x0_ptr,
                             yo_ptr, yn_ptr, gbar_ptr, vb_ptr, gw_ptr, gd_ptr, gp_ptr, gb_ptr, gx0_ptr,
                             alpha_ptr, beta_ptr, dots_ptr, t, C, KW, KH, H, W, NB,
                             HAS_KEEP: tl.constexpr, HAS_PRE: tl.constexpr, GP: tl.constexpr, S1: tl.constexpr,
                             TPOS: tl.constexpr, FINAL: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        bk = tl.program_id(1)  # (b, k); axis 0: the pixel blocks (backend.pixel_grid)
        blk = tl.program_id(0)
        HW = H * W
        offs = blk * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_img = offs < HW
        i = offs // W
        j = offs % W
        k = bk % KH
        b = bk // KH
        wp = w_ptr + (b * KW + k % KW).to(tl.int64) * 12 * HW
        gwp = gw_ptr + bk.to(tl.int64) * 12 * HW
        da = tl.sum(tl.zeros([BLOCK_SIZE], dtype=tl.float32), axis=0)
        db = tl.sum(tl.zeros([BLOCK_SIZE], dtype=tl.float32), axis=0)
        for c in range(C):
            base = (bk * C + c).to(tl.int64) * HW
            yo = yo_ptr + base
            xb = tl.load(xbar_ptr + base + offs, mask=in_img, other=0.0)
            dg = tl.load(diag_ptr + base + offs, mask=in_img, other=0.0)
            if FINAL:  # g_bar^0 in gbar, y^0 in yo
                yp = tl.load(yo + offs, mask=in_img, other=0.0)
                u = dg * yp - _stencil(wp, yo, i, j, H, W, HW, in_img, BLOCK_SIZE)
                gbar = tl.load(gbar_ptr + base + offs, mask=in_img, other=0.0)
                tl.store(gb_ptr + base + offs, -gbar, mask=in_img)
                tl.store(gx0_ptr + base + offs, xb + u, mask=in_img)
                x0 = tl.load(x0_ptr + base + offs, mask=in_img, other=0.0)
                gd = tl.load(gd_ptr + base + offs, mask=in_img, other=0.0)
                tl.store(gd_ptr + base + offs, gd + yp * x0, mask=in_img)
                _edge_grads(gwp, yo, x0_ptr + base, yp, x0, 1.0, i, j, H, W, HW, in_img)
            else:
                a = tl.load(alpha_ptr + t * KH + k)
                v = tl.load(v_ptr + base + offs, mask=in_img, other=0.0)
                vbar = -a * xb
                dot = xb * v
                if S1:
                    yp = tl.load(yo + offs, mask=in_img, other=0.0)
                    u = dg * yp - _stencil(wp, yo, i, j, H, W, HW, in_img, BLOCK_SIZE)
                    vbar = vbar + tl.load(vb_ptr + base + offs, mask=in_img, other=0.0) - a * u
                    dot = dot + u * v
                    gd = tl.load(gd_ptr + base + offs, mask=in_img, other=0.0)
                    tl.store(gd_ptr + base + offs, gd - a * yp * v, mask=in_img)
                    _edge_grads(gwp, yo, v_ptr + base, yp, v, -a, i, j, H, W, HW, in_img)
                else:
                    tl.store(gd_ptr + base + offs, tl.zeros([BLOCK_SIZE], dtype=tl.float32), mask=in_img)
                da += tl.sum(tl.where(in_img, dot, 0.0), axis=0)
                pv = vbar
                if HAS_PRE:
                    pv = pv * tl.load(pre_ptr + base + offs, mask=in_img, other=0.0)
                gn = pv
                if S1:
                    gn = gn + tl.load(gbar_ptr + base + offs, mask=in_img, other=0.0)
                tl.store(gbar_ptr + base + offs, gn, mask=in_img)
                yn = gn
                if HAS_KEEP:
                    yn = yn * tl.load(keep_ptr + base + offs, mask=in_img, other=0.0)
                tl.store(yn_ptr + base + offs, yn, mask=in_img)
                if TPOS:
                    bt = tl.load(beta_ptr + t * KH + k)
                    tl.store(vb_ptr + base + offs, bt * vbar, mask=in_img)
                    vp = tl.load(vprev_ptr + base + offs, mask=in_img, other=0.0)
                    db += tl.sum(tl.where(in_img, vbar * vp, 0.0), axis=0)
                if GP:
                    q = vbar * tl.load(gt_ptr + base + offs, mask=in_img, other=0.0)
                    if S1:
                        q = q + tl.load(gp_ptr + base + offs, mask=in_img, other=0.0)
                    tl.store(gp_ptr + base + offs, q, mask=in_img)
        if not FINAL:
            tl.store(dots_ptr + (bk * NB + blk) * 2, da)
            tl.store(dots_ptr + (bk * NB + blk) * 2 + 1, db)


def forward_recorded(w: Tensor, diag: Tensor, keep: Optional[Tensor], precond: Optional[Tensor], b: Tensor,
                     x0: Tensor, alphas: Tensor, betas: Tensor, need_pre: bool):
    """(x^T, v (T, B, K, C, H, W), g or None): the Triton forward recording every step."""
    return cg_unrolled_triton(w, diag, keep, b, x0, alphas, betas, precond, record=True, record_g=need_pre)


def backward(w: Tensor, diag: Tensor, keep: Optional[Tensor], precond: Optional[Tensor], vrec: Tensor,
             grec: Optional[Tensor], x0: Tensor, xbar: Tensor, al: Tensor, be: Tensor, want_gp: bool):
    """The adjoint recurrence for the step sizes ``al``/``be`` (contiguous (T, K) tables):
    (gw (B, K, 12, H, W), gd, gp or None, gb, gx0 (B, K, C, H, W), ga (T, K), gbe (T, K)),
    float32; ``keep`` gets no gradient."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    T, B, K, C, H, W = vrec.shape
    shape = (B, K, C, H, W)
    wc = w.contiguous()
    diag_d, keep_d, pre_d, x0_d = _dense(diag, shape), _dense(keep, shape), _dense(precond, shape), _dense(x0, shape)
    xbar = xbar.contiguous()
    ys = (torch.empty_like(xbar), torch.empty_like(xbar))
    gbar, vb = torch.empty_like(xbar), torch.empty_like(xbar)
    gw = xbar.new_zeros(B, K, 12, H, W)  # the steps add their terms on the edges inside the image
    gd, gb, gx0 = torch.empty_like(xbar), torch.empty_like(xbar), torch.empty_like(xbar)
    gp = torch.empty_like(xbar) if want_gp else None
    grid = backend.pixel_grid(H * W, BLOCK, B * K)
    NB = grid[0]
    dots = xbar.new_zeros(T, B * K, NB, 2)
    dummy = xbar

    def launch(t: int, s: int, final: bool) -> None:
        _adjoint_step_kernel[grid](
            wc, diag_d, dummy if keep_d is None else keep_d, dummy if pre_d is None else pre_d, xbar,
            vrec[t], vrec[t - 1] if t > 0 else dummy, grec[t] if (want_gp and grec is not None) else dummy, x0_d,
            ys[(s + 1) % 2], ys[s % 2], gbar, vb, gw, gd, dummy if gp is None else gp, gb, gx0,
            al, be, dots[t] if not final else dots[0], t, C, wc.shape[1], K, H, W, NB,
            HAS_KEEP=keep_d is not None, HAS_PRE=pre_d is not None, GP=gp is not None and not final,
            S1=s >= 1, TPOS=t > 0 and not final, FINAL=final, BLOCK_SIZE=BLOCK)

    for s in range(T):
        launch(T - 1 - s, s, False)
    launch(0, T, True)
    sums = dots.sum(2).view(T, B, K, 2).sum(1)  # (T, K, 2)
    return gw, gd, gp, gb, gx0, -sums[..., 0], sums[..., 1]
