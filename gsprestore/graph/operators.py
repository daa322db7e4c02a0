"""Graph operators on the 5x5-window pixel graph of the paper (Sec. 2 and Sec. 5.2).

Every pixel is a node connected to the 24 other pixels of its 5x5 window. An undirected edge is
stored once, at its first end ``p``, under one of the 12 :data:`OFFSETS` ``o`` (the other end is
``p + o``); the directed (random-walk normalised) graph of eq. 28 has 24 edges per node, indexed by
:data:`DIRECTED_OFFSETS` (``OFFSETS`` followed by their negatives). Edges that would leave the image
have weight zero, so every operator here is exact at the borders; nothing ever builds a dense
``N x N`` matrix.

Shapes (``K`` heads, ``C`` signal channels, ``F`` feature dims)::

    features  (B, K, F, H, W)      metric (K, F, F) or (F, F), PSD
    w         (B, K, 12, H, W)     undirected weights, w[:, :, k, i, j] = w(p, p + OFFSETS[k])
    wbar      (B, K, 24, H, W)     directed weights, wbar[:, :, j, i, j'] = wbar(p -> p + DIRECTED_OFFSETS[j])
    x         (B, K, C, H, W)      a graph signal per head (the graph is shared across channels)
    e         (B, K, C, 24, H, W)  an edge signal, e.g. C-bar x

A weight tensor may have ``K == 1`` and then broadcasts over the heads of ``x``.

The operators used inside solver loops (:func:`laplacian_apply`, :func:`normalized_laplacian_apply`,
:func:`diag_minus_adjacency_apply`, :func:`incidence_apply`, :func:`incidence_adjoint`,
:func:`edge_weights` / :func:`edge_distances`, :func:`random_walk_weights_from_distances`) are
custom :class:`torch.autograd.Function` s: they save their inputs (or output) only and recompute
what the backward pass needs.

Two implementations, equal to rounding (tested against each other and against dense oracles):

* PyTorch: shifted slices accumulated in place (one fused multiply-accumulate per offset and
  direction), row band by row band so the operands stay in cache; never 24 shifted copies, never
  ``torch.roll``. Used on GPUs, for other dtypes, and whenever the native kernels are unavailable.
* native (CPU, float32/float64): the hottest loops as C++ kernels compiled when the package is
  built (``setup.py``; source ``gsprestore/native/kernels.cpp``, loaded through ctypes by
  :mod:`gsprestore.native`) - ``a x - W x`` and its weight gradient, the edge distances of
  eq. 27, eq. 28 from distances, the fused ADMM edge step (forward and backward) and the fused
  inference CG of :mod:`gsprestore.solvers`, and (forward only, used when no gradient is
  recorded) :func:`degree` and :func:`incidence_laplacian_weights`. The other gradients (eq. 27's
  features and metric, eq. 28, the incidence operators) use the PyTorch formulas on either
  backend. :mod:`gsprestore.core.backend` chooses (``backend.use("torch")``; ``GSPRESTORE_NATIVE=0``);
  without the compiled library (a source install with no C++ compiler) the PyTorch path runs and
  says so once (:func:`native_available`, the reason in :func:`gsprestore.core.backend.error`).

The index slices and row bands of the 5x5 window live in :mod:`gsprestore.graph.window`.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..core import backend
from ..core.backend import native_available  # noqa: F401 - re-exported: part of this module's API
from ..core.shapes import broadcast_shape
from .window import (
    DIRECTED_OFFSETS, NU, OFFSETS, WINDOW_RADIUS, check_signal, check_weights, regions, sum_to, zero_outside,
)
from .window import band_rows, bands, directed_regions
from .setup_backward import (
    Degree, LbarWeights, ScaleEdges, apply_metric, EdgeWeights, metric4, native_edge_distances, degree_of,
    lbar_weights, scale_edges,
)


__all__ = [
    "OFFSETS",
    "DIRECTED_OFFSETS",
    "WINDOW_RADIUS",
    "edge_distances",
    "edge_weights",
    "degree",
    "laplacian_apply",
    "normalized_weights",
    "normalized_laplacian_apply",
    "diag_minus_adjacency_apply",
    "random_walk_weights",
    "random_walk_weights_from_distances",
    "incidence_apply",
    "incidence_adjoint",
    "incidence_laplacian_weights",
    "graph_laplacian_regularizer",
    "graph_total_variation",
    "native_available",
    "adjacency_grad_w_accumulate",
]

_TINY = 1e-30  # floor for degrees before division (an isolated node then gets weight 0, not NaN)


# --------------------------------------------------------------------------------------------
# edge weights (eq. 27) from features and a PSD metric
# --------------------------------------------------------------------------------------------


def project_features(features: Tensor, factor: Tensor, *, workspace: Optional[dict] = None) -> Tensor:
    """Per-head projection ``g = A_k^T f`` of features ``(B, K * F, H, W)`` (any memory layout,
    e.g. the feature CNN's channels-last output) by the metric factors ``factor`` ``(K, F, F)``
    (``M_k = A_k A_k^T``, eq. 27) -> ``(B, K, F, H, W)`` contiguous; ``edge_distances(g, None)``
    equals ``edge_distances(f, M)``. ``workspace``: see :func:`reused_output`."""
    (B, C, H, W), (K, F, _) = features.shape, factor.shape
    if C != K * F:
        raise ValueError(f"features have {C} channels, the factors {K} x {F}")
    if backend.no_grad_usable(features, factor):
        out = reused_output(workspace, "projected_features", (B, K, F, H, W), features)
        out = features.new_empty(B, K, F, H, W) if out is None else out
        backend.native().project_heads(features, factor.contiguous(), out.view(B, C, H, W))
        return out
    f = features.reshape(B, K, F, H * W)
    return torch.matmul(factor.transpose(-1, -2), f).reshape(B, K, F, H, W)


def edge_distances(features: Tensor, metric: Optional[Tensor], *, workspace: Optional[dict] = None) -> Tensor:
    """Squared Mahalanobis distances ``d(p, p + o_k) = (f_p - f_q)^T M (f_p - f_q)`` (eq. 27),
    ``(B, K, 12, H, W)``; 0 where ``p + o_k`` is outside the image (those entries are unused).
    ``metric=None`` is the identity: for features already projected by a factor of the metric
    (``g = A^T f`` gives the same d for M = A A^T). ``workspace``: see :func:`reused_output`."""
    if features.dim() != 5:
        raise ValueError(f"features must be (B, K, F, H, W), got {tuple(features.shape)}")
    return _edge_weights_into(features, metric, False, workspace)


def edge_weights(features: Tensor, metric: Optional[Tensor], *, workspace: Optional[dict] = None) -> Tensor:
    """Edge weights ``w_pq = exp(-(f_p - f_q)^T M (f_p - f_q))`` of eq. 27 for the 12 undirected
    offsets of the 5x5 window: features ``(B, K, F, H, W)``, metric ``(K, F, F)`` (or ``(F, F)``),
    PSD (the caller parametrises it, e.g. ``M = A A^T``) -> ``(B, K, 12, H, W)``, zero where the
    neighbour ``p + o_k`` is outside the image. Custom autograd: saves features, metric and w.
    ``metric=None``: the identity, as in :func:`edge_distances`. ``workspace``: see :func:`reused_output`."""
    if features.dim() != 5:
        raise ValueError(f"features must be (B, K, F, H, W), got {tuple(features.shape)}")
    return _edge_weights_into(features, metric, True, workspace)


def reused_output(workspace: Optional[dict], key: str, shape: tuple, like: Tensor, *,
                  padded: bool = False) -> Optional[Tensor]:
    """Inference only: an output buffer kept in a caller's ``workspace`` dict (e.g. across the
    blocks of one network forward) instead of a fresh allocation; at these sizes (75-150 MB at
    768x512) every fresh tensor is a new mapping whose pages fault in and get zeroed again. The
    buffer is zeroed once; the native kernels that write it leave the entries of edges leaving
    the image at 0 and overwrite all others, so it stays valid for the next call of the same
    shape. The caller must be done with the previous result. ``padded``: with
    :func:`gsprestore.core.backend.padded_planes`' layout (for a stencil's weights)."""
    if workspace is None:
        return None
    t = workspace.get(key)
    if t is None or t.shape != shape or t.dtype != like.dtype or t.device != like.device:
        t = backend.padded_planes(like, *shape).zero_() if padded else like.new_zeros(shape)
        workspace[key] = t
    return t


def random_walk_weights_from_projected(g: Tensor, *, workspace: Optional[dict] = None) -> Tensor:
    """Eq. 28 from projected features ``g`` (B, K, F, H, W) (:func:`project_features`): the
    softmax of ``-|g_p - g_q|^2`` over each node's in-image directed window, (B, K, 24, H, W).
    One fused Triton kernel on a GPU (in training a fused backward too); elsewhere :func:`edge_distances` then
    :func:`random_walk_weights_from_distances`."""
    if backend.gpu_fused_usable(g):  # checked first: Triton is imported only where it may run
        from .triton_kernels import fused_or_none, trained_or_none

        fused = fused_or_none("random_walk_weights_from_projected", g)
        if fused is None:
            fused = trained_or_none("random_walk", g,
                                    lambda t: random_walk_weights_from_distances(edge_distances(t, None)))
        if fused is not None:
            return fused
    return random_walk_weights_from_distances(edge_distances(g, None, workspace=workspace), workspace=workspace)


def _edge_weights_into(features: Tensor, metric: Optional[Tensor], exp: bool, workspace: Optional[dict]) -> Tensor:
    """``metric=None``: the identity (``features`` already projected, g = A^T f for M = A A^T)."""
    if metric is None and exp and backend.gpu_fused_usable(features):  # Triton imported only where it may run
        from .triton_kernels import fused_or_none, trained_or_none

        fused = fused_or_none("edge_weights_from_projected", features)
        if fused is None:
            fused = trained_or_none("edge_weights", features, lambda t: EdgeWeights.apply(t, None, True))
        if fused is not None:
            return fused
    if workspace is not None and backend.no_grad_usable(features, *(() if metric is None else (metric,))):
        B, K, F, H, W = features.shape
        if metric is None:
            Kout, mf = K, features  # d = (g_p - g_q)^T (g_p - g_q)
        else:
            m4 = metric4(metric)
            Kout, mf = max(K, m4.shape[1]), apply_metric(m4, features)
        out = reused_output(workspace, "edge_weights" if exp else "edge_distances", (B, Kout, NU, H, W), features)
        assert out is not None  # a workspace was given
        return native_edge_distances(features, mf, exp, out)
    if metric is None and not (torch.is_grad_enabled() and features.requires_grad):
        return _euclidean_edge_distances(features, exp)
    return EdgeWeights.apply(features, metric, exp)


def _euclidean_edge_distances(g: Tensor, exp: bool) -> Tensor:
    """``|g_p - g_q|^2`` (``exp``: its ``exp(-.)``) on the 12 offsets, PyTorch path without autograd."""
    B, K, F, H, W = g.shape
    out = g.new_zeros(B, K, NU, H, W)
    for k, P, Q in regions(H, W):
        d = (g[..., P[0], P[1]] - g[..., Q[0], Q[1]]).square_().sum(dim=2)
        out[:, :, k, P[0], P[1]] = d.neg_().exp_() if exp else d
    return out


# --------------------------------------------------------------------------------------------
# undirected graph: degree, Laplacian L = D - W (Sec. 2.1) and D^-1/2 L D^-1/2 (Sec. 5.2)
# --------------------------------------------------------------------------------------------


def degree(w: Tensor) -> Tensor:
    """Degrees ``D = diag(W 1)`` of the undirected graph ``w`` (B, K, 12, H, W) -> (B, K, 1, H, W).
    Custom autograd (saves nothing)."""
    check_weights(w, NU, "w")
    if backend.no_grad_usable(w) or not (torch.is_grad_enabled() and w.requires_grad):
        return degree_of(w)
    return Degree.apply(w)


def _diag_minus_adjacency_into(out: Tensor, w: Tensor, a: Optional[Tensor], x: Tensor) -> Tensor:
    """Write ``a * x - W x`` into ``out`` (W: symmetric adjacency of ``w``; ``a=None``: identity),
    band of rows by band of rows: per band one product and 24 fused multiply-accumulates
    ``out[tail] -= w * x[head]`` over the directed offsets, all on views (no shifted copies)."""
    H, W = x.shape[-2:]
    rows = band_rows(out[..., :1, :].numel(), H, out.device)
    for r0, r1 in bands(H, rows):
        ob = out[..., r0:r1, :]
        if a is None:
            ob.copy_(x[..., r0:r1, :])
        else:
            torch.mul(a[..., r0:r1, :], x[..., r0:r1, :], out=ob)
        for _, k, tail, head, at in directed_regions(H, W, r0, r1):
            out[..., tail[0], tail[1]].addcmul_(w[:, :, k : k + 1, at[0], at[1]], x[..., head[0], head[1]], value=-1.0)
    return out


def _diag_minus_adjacency(w: Tensor, a: Optional[Tensor], x: Tensor) -> Tensor:
    """``a * x - W x`` (``a=None`` means the identity)."""
    shape = broadcast_shape(x.shape, w[:, :, :1].shape, a.shape if a is not None else x.shape)
    if backend.usable(w, a, x):
        if a is not None and a.dim() != 5:
            a = a.expand(shape)
        rc = backend.rows_contiguous
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
        return backend.native().diag_minus_adjacency(rc(w), None if a is None else rc(a), rc(x), out)
    if backend.gpu_fused_usable(w, a, x) and not (torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (w, a, x))):
        from . import triton_kernels as graph_triton

        try:
            return graph_triton.diag_minus_adjacency(w, a, x, shape)
        except Exception as exc:  # noqa: BLE001 - a Triton that cannot compile here: said once
            backend.gpu_fused_failed("stencil kernel", exc)
    if a is not None and a.shape != shape and x.shape != shape:
        a = a.expand(shape)
    if x.shape != shape and a is None:
        x = x.expand(shape)
    return _diag_minus_adjacency_into(torch.empty(shape, dtype=x.dtype, device=x.device), w, a, x)


class _DiagMinusAdjacency(torch.autograd.Function):
    """y = a * x - W(w) x for a symmetric adjacency W given by undirected weights w."""

    @staticmethod
    def forward(ctx, w: Tensor, a: Optional[Tensor], x: Tensor):  # type: ignore[override]
        ctx.save_for_backward(w, a, x)
        ctx.has_a = a is not None
        return _diag_minus_adjacency(w, a, x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor):  # type: ignore[override]
        w, a, x = ctx.saved_tensors
        gw = ga = gx = None
        if ctx.needs_input_grad[2]:  # the operator is symmetric
            gx = sum_to(_diag_minus_adjacency(w, a, g), x.shape)
        if ctx.has_a and ctx.needs_input_grad[1]:
            ga = sum_to(g * x, a.shape)
        if ctx.needs_input_grad[0]:
            B, K, C, H, W = g.shape
            gw = sum_to(adjacency_grad_w_accumulate(g.new_zeros(B, K, NU, H, W), g, x), w.shape)
        return gw, ga, gx


def adjacency_grad_w_accumulate(gw: Tensor, g: Tensor, x: Tensor) -> Tensor:
    """``gw += d<g, -W(w) x>/dw``, i.e. ``gw[b, k, o, p] -= sum_c (g_p x_q + g_q x_p)`` with
    ``q = p + OFFSETS[o]``: the undirected weights' gradient of ``diag * x - W x`` for the output
    gradient ``g`` (B, K, C, H, W); ``x`` broadcasts against ``g``; ``gw`` (B, K, 12, H, W)
    contiguous, accumulated in place (the solvers sum many such terms into one buffer). The
    native kernel on the CPU, a Triton kernel on a GPU (:func:`graph_triton.adjacency_grad_w_accumulate`),
    the PyTorch formulas elsewhere. Returns ``gw``."""
    B, K, C, H, W = g.shape
    if backend.usable(g, x, gw) and gw.is_contiguous():
        backend.native().diag_minus_adjacency_grad_w(g.contiguous(), backend.rows_contiguous(x.expand(B, K, C, H, W)), gw)
        return gw
    if backend.settings.gpu_training and gw.is_contiguous() and backend.gpu_fused_usable(g, x, gw):
        from . import triton_kernels as graph_triton

        try:
            return graph_triton.adjacency_grad_w_accumulate(gw, g, x)
        except Exception as exc:  # noqa: BLE001 - a Triton that cannot compile here: said once
            backend.gpu_fused_failed("stencil gradient kernel", exc)
    for k, P, Q in regions(H, W):
        t = g[..., P[0], P[1]] * x[..., Q[0], Q[1]]
        t.addcmul_(g[..., Q[0], Q[1]], x[..., P[0], P[1]])
        gw[:, :, k : k + 1, P[0], P[1]].sub_(t.sum(dim=2, keepdim=True))
    return gw


def diag_minus_adjacency_apply(w: Tensor, x: Tensor, diag: Optional[Tensor] = None) -> Tensor:
    """``diag * x - W x`` (``diag=None``: ``x - W x``) for the symmetric adjacency ``W`` of the
    undirected weights ``w``; ``diag`` broadcasts against ``x`` (e.g. ``(B, K, C, H, W)`` degree
    plus sampling mask, the generalised Laplacian ``L + H^T H`` of eq. 20). Custom autograd."""
    check_weights(w, NU, "w")
    check_signal(w, x)
    return _DiagMinusAdjacency.apply(w, diag, x)


def laplacian_apply(w: Tensor, x: Tensor, deg: Optional[Tensor] = None) -> Tensor:
    """``L x`` for the combinatorial Laplacian ``L = D - W`` (Sec. 2.1) of the undirected weights
    ``w`` (B, K|1, 12, H, W) applied to ``x`` (B, K, C, H, W). ``deg`` may pass a precomputed
    :func:`degree` (reuse it across solver iterations). Custom autograd (saves w, deg, x)."""
    if deg is None:
        deg = degree(w)
    return diag_minus_adjacency_apply(w, x, deg)


def normalized_weights(w: Tensor, deg: Optional[Tensor] = None, *,
                       workspace: Optional[dict] = None) -> tuple[Tensor, Tensor]:
    """Weights of ``D^-1/2 W D^-1/2`` and the diagonal of ``D^-1/2 D D^-1/2`` (1 except at
    isolated nodes): returns ``(wn, a)`` so that ``L_n x = a * x - Wn x`` (Sec. 5.2).
    ``workspace`` (inference): ``wn``'s buffer is kept there, as in :func:`reused_output`."""
    if deg is None:
        deg = degree(w)
    dis = deg.clamp_min(_TINY).rsqrt()
    if torch.is_grad_enabled() and (w.requires_grad or dis.requires_grad):
        return ScaleEdges.apply(w, dis), deg * dis * dis
    if backend.no_grad_usable(w, dis) and w.dim() == 5:  # inference: planes padded for the fused CG's stencil
        # zeroed once: scale_edges writes every in-image edge and leaves the others at 0
        wn = reused_output(workspace, "normalized_weights", tuple(w.shape), w, padded=True)
        if wn is None:
            wn = backend.padded_planes(w, *w.shape).zero_()
        backend.native().scale_edges(backend.rows_contiguous(w), backend.rows_contiguous(dis), wn)
        return wn, deg * dis * dis
    return scale_edges(w, dis, torch.zeros_like(w)), deg * dis * dis


