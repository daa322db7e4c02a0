"""The learned graphs of eqs. 27-28 as fused Triton kernels: the GPU counterpart of the native
distance and random-walk kernels (float32; inference, and training through
:func:`trained_or_none`'s autograd ops).

From projected features ``g`` (B, K, F, H, W) (``g = A_k^T f``, :func:`graph.project_features`,
so that eq. 27's distance is ``d_pq = |g_p - g_q|^2``), one kernel per graph type writes:

* :func:`edge_weights_from_projected` - uGLR: ``w_pq = exp(-d_pq)`` for the 12 undirected offsets
  (B, K, 12, H, W), 0 where the neighbour is outside the image;
* :func:`random_walk_weights_from_projected` - uGTV: eq. 28 as the softmax of ``-d`` over each
  node's in-image directed window (B, K, 24, H, W), the stable form of
  :func:`graph.random_walk_weights_from_distances`.

Each pixel reads its own and its 24 neighbours' F features (from cache) and writes its weights
once; the PyTorch path runs about 5 full passes per offset plus the softmax's. The softmax
recomputes the distances in three sweeps (minimum, sum, normalised weights) instead of storing
them: arithmetic is cheap next to memory on a GPU. In training the same kernels run the forward
and two more the backward: :func:`random_walk_backward` (the softmax's, folded onto the 12
undirected offsets) and :func:`distances_backward` (the projected features' gradient, each
pixel gathering its 24 edges). Runs where Triton runs: CUDA tensors, or CPU
tensors under ``TRITON_INTERPRET=1`` (how the tests check them without a GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

import torch
from torch import Tensor

from ..core import backend

if TYPE_CHECKING:  # pragma: no cover - the types of the optional Triton
    import triton
    import triton.language as tl
else:
    triton, tl = backend.triton_modules()  # (None, None) without Triton: no kernel is defined below

__all__ = ["fused_or_none", "trained_or_none", "edge_weights_from_projected",
           "random_walk_weights_from_projected", "distances_backward", "random_walk_backward"]

BLOCK = 256


if triton is not None:

    @triton.jit
    def window_offset(kk):
        """:data:`graph.OFFSETS` ``[kk]`` for a run-time ``kk`` in 0..11: (0, 1), (0, 2), then the
        rows dy = 1 and 2 with dx = -2 .. 2."""
        r = tl.maximum(kk - 2, 0)
        dy = tl.where(kk < 2, 0, r // 5 + 1)
        dx = tl.where(kk < 2, kk + 1, r % 5 - 2)
        return dy, dx

    @triton.jit
    def edge_of(kk, offs, i, j, H, W, in_img):
        """(q, inside): the neighbours q = p + OFFSETS[kk] of a block's pixels p (flat indices) and
        whether the edge (p, q) lies inside the image, for a run-time ``kk``."""
        dy, dx = window_offset(kk)
        return offs + dy * W + dx, in_img & (i + dy < H) & (j + dx >= 0) & (j + dx < W)  # dy >= 0

    @triton.jit
    def edge_product(g_ptr, x_ptr, offs, q, ok):
        """``g_p x_q + g_q x_p`` on the edges (p, q) of one plane (0 where ``ok`` is false): the
        per-edge term of a weight's gradient (A_bar = g x^T spread over the two directions)."""
        return (tl.load(g_ptr + offs, mask=ok, other=0.0) * tl.load(x_ptr + q, mask=ok, other=0.0)
                + tl.load(g_ptr + q, mask=ok, other=0.0) * tl.load(x_ptr + offs, mask=ok, other=0.0))

    @triton.jit
    def _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, DY: tl.constexpr, DX: tl.constexpr,
              KK: tl.constexpr):
        """acc + w_kk(p) v(p + o) + w_kk(p - o) v(p - o) for the offset o = (DY, DX): the pixel's
        own edge to its neighbour and the neighbour's edge back to it."""
        fi = i + DY
        fj = j + DX
        fwd = in_img & (fi >= 0) & (fi < H) & (fj >= 0) & (fj < W)
        wf = tl.load(w_ptr + KK * HW + i * W + j, mask=fwd, other=0.0)
        vf = tl.load(v_ptr + fi * W + fj, mask=fwd, other=0.0)
        bi = i - DY
        bj = j - DX
        bwd = in_img & (bi >= 0) & (bi < H) & (bj >= 0) & (bj < W)
        wb = tl.load(w_ptr + KK * HW + bi * W + bj, mask=bwd, other=0.0)
        vb = tl.load(v_ptr + bi * W + bj, mask=bwd, other=0.0)
        return acc + wf * vf + wb * vb

    @triton.jit
    def adjacency_stencil(w_ptr, v_ptr, i, j, H, W, HW, in_img, BLOCK_SIZE: tl.constexpr):
        """W v at a block's pixels: the 12 undirected offsets of the 5x5 window (graph.OFFSETS),
        in the same order (the training kernels of cg_adjoint_triton use it too)."""
        acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 0, 1, 0)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 0, 2, 1)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 1, -2, 2)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 1, -1, 3)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 1, 0, 4)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 1, 1, 5)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 1, 2, 6)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 2, -2, 7)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 2, -1, 8)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 2, 0, 9)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 2, 1, 10)
        acc = _pair(acc, w_ptr, v_ptr, i, j, H, W, HW, in_img, 2, 2, 11)
        return acc

    @triton.jit
    def _dist(gp, i, j, dy, dx, H, W, HW, in_img, F: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        """(|g_p - g_q|^2, whether q = p + (dy, dx) is in the image) for a block of pixels p."""
        qi = i + dy
        qj = j + dx
        ok = in_img & (qi >= 0) & (qi < H) & (qj >= 0) & (qj < W)
        d = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for c in tl.static_range(F):
            a = tl.load(gp + c * HW + i * W + j, mask=in_img, other=0.0)
            b = tl.load(gp + c * HW + qi * W + qj, mask=ok, other=0.0)
            d += (a - b) * (a - b)
        return d, ok

    @triton.jit
    def _sweep_edge(acc, m, s, d, ok, out, i, j, W, in_img, PASS: tl.constexpr):
        """One directed edge in softmax sweep PASS: 0 the minimum (into acc), 1 the sum of
        exp(-(d - m)) (into acc), 2 the normalised weight (stored at ``out``)."""
        if PASS == 0:
            acc = tl.where(ok, tl.minimum(acc, d), acc)
        elif PASS == 1:
            acc += tl.where(ok, tl.exp(m - d), 0.0)
        else:
            tl.store(out + i * W + j, tl.where(ok, tl.exp(m - d) / s, 0.0), mask=in_img)
        return acc

    @triton.jit
    def _sweep(acc, m, s, gp, op, i, j, H, W, HW, in_img, F: tl.constexpr, PASS: tl.constexpr,
               BLOCK_SIZE: tl.constexpr):
        """Softmax sweep PASS over the 24 directed edges: for each undirected offset o =
        ``graph.OFFSETS[kk]``, edge kk (p -> p + o), then edge 12 + kk (p -> p - o). A run-time
        loop: unrolled (3 sweeps x 24 edges x F features, ~1,700 inlined loads) the kernel took
        Triton minutes to compile for sm_90; the order of the sums is the same."""
        for kk in range(12):
            dy, dx = window_offset(kk)
            d, ok = _dist(gp, i, j, dy, dx, H, W, HW, in_img, F, BLOCK_SIZE)
            acc = _sweep_edge(acc, m, s, d, ok, op + kk * HW, i, j, W, in_img, PASS)
            d, ok = _dist(gp, i, j, -dy, -dx, H, W, HW, in_img, F, BLOCK_SIZE)
            acc = _sweep_edge(acc, m, s, d, ok, op + (kk + 12) * HW, i, j, W, in_img, PASS)
        return acc

    @triton.jit
    def _program_pixels(g_ptr, out_ptr, H, W, F: tl.constexpr, N_OUT: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        """This program's block of pixels (grid axis 0: up to 2^31 - 1 blocks) and (b, k) plane
        (axis 1): the feature and output planes' starts, H W, the pixels' row and column and
        whether they are in the image."""
        plane = tl.program_id(1).to(tl.int64)
        HW = H * W
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        return g_ptr + plane * F * HW, out_ptr + plane * N_OUT * HW, HW, offs // W, offs % W, offs < HW

    # the shapes are run-time values: specialised (1, or divisible by 16) each new tile shape
    # would compile the kernel again
    @triton.jit(do_not_specialize=["H", "W"])
    def _random_walk_kernel(g_ptr, out_ptr, H, W, F: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        gp, op, HW, i, j, in_img = _program_pixels(g_ptr, out_ptr, H, W, F, 24, BLOCK_SIZE)
        zero = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        m = _sweep(zero + float("inf"), zero, zero, gp, op, i, j, H, W, HW, in_img, F, 0, BLOCK_SIZE)
        s = _sweep(zero, m, zero, gp, op, i, j, H, W, HW, in_img, F, 1, BLOCK_SIZE)
        s = tl.where(s > 0, s, 1.0)  # a node without in-image neighbours (a 1x1 image) keeps weights 0
        _sweep(zero, m, s, gp, op, i, j, H, W, HW, in_img, F, 2, BLOCK_SIZE)

    @triton.jit(do_not_specialize=["H", "W"])
    def _edge_weights_kernel(g_ptr, out_ptr, H, W, F: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        gp, op, HW, i, j, in_img = _program_pixels(g_ptr, out_ptr, H, W, F, 12, BLOCK_SIZE)
        for kk in range(12):  # a run-time loop, as in _sweep
            dy, dx = window_offset(kk)
            d, ok = _dist(gp, i, j, dy, dx, H, W, HW, in_img, F, BLOCK_SIZE)
            tl.store(op + kk * HW + i * W + j, tl.where(ok, tl.exp(-d), 0.0), mask=in_img)

    @triton.jit(do_not_specialize=["C", "KW", "KH", "H", "W"])
    def _diag_minus_adjacency_kernel(w_ptr, a_ptr, x_ptr, out_ptr, C, KW, KH, H, W, HAS_A: tl.constexpr,
                                     BLOCK_SIZE: tl.constexpr):
        """``a x - W x`` at a block of pixels of one (b, k, c) plane."""
        plane = tl.program_id(1)
        HW = H * W
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_img = offs < HW
        k = (plane // C) % KH
        b = plane // (C * KH)
        base = plane.to(tl.int64) * HW
        wp = w_ptr + (b * KW + k % KW).to(tl.int64) * 12 * HW
        x = tl.load(x_ptr + base + offs, mask=in_img, other=0.0)
        if HAS_A:
            x = x * tl.load(a_ptr + base + offs, mask=in_img, other=0.0)
        acc = adjacency_stencil(wp, x_ptr + base, offs // W, offs % W, H, W, HW, in_img, BLOCK_SIZE)
        tl.store(out_ptr + base + offs, x - acc, mask=in_img)

    @triton.jit(do_not_specialize=["C", "H", "W"])
    def _adjacency_grad_kernel(g_ptr, x_ptr, gw_ptr, C, H, W, BLOCK_SIZE: tl.constexpr):
        """``gw[o, p] -= sum_c (g_p x_q + g_q x_p)`` (q = p + o) at a block of pixels of one
        (b, k) plane, its channels summed in registers (one writer per entry)."""
        bk = tl.program_id(1).to(tl.int64)
        HW = H * W
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_img = offs < HW
        i = offs // W
        j = offs % W
        gwp = gw_ptr + bk * 12 * HW
        for kk in range(12):
            q, ok = edge_of(kk, offs, i, j, H, W, in_img)
            acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            for c in range(C):
                base = (bk * C + c) * HW
                acc += edge_product(g_ptr + base, x_ptr + base, offs, q, ok)
            old = tl.load(gwp + kk * HW + offs, mask=in_img, other=0.0)
            tl.store(gwp + kk * HW + offs, old - acc, mask=in_img)

    @triton.jit(do_not_specialize=["H", "W"])
    def _rw_backward_kernel(wb_ptr, gwb_ptr, s_ptr, gd_ptr, H, W, BLOCK_SIZE: tl.constexpr):
        """The softmax's backward (eq. 28) folded onto the undirected offsets: ``gd[kk, p] =
        dd(p -> q) + dd(q -> p)`` for q = p + o, with ``dd(e) = -wbar_e (gwbar_e - s_tail)`` and
        ``s_p = sum_e wbar_e(p) gwbar_e(p)``; 0 where q is outside the image."""
        plane = tl.program_id(1).to(tl.int64)
        HW = H * W
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        in_img = offs < HW
        i = offs // W
        j = offs % W
        wp = wb_ptr + plane * 24 * HW
        gp = gwb_ptr + plane * 24 * HW
        sp = s_ptr + plane * HW
        s_p = tl.load(sp + offs, mask=in_img, other=0.0)
        for kk in range(12):
            dy, dx = window_offset(kk)
            q = (i + dy) * W + j + dx
            ok = in_img & (i + dy < H) & (j + dx >= 0) & (j + dx < W)  # dy >= 0
            fwd = tl.load(wp + kk * HW + offs, mask=ok, other=0.0) * (tl.load(gp + kk * HW + offs, mask=ok, other=0.0)
                                                                       - s_p)
            rev = tl.load(wp + (kk + 12) * HW + q, mask=ok, other=0.0) * (
                tl.load(gp + (kk + 12) * HW + q, mask=ok, other=0.0) - tl.load(sp + q, mask=ok, other=0.0))
            tl.store(gd_ptr + plane * 12 * HW + kk * HW + offs, tl.where(ok, -(fwd + rev), 0.0), mask=in_img)

    @triton.jit(do_not_specialize=["H", "W"])
    def _distances_backward_kernel(g_ptr, gd_ptr, gg_ptr, H, W, F: tl.constexpr, BLOCK_SIZE: tl.constexpr):
        """The gradient of projected features from that of their distances ``d_pq = |g_p - g_q|^2``
        (eq. 27): ``gg_p = sum_o 2 gd_o(p) (g_p - g_{p+o}) - 2 gd_o(p - o) (g_{p-o} - g_p)``, each
        pixel gathering its 24 edges (the native ``edge_distances_backward``)."""
        gp, dp, HW, i, j, in_img = _program_pixels(g_ptr, gd_ptr, H, W, F, 12, BLOCK_SIZE)
        outp = gg_ptr + tl.program_id(1).to(tl.int64) * F * HW
        offs = i * W + j
        for f in range(F):
            g_p = tl.load(gp + f * HW + offs, mask=in_img, other=0.0)
            acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            for kk in range(12):
                dy, dx = window_offset(kk)
                ok = in_img & (i + dy < H) & (j + dx >= 0) & (j + dx < W)  # p + o (dy >= 0)
                g_q = tl.load(gp + f * HW + offs + dy * W + dx, mask=ok, other=0.0)
                acc += tl.where(ok, tl.load(dp + kk * HW + offs, mask=ok, other=0.0) * (g_p - g_q), 0.0)
                ok = in_img & (i - dy >= 0) & (j - dx >= 0) & (j - dx < W)  # p - o
                m = offs - dy * W - dx
                g_m = tl.load(gp + f * HW + m, mask=ok, other=0.0)
                acc -= tl.where(ok, tl.load(dp + kk * HW + m, mask=ok, other=0.0) * (g_m - g_p), 0.0)
            tl.store(outp + f * HW + offs, 2.0 * acc, mask=in_img)


def fused_or_none(kernel: str, g: Tensor) -> Optional[Tensor]:
    """The fused kernel ``kernel`` (a function of this module) on projected features ``g`` where
    it applies (float32 CUDA, no gradient wanted: :func:`backend.gpu_fused_usable`), else None.
    A Triton that fails here is said once, in one line, and not tried again."""
    if triton is None or (torch.is_grad_enabled() and g.requires_grad) or not backend.gpu_fused_usable(g):
        return None
    try:
        return globals()[kernel](g)
    except Exception as exc:  # noqa: BLE001 - fall back to the PyTorch formulas
        backend.gpu_fused_failed("graph kernel", exc)
        return None


def dense(t: Optional[Tensor], shape) -> Optional[Tensor]:
    """``t`` broadcast to ``shape`` as a contiguous tensor (what the kernels index), None stays None."""
    return None if t is None else t.expand(shape).contiguous()


def diag_minus_adjacency(w: Tensor, a: Optional[Tensor], x: Tensor, shape) -> Tensor:
    """``a * x - W x`` (``a=None``: ``x - W x``) of the undirected weights ``w`` (B, K|1, 12, H, W),
    ``a`` and ``x`` broadcasting to ``shape`` (B, K, C, H, W), by :func:`_diag_minus_adjacency_kernel`
    (the GPU form of :func:`graph.diag_minus_adjacency_apply`'s forward and its input gradient)."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    B, K, C, H, W = shape
    wc = w.contiguous()
    xc = dense(x, shape)
    out = torch.empty(shape, dtype=torch.float32, device=xc.device)
    _diag_minus_adjacency_kernel[backend.pixel_grid(H * W, BLOCK, B * K * C)](
        wc, xc if a is None else dense(a, shape), xc, out, C, wc.shape[1], K, H, W, HAS_A=a is not None,
        BLOCK_SIZE=BLOCK)
    return out


def adjacency_grad_w_accumulate(gw: Tensor, g: Tensor, x: Tensor) -> Tensor:
    """``gw[b, k, o, p] -= sum_c (g_p x_q + g_q x_p)``, q = p + OFFSETS[o], in place into ``gw``
    (B, K, 12, H, W) contiguous, by :func:`_adjacency_grad_kernel` (the GPU form of
    :func:`graph.adjacency_grad_w_accumulate`). Returns ``gw``."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    B, K, C, H, W = g.shape
    _adjacency_grad_kernel[backend.pixel_grid(H * W, BLOCK, B * K)](g.contiguous(), dense(x, g.shape), gw, C, H, W,
                                                                  BLOCK_SIZE=BLOCK)
    return gw


def trained_or_none(kind: str, g: Tensor, reference: Callable[[Tensor], Tensor]) -> Optional[Tensor]:
    """The training form of a graph on projected features ``g`` that autograd records, where the
    fused kernels run (float32 CUDA, not where the native CPU kernels do): ``kind`` "edge_weights"
    (uGLR, eq. 27) or "random_walk" (uGTV, eq. 28), forward by the inference kernel and backward
    by :func:`_rw_backward_kernel` / :func:`_distances_backward_kernel`; None elsewhere or with
    ``backend.settings.gpu_training`` off (the PyTorch formulas then run). ``reference``: those
    formulas (g -> the same graph, recorded by autograd), which the backward differentiates if its
    kernels fail. A Triton that fails here is said once, in one line."""
    if triton is None or not (torch.is_grad_enabled() and g.requires_grad) or not backend.gpu_fused_usable(g):
        return None
    if backend.usable(g) or not backend.settings.gpu_training:
        return None  # the native CPU kernels
    try:
        return _GraphTrained.apply(g, kind, reference)
    except Exception as exc:  # noqa: BLE001 - fall back to the PyTorch formulas
        backend.gpu_fused_failed("graph kernel", exc)
        return None


def distances_backward(g: Tensor, gd: Tensor) -> Tensor:
    """The gradient of projected features ``g`` (B, K, F, H, W) given that of their 12-offset
    distances ``gd`` (B, K, 12, H, W), by :func:`_distances_backward_kernel`."""
    B, K, F, H, W = g.shape
    gg = torch.empty((B, K, F, H, W), dtype=torch.float32, device=g.device)
    _distances_backward_kernel[backend.pixel_grid(H * W, BLOCK, B * K)](g.contiguous(), gd.expand(B, K, 12, H, W).contiguous(),
                                                                        gg, H, W, F=F, BLOCK_SIZE=BLOCK)
    return gg


def random_walk_backward(wbar: Tensor, gwbar: Tensor) -> Tensor:
    """The gradient of the 12-offset distances given that of the random-walk weights ``wbar``
    (eq. 28, the softmax over each node's window), by :func:`_rw_backward_kernel`."""
    B, K, _, H, W = wbar.shape
    gwbar = gwbar.expand(wbar.shape).contiguous()
    s = (wbar * gwbar).sum(dim=2)
    gd = torch.empty((B, K, 12, H, W), dtype=torch.float32, device=wbar.device)
    _rw_backward_kernel[backend.pixel_grid(H * W, BLOCK, B * K)](wbar.contiguous(), gwbar, s, gd, H, W, BLOCK_SIZE=BLOCK)
    return gd


class _GraphTrained(torch.autograd.Function):
    """A learned graph of projected features ``g`` with its fused backward: ``kind``
    "edge_weights" (eq. 27, uGLR: ``w = exp(-|g_p - g_q|^2)``) or "random_walk" (eq. 28, uGTV);
    saves g and the weights. The backward runs the kernels, or differentiates ``reference`` (the
    PyTorch formulas) when a kernel fails."""

    @staticmethod
    def forward(ctx, g: Tensor, kind: str, reference):  # type: ignore[override]
        out = (edge_weights_from_projected if kind == "edge_weights" else random_walk_weights_from_projected)(g)
        ctx.save_for_backward(g, out)
        ctx.kind, ctx.reference = kind, reference
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        g, out = ctx.saved_tensors
        if backend.gpu_fused_usable(grad):
            try:
                gd = -grad * out if ctx.kind == "edge_weights" else random_walk_backward(out, grad)
                return distances_backward(g, gd), None, None
            except Exception as exc:  # noqa: BLE001 - a Triton that cannot compile here: said once
                backend.gpu_fused_failed("graph training kernel", exc)
        leaf = g.detach().requires_grad_(True)
        with torch.enable_grad(), backend.configure(gpu_fused=0):
            return torch.autograd.grad(ctx.reference(leaf), leaf, grad)[0], None, None


def _launch(kernel, g: Tensor, n_out: int, out: Tensor | None) -> Tensor:
    if triton is None:
        raise RuntimeError("Triton is not installed")
    if g.dim() != 5 or g.dtype != torch.float32:
        raise ValueError(f"projected features must be float32 (B, K, F, H, W), got {g.dtype} {tuple(g.shape)}")
    B, K, F, H, W = g.shape
    gc = g.contiguous()
    if out is None:
        out = g.new_empty(B, K, n_out, H, W)
    kernel[backend.pixel_grid(H * W, BLOCK, B * K)](gc, out, H, W, F=F, BLOCK_SIZE=BLOCK)
    return out


def edge_weights_from_projected(g: Tensor, out: Tensor | None = None) -> Tensor:
    """uGLR's weights ``exp(-|g_p - g_q|^2)`` (eq. 27 with ``g = A^T f``), (B, K, 12, H, W)."""
    return _launch(_edge_weights_kernel, g, 12, out)


def random_walk_weights_from_projected(g: Tensor, out: Tensor | None = None) -> Tensor:
    """uGTV's random-walk weights (eq. 28): the softmax of ``-|g_p - g_q|^2`` over each node's
    in-image directed window, (B, K, 24, H, W) in :data:`graph.DIRECTED_OFFSETS` order."""
    return _launch(_random_walk_kernel, g, 24, out)
