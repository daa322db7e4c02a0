"""The ADMM edge term replayed without edge state (:func:`~gsprestore.solvers.edge_step.edge_term_replayed`)
as a fused Triton kernel: the GPU counterpart of the native replay (inference, float32).

After the iterates ``x^1 .. x^S`` from the zero state, the right-hand side of the next x-update
(eq. 20) needs ``n = C-bar^T e`` with ``e`` each directed edge's ``wbar (D'/(2 gamma) - (u' - v')/2)``;
an edge's state (D, u, v) depends only on its own ``r^s = wbar (x^s_tail - x^s_head)`` (eqs. 19,
21, 23, 24), so it is replayed through the S steps in registers (the scaled form of the native
``replay_step``: ``ps = u + v``, ``ms = u - v``, ``dl = D / (4 gamma)``). The stateful PyTorch form
(:func:`~gsprestore.solvers.edge_step.admm_edge_step`) writes and reads three edge tensors of 24
planes per channel instead. Each pixel gathers: ``n_p = sum_k e_k(p) - sum_k e_k(p - o_k)`` over
the 12 undirected offsets, where ``e_k(p)`` is the term of the edge pair (p -> p + o_k, p + o_k ->
p); the pair's terms are computed twice (once at each end), so no atomics are needed.

Runs where Triton runs: CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1`` (the tests)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
from torch import Tensor

from ...core import backend

if TYPE_CHECKING:  # pragma: no cover - the types of the optional Triton
    import triton
    import triton.language as tl
else:
    triton, tl = backend.triton_modules()  # (None, None) without Triton: no kernel is defined below
if triton is not None:
    from ...graph.triton_kernels import window_offset

__all__ = ["MAX_STEPS", "edge_term_replayed_triton"]

BLOCK = 256
#: the most iterates one call replays (the shipped models need 1: two ADMM iterations)
MAX_STEPS = 4



if triton is not None:

    @triton.jit
    def _replay_step(ps, ms, dl, rho, hi):
        """One edge step in the scaled variables (kernels.cpp ``replay_step``; rho = r / 2)."""
        c = dl - rho
        a = 0.5 * ps - hi
        b = c + 0.25 * ms
        p = tl.abs(a + b)
        q = tl.abs(a - b)
        ps = a + 0.5 * (p + q)
        ms = b + 0.5 * (p - q)
        dl = c - 0.25 * ms
        return ps, ms, dl

    @triton.jit
    def _pair_step(psf, msf, dlf, psr, msr, dlr, x_ptr, pi, pj, qi, qj, W, ok, hf, hr, hi):
        """Both directions of a pair one step on, for one iterate x (d = x_p - x_q)."""
        d = tl.load(x_ptr + pi * W + pj, mask=ok, other=0.0) - tl.load(x_ptr + qi * W + qj, mask=ok, other=0.0)
        psf, msf, dlf = _replay_step(psf, msf, dlf, hf * d, hi)
        psr, msr, dlr = _replay_step(psr, msr, dlr, hr * d, hi)
        return psf, msf, dlf, psr, msr, dlr

    @triton.jit
    def _pair_term(x1, x2, x3, x4, wp, pi, pj, dy, dx, kk, H, W, HW, valid, hi, S: tl.constexpr,
                   BLOCK_SIZE: tl.constexpr):
        """e_kk(p) of the edge pair (p -> q, q -> p), q = p + (dy, dx), at pixels p = (pi, pj)."""
        qi = pi + dy
        qj = pj + dx
        ok = valid & (pi >= 0) & (pi < H) & (pj >= 0) & (pj < W) & (qi >= 0) & (qi < H) & (qj >= 0) & (qj < W)
        wf = tl.load(wp + kk * HW + pi * W + pj, mask=ok, other=0.0)
        wr = tl.load(wp + (kk + 12) * HW + qi * W + qj, mask=ok, other=0.0)
        hf = 0.5 * wf
        hr = -0.5 * wr
        z = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        psf, msf, dlf, psr, msr, dlr = _pair_step(z, z, z, z, z, z, x1, pi, pj, qi, qj, W, ok, hf, hr, hi)
        if S > 1:
            psf, msf, dlf, psr, msr, dlr = _pair_step(psf, msf, dlf, psr, msr, dlr, x2, pi, pj, qi, qj, W, ok, hf, hr, hi)
        if S > 2:
            psf, msf, dlf, psr, msr, dlr = _pair_step(psf, msf, dlf, psr, msr, dlr, x3, pi, pj, qi, qj, W, ok, hf, hr, hi)
        if S > 3:
            psf, msf, dlf, psr, msr, dlr = _pair_step(psf, msf, dlf, psr, msr, dlr, x4, pi, pj, qi, qj, W, ok, hf, hr, hi)
        e = 2.0 * wf * (dlf - 0.25 * msf) - 2.0 * wr * (dlr - 0.25 * msr)
        return tl.where(ok, e, 0.0)

    # the shapes are run-time values (specialised, each new tile shape would compile again)
    @triton.jit(do_not_specialize=["C", "KW", "KH", "KG", "H", "W"])
    def _replay_kernel(x1_ptr, x2_ptr, x3_ptr, x4_ptr, w_ptr, g_ptr, base_ptr, n_ptr, C, KW, KH, KG, H, W,
                       S: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        plane = tl.program_id(1)  # (b, k, c) flattened; axis 0: the pixel blocks (backend.pixel_grid)
        HW = H * W
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_img = offs < HW
        i = offs // W
        j = offs % W
        k = (plane // C) % KH
        b = plane // (C * KH)
        base = plane.to(tl.int64) * HW
        wp = w_ptr + (b * KW + k % KW).to(tl.int64) * 24 * HW
        hi = 0.5 / tl.load(g_ptr + k % KG)
        x1 = x1_ptr + base
        x2 = x2_ptr + base
        x3 = x3_ptr + base
        x4 = x4_ptr + base
        acc = tl.load(base_ptr + base + offs, mask=in_img, other=0.0)
        # graph.OFFSETS in order, a run-time loop (unrolled, the 12 x 2 pair terms compiled slowly):
        # + e_kk(p), the pair starting at p, - e_kk(p - o), the pair ending at p
        for kk in range(12):
            dy, dx = window_offset(kk)
            acc += _pair_term(x1, x2, x3, x4, wp, i, j, dy, dx, kk, H, W, HW, in_img, hi, S, BLOCK_SIZE)
            acc -= _pair_term(x1, x2, x3, x4, wp, i - dy, j - dx, dy, dx, kk, H, W, HW, in_img, hi, S, BLOCK_SIZE)
        tl.store(n_ptr + base + offs, acc, mask=in_img)


def edge_term_replayed_triton(xs: Sequence[Tensor], wbar: Tensor, gamma: Tensor, base: Tensor | None = None) -> Tensor:
    """``base + n`` (``base`` default 0): the edge term of eq. 20 after the iterates ``xs``
    (each (B, K|1, C, H, W), 1 to :data:`MAX_STEPS` of them) from the zero state, on the
    random-walk weights ``wbar`` (B, K|1, 24, H, W), ``gamma`` a (K,) or (1,) tensor.
    float32; returns a new (B, K, C, H, W) tensor."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    S = len(xs)
    if not 1 <= S <= MAX_STEPS:
        raise ValueError(f"the Triton replay runs 1 to {MAX_STEPS} iterates, got {S}")
    x = xs[-1]
    K = max(x.shape[1], wbar.shape[1])
    shape = (x.shape[0], K, *x.shape[2:])
    B, _, C, H, W = shape
    planes = [h.expand(shape).contiguous() for h in xs]
    planes += [planes[0]] * (MAX_STEPS - S)  # unused pointers (the constexpr S skips them)
    wc = wbar.contiguous()
    gk = gamma.reshape(-1).to(torch.float32).contiguous()
    base_c = torch.zeros(shape, dtype=x.dtype, device=x.device) if base is None else base.expand(shape).contiguous()
    n = torch.empty(shape, dtype=x.dtype, device=x.device)
    _replay_kernel[backend.pixel_grid(H * W, BLOCK, B * K * C)](*planes, wc, gk, base_c, n, C, wc.shape[1], K, gk.numel(),
                                                          H, W, S=S, BLOCK_SIZE=BLOCK)
    return n