def normalized_laplacian_apply(w: Tensor, x: Tensor) -> Tensor:
    """``D^-1/2 L D^-1/2 x``, the symmetric normalised Laplacian used for GLR (Sec. 5.2)."""
    wn, a = normalized_weights(w)
    return diag_minus_adjacency_apply(wn, x, a)


def graph_laplacian_regularizer(w: Tensor, x: Tensor) -> Tensor:
    """GLR ``x^T L x = sum_(i,j) w_ij (x_i - x_j)^2`` (eq. 1) per (batch, head): ``(B, K)``."""
    H, W = x.shape[-2:]
    total = x.new_zeros(broadcast_shape(x.shape[:2], w.shape[:2]))
    for k, P, Q in regions(H, W):
        d = x[..., P[0], P[1]] - x[..., Q[0], Q[1]]
        total = total + (w[:, :, k : k + 1, P[0], P[1]] * d * d).sum(dim=(2, 3, 4))
    return total


# --------------------------------------------------------------------------------------------
# directed, random-walk normalised graph: wbar (eq. 28) and the incidence C-bar (Sec. 5.2)
# --------------------------------------------------------------------------------------------


def random_walk_weights(w: Tensor) -> Tensor:
    """Eq. 28: ``wbar(p -> q) = w_pq / sum_l w_pl`` over the in-image neighbours ``l`` of ``p``;
    ``(B, K, 12, H, W) -> (B, K, 24, H, W)`` indexed by :data:`DIRECTED_OFFSETS`, zero outside the
    image. Each node's outgoing weights sum to one (a node whose weights all underflowed gets 0)."""
    check_weights(w, NU, "w")
    B, K, _, H, W = w.shape
    inv = degree(w).clamp_min(_TINY).reciprocal()
    wbar = w.new_zeros(B, K, 2 * NU, H, W)
    for k, P, Q in regions(H, W):
        wk = w[:, :, k : k + 1, P[0], P[1]]
        wbar[:, :, k : k + 1, P[0], P[1]] = wk * inv[..., P[0], P[1]]
        wbar[:, :, NU + k : NU + k + 1, Q[0], Q[1]] = wk * inv[..., Q[0], Q[1]]
    return wbar


