"""The training form of unrolled CG on a GPU: the forward recurrence recording its search
directions, and the adjoint recurrence of :mod:`.adjoint` (its module docstring derives it),
as fused Triton kernels: the GPU counterpart of the native CPU kernels ``cg_unrolled_record`` /
``cg_unrolled_backward``.

The forward is :func:`~.triton_kernels.cg_unrolled_triton` with every ``v^t`` written to a buffer of
its own (and ``g^t`` copied before step t when the preconditioner needs a gradient). The backward
is one kernel launch per step, t = T-1 .. 0, a last one, and one for the weights' gradient. Each
step program owns a block of pixels of one (b, k, c) plane, like the forward's. Per pixel
p of a step (y^{t+1} = keep * g_bar^{t+1}, read over the 5x5 window; u = A^T g_bar^{t+1} =
diag y - W y)::

    v_bar   = -a_t x_bar + beta_{t+1} v_bar^{t+1} - a_t u
    g_bar^t = g_bar^{t+1} + P v_bar          gd += -a_t y v^t,   gp += v_bar g^t
    partial sums of <x_bar + u, v^t> (alpha_t) and <v_bar, v^{t-1}> (beta_t) per block

with every ``y^t`` recorded; the last step launch: ``gb = -g_bar^0``, ``gx0 = x_bar + A^T
g_bar^0``, ``gd += y^0 x^0``. The weights' gradient, a sum over the steps of per-edge products
of recorded iterates, is one more kernel (:func:`_weight_grad_kernel`) that writes each entry
once, the steps and channels summed in registers::

    gw[o, p] = sum_{t < T-1} a_t sum_c (y^{t+1}_p v^t_q + y^{t+1}_q v^t_p)
               - sum_c (y^0_p x^0_q + y^0_q x^0_p)          (q = p + o, 0 where q leaves the image)

The first form folded those 12 edges' read-modify-writes into the step kernel and ran a (b, k)
plane's channels in one program: 255 registers a thread and ~1 KB of spilled stack on sm_90
(``lab/tools/triton_sm90.py`` prints every variant's registers and stack), and in the fourth GPU
window's H100 profile 53-66 % of a training step, 11x the forward's step kernel a launch.

Runs wherever Triton runs: CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1`` (how
tests/test_triton_kernels.py checks it against the PyTorch adjoint).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ...core import backend
from ...graph.triton_kernels import dense
from .triton_kernels import cg_unrolled_triton, triton

#: pixels per program of the backward's kernels: 256 keeps the step kernel at 72-90 registers a
#: thread on sm_90 with no spills (512, the forward's, takes 190-251: fewer warps resident)
BLOCK = 256

if triton is not None:
    import triton.language as tl

    from ...graph.triton_kernels import edge_of, edge_product
    from .triton_kernels import adjacency_stencil

    # the step index and the shapes are run-time values (no recompilation per step or tile shape)
    @triton.jit(do_not_specialize=["t", "C", "KW", "KH", "H", "W", "NB"])
    def _adjoint_step_kernel(w_ptr, diag_ptr, keep_ptr, pre_ptr, xbar_ptr, v_ptr, vprev_ptr, gt_ptr, x0_ptr,
                             yo_ptr, yn_ptr, gbar_ptr, vb_ptr, gd_ptr, gp_ptr, gb_ptr, gx0_ptr,
                             alpha_ptr, beta_ptr, dots_ptr, t, C, KW, KH, H, W, NB,
                             HAS_KEEP: tl.constexpr, HAS_PRE: tl.constexpr, GP: tl.constexpr, S1: tl.constexpr,
                             TPOS: tl.constexpr, FINAL: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        plane = tl.program_id(1)  # (b, k, c); axis 0: the pixel blocks (backend.pixel_grid)
        blk = tl.program_id(0)
        HW = H * W
        offs = blk * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_img = offs < HW
        i = offs // W
        j = offs % W
        k = (plane // C) % KH
        b = plane // (C * KH)
        wp = w_ptr + (b * KW + k % KW).to(tl.int64) * 12 * HW
        base = plane.to(tl.int64) * HW
        yo = yo_ptr + base
        xb = tl.load(xbar_ptr + base + offs, mask=in_img, other=0.0)
        dg = tl.load(diag_ptr + base + offs, mask=in_img, other=0.0)
        if FINAL:  # g_bar^0 in gbar, y^0 in yo
            yp = tl.load(yo + offs, mask=in_img, other=0.0)
            u = dg * yp - adjacency_stencil(wp, yo, i, j, H, W, HW, in_img, BLOCK_SIZE)
            gbar = tl.load(gbar_ptr + base + offs, mask=in_img, other=0.0)
            tl.store(gb_ptr + base + offs, -gbar, mask=in_img)
            tl.store(gx0_ptr + base + offs, xb + u, mask=in_img)
            x0 = tl.load(x0_ptr + base + offs, mask=in_img, other=0.0)
            gd = tl.load(gd_ptr + base + offs, mask=in_img, other=0.0)
            tl.store(gd_ptr + base + offs, gd + yp * x0, mask=in_img)
        else:
            a = tl.load(alpha_ptr + t * KH + k)
            v = tl.load(v_ptr + base + offs, mask=in_img, other=0.0)
            vbar = -a * xb
            dot = xb * v
            if S1:
                yp = tl.load(yo + offs, mask=in_img, other=0.0)
                u = dg * yp - adjacency_stencil(wp, yo, i, j, H, W, HW, in_img, BLOCK_SIZE)
                vbar = vbar + tl.load(vb_ptr + base + offs, mask=in_img, other=0.0) - a * u
                dot = dot + u * v
                gd = tl.load(gd_ptr + base + offs, mask=in_img, other=0.0)
                tl.store(gd_ptr + base + offs, gd - a * yp * v, mask=in_img)
            else:
                tl.store(gd_ptr + base + offs, tl.zeros([BLOCK_SIZE], dtype=tl.float32), mask=in_img)
            da = tl.sum(tl.where(in_img, dot, 0.0), axis=0)
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
                db = tl.sum(tl.where(in_img, vbar * vp, 0.0), axis=0)
            if GP:
                q = vbar * tl.load(gt_ptr + base + offs, mask=in_img, other=0.0)
                if S1:
                    q = q + tl.load(gp_ptr + base + offs, mask=in_img, other=0.0)
                tl.store(gp_ptr + base + offs, q, mask=in_img)
            tl.store(dots_ptr + (plane * NB + blk) * 2, da)
            if TPOS:
                tl.store(dots_ptr + (plane * NB + blk) * 2 + 1, db)

    # T, C and the shapes are run-time values (no recompilation per solver length or tile shape)
    @triton.jit(do_not_specialize=["T", "C", "KH", "H", "W", "TS"])
    def _weight_grad_kernel(y_ptr, v_ptr, x0_ptr, alpha_ptr, gw_ptr, T, C, KH, H, W, TS,
                            BLOCK_SIZE: tl.constexpr):
        """gw[o, p] of the module docstring at a block of pixels of one (b, k) plane: ``y`` and
        ``v`` the recorded (T, B, K, C, H, W) iterates (``TS`` = B K C H W apart), ``x0`` dense."""
        bk = tl.program_id(1)  # (b, k); axis 0: the pixel blocks (backend.pixel_grid)
        HW = H * W
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_img = offs < HW
        i = offs // W
        j = offs % W
        k = bk % KH
        gwp = gw_ptr + bk.to(tl.int64) * 12 * HW
        for kk in range(12):
            q, ok = edge_of(kk, offs, i, j, H, W, in_img)
            acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            for c in range(C):
                base = (bk * C + c).to(tl.int64) * HW
                acc -= edge_product(y_ptr + base, x0_ptr + base, offs, q, ok)
                yt = y_ptr + base  # y^{t+1} and v^t: pointers stepped by TS (no 32-bit product of t and TS)
                vt = v_ptr + base
                for t in range(T - 1):
                    yt += TS
                    acc += tl.load(alpha_ptr + t * KH + k) * edge_product(yt, vt, offs, q, ok)
                    vt += TS
            tl.store(gwp + kk * HW + offs, acc, mask=in_img)


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
    diag_d, keep_d, pre_d, x0_d = dense(diag, shape), dense(keep, shape), dense(precond, shape), dense(x0, shape)
    xbar = xbar.contiguous()
    yrec = torch.empty_like(vrec)  # y^t = keep * g_bar^t, for the weights' gradient
    gbar, vb = torch.empty_like(xbar), torch.empty_like(xbar)
    gw = xbar.new_empty(B, K, 12, H, W)  # every entry written once (0 on edges that leave the image)
    gd, gb, gx0 = torch.empty_like(xbar), torch.empty_like(xbar), torch.empty_like(xbar)
    gp = torch.empty_like(xbar) if want_gp else None
    grid = backend.pixel_grid(H * W, BLOCK, B * K * C)  # the steps: one program per block of a (b, k, c) plane
    NB = grid[0]
    dots = xbar.new_zeros(T, B * K * C, NB, 2)
    dummy = xbar

    def launch(t: int, s: int, final: bool) -> None:
        _adjoint_step_kernel[grid](
            wc, diag_d, dummy if keep_d is None else keep_d, dummy if pre_d is None else pre_d, xbar,
            vrec[t], vrec[t - 1] if t > 0 else dummy, grec[t] if (want_gp and grec is not None) else dummy, x0_d,
            yrec[0] if final else (yrec[t + 1] if s >= 1 else dummy), dummy if final else yrec[t], gbar, vb, gd,
            dummy if gp is None else gp, gb, gx0,
            al, be, dots[t] if not final else dots[0], t, C, wc.shape[1], K, H, W, NB,
            HAS_KEEP=keep_d is not None, HAS_PRE=pre_d is not None, GP=gp is not None and not final,
            S1=s >= 1, TPOS=t > 0 and not final, FINAL=final, BLOCK_SIZE=BLOCK)

    for s in range(T):
        launch(T - 1 - s, s, False)
    launch(0, T, True)
    _weight_grad_kernel[backend.pixel_grid(H * W, BLOCK, B * K)](yrec, vrec, x0_d, al, gw, T, C, K, H, W,
                                                                 B * K * C * H * W, BLOCK_SIZE=BLOCK)
    sums = dots.sum(2).view(T, B, K, C, 2).sum((1, 3))  # (T, K, 2)
    return gw, gd, gp, gb, gx0, -sums[..., 0], sums[..., 1]
