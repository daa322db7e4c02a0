"""Unrolled CG on a :class:`~gsprestore.solvers.cg.StencilOperator` as fused Triton kernels: the
GPU counterpart of the native CPU kernel (inference, no autograd).

Each step of the recurrence of :func:`~gsprestore.solvers.cg.cg_unrolled` (appendix "Parameters
Learning in CG")::

    A v   = keep * (diag * v - W v)            (eq. 9's / eq. 20's matrix, W from 12 undirected weights)
    x    -= alpha_t v
    g    -= alpha_t A v
    v'    = P^-1 g + beta_{t+1} v

is one kernel: each pixel reads its 5x5 window of v, its 12 own weights and the 12 weights stored
at the neighbours that point back at it, and its diag / keep / P^-1 / x / g, and writes x, g and
v' once. The unfused PyTorch path runs about 30 kernels per step (the 24 shifted multiply-adds of
``diag_minus_adjacency_apply`` and the vector updates), each a full pass over memory. ``v'`` goes
to a second buffer (the neighbours still read ``v``). The start, ``g = A x - b, v = P^-1 g``, is
the same kernel with ``v = x`` and the step sizes fixed (:func:`_start`).

Only :func:`cg_unrolled_triton` is public. It runs wherever Triton runs: CUDA tensors on a GPU, or
CPU tensors under ``TRITON_INTERPRET=1`` (how the tests check it against the PyTorch recurrence
on a machine without a GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from ...core import backend
from ...graph.triton_kernels import dense

if TYPE_CHECKING:  # pragma: no cover - the types of the optional Triton
    import triton
    import triton.language as tl
else:
    triton, tl = backend.triton_modules()  # optional (CUDA builds of PyTorch bring it); without it this path is never chosen

__all__ = ["cg_unrolled_triton"]

#: pixels per program
BLOCK = 512



if triton is not None:

    from ...graph.triton_kernels import adjacency_stencil  # W v over the 5x5 window (the training kernels use it too)

    # the step index and the shapes are run-time values: specialised (1, or divisible by 16) step 1
    # and each new tile shape would compile the kernel again
    @triton.jit(do_not_specialize=["t", "C", "KW", "KH", "H", "W"])
    def _cg_step_kernel(w_ptr, diag_ptr, keep_ptr, pre_ptr, v_ptr, x_ptr, g_ptr, vn_ptr, b_ptr,
                        alpha_ptr, beta_ptr, t, C, KW, KH, H, W,
                        HAS_KEEP: tl.constexpr, HAS_PRE: tl.constexpr, START: tl.constexpr,
                        LAST: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        plane = tl.program_id(1)  # (b, k, c) flattened; axis 0: the pixel blocks (backend.pixel_grid)
        HW = H * W
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_img = offs < HW
        k = (plane // C) % KH
        base = plane.to(tl.int64) * HW
        v = tl.load(v_ptr + base + offs, mask=in_img, other=0.0)
        if LAST:  # the last step only moves x (its gradient update is never read)
            a = tl.load(alpha_ptr + t * KH + k)
            x = tl.load(x_ptr + base + offs, mask=in_img, other=0.0)
            tl.store(x_ptr + base + offs, x - a * v, mask=in_img)
        else:
            i = offs // W
            j = offs % W
            b = plane // (C * KH)
            wp = w_ptr + (b * KW + k % KW).to(tl.int64) * 12 * HW  # one graph per head, or shared (KW = 1)
            vp = v_ptr + base
            acc = adjacency_stencil(wp, vp, i, j, H, W, HW, in_img, BLOCK_SIZE)
            av = tl.load(diag_ptr + base + offs, mask=in_img, other=0.0) * v - acc
            if HAS_KEEP:
                av = av * tl.load(keep_ptr + base + offs, mask=in_img, other=0.0)
            if START:  # v holds x^0: g = A x^0 - b, v^0 = P^-1 g
                g = av - tl.load(b_ptr + base + offs, mask=in_img, other=0.0)
                vn = g
                if HAS_PRE:
                    vn = vn * tl.load(pre_ptr + base + offs, mask=in_img, other=0.0)
            else:  # x -= a v, g -= a A v, v' = P^-1 g + beta_{t+1} v
                a = tl.load(alpha_ptr + t * KH + k)
                x = tl.load(x_ptr + base + offs, mask=in_img, other=0.0)
                tl.store(x_ptr + base + offs, x - a * v, mask=in_img)
                g = tl.load(g_ptr + base + offs, mask=in_img, other=0.0) - a * av
                vn = g
                if HAS_PRE:
                    vn = vn * tl.load(pre_ptr + base + offs, mask=in_img, other=0.0)
                vn = vn + tl.load(beta_ptr + (t + 1) * KH + k) * v
            tl.store(g_ptr + base + offs, g, mask=in_img)
            tl.store(vn_ptr + base + offs, vn, mask=in_img)


def cg_unrolled_triton(w: Tensor, diag: Tensor, keep: Optional[Tensor], b: Tensor, x0: Tensor, alphas: Tensor,
                       betas: Tensor, precond: Optional[Tensor] = None, *, record: bool = False,
                       record_g: bool = False):
    """:func:`~gsprestore.solvers.cg.cg_unrolled` of ``v -> keep * (diag * v - W v)`` without
    autograd, float32: ``w`` (B, K|1, 12, H, W) undirected weights (zero on edges that leave the
    image), ``diag``/``keep``/``precond`` (``P^-1``) broadcasting to ``b``'s (B, K, C, H, W),
    ``alphas``/``betas`` (T,) or (T, K). Returns x^T. ``T + 1`` kernel launches. ``record`` (the
    training forward, :mod:`.triton_adjoint`): every ``v^t`` into a buffer of its own, and with
    ``record_g`` every ``g^t``; returns ``(x^T, v (T, B, K, C, H, W), g or None)``."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    if b.dtype != torch.float32:
        raise ValueError(f"the Triton CG runs in float32, got {b.dtype}")
    B, K, C, H, W = b.shape
    T = alphas.shape[0]
    wc = w.contiguous()
    diag_d, keep_d, pre_d = dense(diag, b.shape), dense(keep, b.shape), dense(precond, b.shape)
    bc = b.contiguous()
    x = x0.expand(b.shape).clone(memory_format=torch.contiguous_format)
    g, v, v2 = torch.empty_like(bc), torch.empty_like(bc), torch.empty_like(bc)
    al = alphas.detach().to(torch.float32).reshape(T, -1).expand(T, K).contiguous()
    be = betas.detach().to(torch.float32).reshape(T, -1).expand(T, K).contiguous()
    grid = backend.pixel_grid(H * W, BLOCK, B * K * C)
    dummy = bc  # stands in for absent optional tensors (never read: the constexpr flags skip them)

    def launch(vin: Tensor, vout: Tensor, t: int, start: bool, last: bool) -> None:
        _cg_step_kernel[grid](wc, diag_d, dummy if keep_d is None else keep_d, dummy if pre_d is None else pre_d,
                              vin, x, g, vout, bc, al, be, t, C, wc.shape[1], K, H, W,
                              HAS_KEEP=keep_d is not None, HAS_PRE=pre_d is not None, START=start, LAST=last,
                              BLOCK_SIZE=BLOCK)

    if record:
        vrec = bc.new_empty((T,) + tuple(b.shape))
        grec = bc.new_empty((T,) + tuple(b.shape)) if record_g else None
        launch(x, vrec[0], 0, True, False)
        for t in range(T):
            if grec is not None:
                grec[t].copy_(g)
            launch(vrec[t], vrec[t + 1] if t + 1 < T else v, t, False, t + 1 == T)
        return x, vrec, grec
    launch(x, v, 0, True, False)  # g = A x0 - b, v = P^-1 g
    bufs = (v, v2)
    for t in range(T):
        launch(bufs[t % 2], bufs[(t + 1) % 2], t, False, t + 1 == T)
    return x