def _rw_softmax(d: Tensor) -> Tensor:
    """Eq. 28 as a softmax of -d over each node's in-image directed edges (PyTorch path)."""
    B, K, _, H, W = d.shape
    dd = d.new_full((B, K, 2 * NU, H, W), float("inf"))
    for k, P, Q in regions(H, W):
        dk = d[:, :, k : k + 1, P[0], P[1]]
        dd[:, :, k : k + 1, P[0], P[1]] = dk
        dd[:, :, NU + k : NU + k + 1, Q[0], Q[1]] = dk
    return torch.softmax(-dd, dim=2)


class _RandomWalkFromDistances(torch.autograd.Function):
    """wbar = softmax(-dd) over each node's window (eq. 28); saves its output only."""

    @staticmethod
    def forward(ctx, d: Tensor):  # type: ignore[override]
        if backend.usable(d):
            B, K, _, H, W = d.shape
            wbar = backend.native().random_walk_from_distances(d.contiguous(), d.new_zeros(B, K, 2 * NU, H, W))
        else:
            wbar = _rw_softmax(d)
        ctx.save_for_backward(wbar)
        return wbar

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor):  # type: ignore[override]
        (wbar,) = ctx.saved_tensors
        gdd = -wbar * (g - (wbar * g).sum(dim=2, keepdim=True))  # softmax backward, d(-dd)/d(dd) = -1
        H, W = wbar.shape[-2:]
        gd = gdd.new_zeros(gdd.shape[0], gdd.shape[1], NU, H, W)
        for k, P, Q in regions(H, W):
            torch.add(gdd[:, :, k, P[0], P[1]], gdd[:, :, NU + k, Q[0], Q[1]], out=gd[:, :, k, P[0], P[1]])
        return gd


def random_walk_weights_from_distances(d: Tensor, *, workspace: Optional[dict] = None) -> Tensor:
    """Eq. 28 computed stably from distances ``d`` (B, K, 12, H, W) (:func:`edge_distances`):
    a softmax of ``-d`` over each node's in-image one-hop window, so it never underflows to 0/0.
    Custom autograd (saves wbar). ``workspace``: see :func:`reused_output`."""
    check_weights(d, NU, "d")
    B, K, _, H, W = d.shape
    if H * W == 1:
        return d.new_zeros(B, K, 2 * NU, H, W) + 0 * d.sum()
    if workspace is not None and backend.no_grad_usable(d):
        out = reused_output(workspace, "random_walk_weights", (B, K, 2 * NU, H, W), d)
        return backend.native().random_walk_from_distances(d.contiguous(), out)
    return _RandomWalkFromDistances.apply(d)


def _incidence(wbar: Tensor, x: Tensor) -> Tensor:
    B, _, C, H, W = x.shape
    K = max(wbar.shape[1], x.shape[1])
    e = x.new_empty(B, K, C, 2 * NU, H, W)
    zero_outside(e, H, W)
    for k, P, Q in regions(H, W):
        d = x[..., P[0], P[1]] - x[..., Q[0], Q[1]]
        torch.mul(wbar[:, :, k : k + 1, P[0], P[1]], d, out=e[:, :, :, k, P[0], P[1]])
        torch.mul(wbar[:, :, NU + k : NU + k + 1, Q[0], Q[1]].neg(), d, out=e[:, :, :, NU + k, Q[0], Q[1]])
    return e


def _incidence_t(wbar: Tensor, e: Tensor) -> Tensor:
    B, K, C, _, H, W = e.shape
    out = e.new_zeros(B, K, C, H, W)
    for k, P, Q in regions(H, W):
        t = wbar[:, :, k : k + 1, P[0], P[1]] * e[:, :, :, k, P[0], P[1]]
        t.addcmul_(wbar[:, :, NU + k : NU + k + 1, Q[0], Q[1]], e[:, :, :, NU + k, Q[0], Q[1]], value=-1.0)
        out[..., P[0], P[1]].add_(t)
        out[..., Q[0], Q[1]].sub_(t)
    return out


def _incidence_weight_grad(edges: Tensor, nodes: Tensor, wbar_shape) -> Tensor:
    """``sum_c edges[c, j, p] (nodes_p - nodes_{p+o_j})``: the gradient with respect to wbar of
    ``<edges, C-bar(wbar) nodes>``, the weight gradient of both C-bar and C-bar^T (the same
    bilinear form), summed to ``wbar_shape``."""
    H, W = nodes.shape[-2:]
    gw = torch.zeros(edges.shape[0], edges.shape[1], 2 * NU, H, W, dtype=edges.dtype, device=edges.device)
    for k, P, Q in regions(H, W):
        d = nodes[..., P[0], P[1]] - nodes[..., Q[0], Q[1]]
        gw[:, :, k, P[0], P[1]] = (edges[:, :, :, k, P[0], P[1]] * d).sum(dim=2)
        gw[:, :, NU + k, Q[0], Q[1]] = -(edges[:, :, :, NU + k, Q[0], Q[1]] * d).sum(dim=2)
    return sum_to(gw, wbar_shape)


class _Incidence(torch.autograd.Function):
    """e = C-bar(wbar) x: e[p, j] = wbar[p, j] (x_p - x_{p + o_j})."""

    @staticmethod
    def forward(ctx, wbar: Tensor, x: Tensor):  # type: ignore[override]
        ctx.save_for_backward(wbar, x)
        return _incidence(wbar, x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, ge: Tensor):  # type: ignore[override]
        wbar, x = ctx.saved_tensors
        gw = gx = None
        if ctx.needs_input_grad[1]:
            gx = sum_to(_incidence_t(wbar, ge), x.shape)
        if ctx.needs_input_grad[0]:
            gw = _incidence_weight_grad(ge, x, wbar.shape)
        return gw, gx


class _IncidenceT(torch.autograd.Function):
    """x = C-bar(wbar)^T e, the exact transpose of :class:`_Incidence`."""

    @staticmethod
    def forward(ctx, wbar: Tensor, e: Tensor):  # type: ignore[override]
        ctx.save_for_backward(wbar, e)
        return _incidence_t(wbar, e)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor):  # type: ignore[override]
        wbar, e = ctx.saved_tensors
        gw = ge = None
        if ctx.needs_input_grad[1]:
            ge = sum_to(_incidence(wbar, g), e.shape)
        if ctx.needs_input_grad[0]:
            gw = _incidence_weight_grad(e, g, wbar.shape)
        return gw, ge


def incidence_apply(wbar: Tensor, x: Tensor) -> Tensor:
    """``C-bar x`` (Sec. 5.2, 2M directed edges): ``e[:, :, c, j, p] = wbar[p, j] (x_p - x_{p+o_j})``
    with ``o_j = DIRECTED_OFFSETS[j]``; wbar (B, K|1, 24, H, W), x (B, K, C, H, W) ->
    e (B, K, C, 24, H, W), zero for edges leaving the image. Custom autograd (saves wbar, x)."""
    check_weights(wbar, 2 * NU, "wbar")
    check_signal(wbar, x)
    return _Incidence.apply(wbar, x)


def incidence_adjoint(wbar: Tensor, e: Tensor) -> Tensor:
    """``C-bar^T e``, the exact transpose of :func:`incidence_apply` (borders included):
    e (B, K, C, 24, H, W) -> (B, K, C, H, W). Custom autograd (saves wbar, e)."""
    check_weights(wbar, 2 * NU, "wbar")
    if e.dim() != 6 or e.shape[3] != 2 * NU or e.shape[-2:] != wbar.shape[-2:]:
        raise ValueError(f"edge signal must be (B, K, C, 24, H, W), got {tuple(e.shape)}")
    return _IncidenceT.apply(wbar, e)


def incidence_laplacian_weights(wbar: Tensor) -> Tensor:
    """Undirected weights ``s`` with ``C-bar^T C-bar = L(s)`` (the Laplacian L-bar of Sec. 5.2):
    ``s_pq = wbar(p -> q)^2 + wbar(q -> p)^2``; (B, K, 24, H, W) -> (B, K, 12, H, W)."""
    check_weights(wbar, 2 * NU, "wbar")
    B, K, _, H, W = wbar.shape
    if backend.no_grad_usable(wbar):
        return backend.native().incidence_laplacian_weights(wbar.contiguous(), backend.padded_planes(wbar, B, K, NU, H, W))
    if torch.is_grad_enabled() and wbar.requires_grad:
        return LbarWeights.apply(wbar)
    return lbar_weights(wbar)


def graph_total_variation(wbar: Tensor, x: Tensor) -> Tensor:
    """GTV ``||C-bar x||_1`` (Sec. 2.2 with the normalised incidence) per (batch, head): ``(B, K)``,
    without materialising the edge signal."""
    H, W = x.shape[-2:]
    total = x.new_zeros(broadcast_shape(x.shape[:2], wbar.shape[:2]))
    for k, P, Q in regions(H, W):
        d = (x[..., P[0], P[1]] - x[..., Q[0], Q[1]]).abs()
        ws = wbar[:, :, k : k + 1, P[0], P[1]] + wbar[:, :, NU + k : NU + k + 1, Q[0], Q[1]]
        total = total + (ws * d).sum(dim=(2, 3, 4))
    return total


