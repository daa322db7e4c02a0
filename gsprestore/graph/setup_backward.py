"""Hand-written backwards of the graph set-up in :mod:`gsprestore.graph.operators`: the edge distances and
weights of eq. 27, degrees, the normalised weights ``w_pq d_p^-1/2 d_q^-1/2`` (Sec. 5.2) and the
L-bar weights ``wbar_pq^2 + wbar_qp^2``.

Plain autograd of their slice formulas (one slice of the 5x5 window per offset) zero-fills and
adds a full weight-sized gradient tensor per slice - 12 per degree, 24 per L-bar - which was a
large part of a training step; each op here writes its gradient once. Values are the same
formulas; tests/test_graph_backward.py checks them against plain autograd and by ``gradcheck``.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..core import backend
from ..core.shapes import broadcast_shape
from .window import NU, regions, sum_to

__all__ = ["degree_of", "scale_edges", "ScaleEdges", "lbar_weights", "LbarWeights", "Degree"]


def degree_of(w: Tensor) -> Tensor:
    B, K, _, H, W = w.shape
    if backend.usable(w):
        return backend.native().degree(backend.rows_contiguous(w), w.new_empty(B, K, 1, H, W))
    deg = w.new_zeros(B, K, 1, H, W)
    for k, P, Q in regions(H, W):
        wk = w[:, :, k : k + 1, P[0], P[1]]
        deg[..., P[0], P[1]].add_(wk)
        deg[..., Q[0], Q[1]].add_(wk)
    return deg


class Degree(torch.autograd.Function):
    """deg_p = sum over p's in-image edges of w; backward ``gw[o, p] = gdeg_p + gdeg_{p+o}`` in one
    buffer (plain autograd of the 24 slice updates would zero-fill and add 12 full weight-sized
    tensors)."""

    @staticmethod
    def forward(ctx, w: Tensor):  # type: ignore[override]
        ctx.w_shape = w.shape
        return degree_of(w)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gdeg: Tensor):  # type: ignore[override]
        B, K, _, H, W = ctx.w_shape
        gw = gdeg.new_zeros(B, K, NU, H, W)
        for k, P, Q in regions(H, W):
            torch.add(gdeg[..., P[0], P[1]], gdeg[..., Q[0], Q[1]], out=gw[:, :, k : k + 1, P[0], P[1]])
        return gw


def scale_edges(w: Tensor, dis: Tensor, out: Tensor) -> Tensor:
    """``out[o, p] = w[o, p] dis_p dis_{p+o}`` on the in-image edges (``out`` zero elsewhere)."""
    for k, P, Q in regions(*w.shape[-2:]):
        torch.mul(w[:, :, k : k + 1, P[0], P[1]], dis[..., P[0], P[1]], out=out[:, :, k : k + 1, P[0], P[1]])
        out[:, :, k : k + 1, P[0], P[1]].mul_(dis[..., Q[0], Q[1]])
    return out


class ScaleEdges(torch.autograd.Function):
    """(w, dis) -> w_pq dis_p dis_q with a backward that writes each gradient once (plain
    autograd of the 12 slice assignments zero-fills a full weight-sized tensor per slice)."""

    @staticmethod
    def forward(ctx, w: Tensor, dis: Tensor):  # type: ignore[override]
        ctx.save_for_backward(w, dis)
        return scale_edges(w, dis, torch.zeros(broadcast_shape(w.shape, dis.shape[:2] + w.shape[2:]),
                                                dtype=w.dtype, device=w.device))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gwn: Tensor):  # type: ignore[override]
        w, dis = ctx.saved_tensors
        gw = scale_edges(gwn, dis, torch.zeros_like(gwn)) if ctx.needs_input_grad[0] else None
        gdis = None
        if ctx.needs_input_grad[1]:
            gdis = torch.zeros(gwn.shape[:2] + dis.shape[2:], dtype=dis.dtype, device=dis.device)
            for k, P, Q in regions(*w.shape[-2:]):
                t = gwn[:, :, k : k + 1, P[0], P[1]] * w[:, :, k : k + 1, P[0], P[1]]
                gdis[..., P[0], P[1]].addcmul_(t, dis[..., Q[0], Q[1]])
                gdis[..., Q[0], Q[1]].addcmul_(t, dis[..., P[0], P[1]])
            gdis = sum_to(gdis, dis.shape)
        return None if gw is None else sum_to(gw, w.shape), gdis


def lbar_weights(wbar: Tensor) -> Tensor:
    B, K, _, H, W = wbar.shape
    s = wbar.new_zeros(B, K, NU, H, W)
    for k, P, Q in regions(H, W):
        torch.mul(wbar[:, :, k, P[0], P[1]], wbar[:, :, k, P[0], P[1]], out=s[:, :, k, P[0], P[1]])
        s[:, :, k, P[0], P[1]].addcmul_(wbar[:, :, NU + k, Q[0], Q[1]], wbar[:, :, NU + k, Q[0], Q[1]])
    return s


class LbarWeights(torch.autograd.Function):
    """s_pq = wbar(p -> q)^2 + wbar(q -> p)^2; backward ``2 wbar gs`` written once per directed
    edge (saves wbar)."""

    @staticmethod
    def forward(ctx, wbar: Tensor):  # type: ignore[override]
        ctx.save_for_backward(wbar)
        return lbar_weights(wbar)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gs: Tensor):  # type: ignore[override]
        (wbar,) = ctx.saved_tensors
        gw = torch.zeros_like(wbar)
        for k, P, Q in regions(*wbar.shape[-2:]):
            g = gs[:, :, k, P[0], P[1]]
            torch.mul(wbar[:, :, k, P[0], P[1]], g, out=gw[:, :, k, P[0], P[1]]).mul_(2.0)
            torch.mul(wbar[:, :, NU + k, Q[0], Q[1]], g, out=gw[:, :, NU + k, Q[0], Q[1]]).mul_(2.0)
        return gw


# edge distances and weights (eq. 27) from features and a PSD metric

def metric4(metric: Tensor) -> Tensor:
    """Metric as ``(B' or 1, K' or 1, F, F)``, symmetrised (d only sees the symmetric part)."""
    if metric.dim() == 2:
        metric = metric[None, None]
    elif metric.dim() == 3:
        metric = metric[None]
    elif metric.dim() != 4:
        raise ValueError(f"metric must be (F, F), (K, F, F) or (B, K, F, F), got {tuple(metric.shape)}")
    return 0.5 * (metric + metric.transpose(-1, -2))


def apply_metric(m4: Tensor, f: Tensor) -> Tensor:
    """``M f`` per pixel: ``(B', K', F, F) x (B, K, F, H, W) -> (B, K, F, H, W)``."""
    B, K, F, H, W = f.shape
    return torch.matmul(m4, f.reshape(B, K, F, H * W)).reshape(B, K, F, H, W)


def native_edge_distances(features: Tensor, mf: Tensor, exp: bool, out: Tensor) -> Tensor:
    """The native distance (``exp``: weight) kernel into ``out`` (B, K, 12, H, W), zeroed where
    edges leave the image; ``mf`` = M f (:func:`apply_metric`)."""
    B, Kout, _, H, W = out.shape
    F = features.shape[2]
    return backend.native().edge_distances(features.contiguous(), mf.expand(B, Kout, F, H, W).contiguous(), out, exp)


class EdgeWeights(torch.autograd.Function):
    """w = exp(-d) (``exp=True``) or d itself, d_pq = (f_p - f_q)^T M (f_p - f_q) (eq. 27).
    ``metric=None``: features already projected by a factor of the metric (g = A^T f, M = A A^T,
    as :meth:`~gsprestore.models.unrolled.UnrolledBlock.graph_weights` computes them), so
    d = |g_p - g_q|^2 and the backward is the features' gradient alone (one native pass on the
    CPU: each pixel gathers its 24 edge terms)."""

    @staticmethod
    def forward(ctx, features: Tensor, metric: Optional[Tensor], exp: bool):  # type: ignore[override]
        B, K, F, H, W = features.shape
        if metric is None:
            mf, Kout = features, K
        else:
            m4 = metric4(metric)
            mf, Kout = apply_metric(m4, features), max(K, m4.shape[1])
        ctx.exp = exp
        if backend.usable(features, mf):
            out = native_edge_distances(features, mf, exp, features.new_zeros(B, Kout, NU, H, W))
            ctx.save_for_backward(features, metric, out if exp else None)
            return out
        out = features.new_zeros(B, Kout, NU, H, W)
        for k, P, Q in regions(H, W):
            diff = features[..., P[0], P[1]] - features[..., Q[0], Q[1]]
            mdiff = diff if metric is None else mf[..., P[0], P[1]] - mf[..., Q[0], Q[1]]
            d = (diff * mdiff).sum(dim=2)
            if exp:
                torch.exp(d.neg_(), out=out[:, :, k, P[0], P[1]])
            else:
                out[:, :, k, P[0], P[1]] = d
        ctx.save_for_backward(features, metric, out if exp else None)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        features, metric, w = ctx.saved_tensors
        B, K, F, H, W = features.shape
        # dL/dd: for w = exp(-d), dL/dd = -dL/dw * w
        gd = -grad_out * w if ctx.exp else grad_out
        need_f, need_m = ctx.needs_input_grad[0], metric is not None and ctx.needs_input_grad[1]
        if metric is None and need_f and backend.usable(features, gd):
            gf = backend.native().edge_distances_backward(features.contiguous(), gd.contiguous(),
                                                          torch.empty_like(features, memory_format=torch.contiguous_format))
            return gf, None, None
        m4 = None if metric is None else metric4(metric)
        mf = features if m4 is None else apply_metric(m4, features)
        gf = torch.zeros_like(features) if need_f else None
        Kout = gd.shape[1]
        gm = features.new_zeros(B, Kout, F, F) if need_m else None
        for k, P, Q in regions(H, W):
            g = gd[:, :, k : k + 1, P[0], P[1]]  # (B, K, 1, h, w)
            diff = features[..., P[0], P[1]] - features[..., Q[0], Q[1]]
            if need_f:
                mdiff = diff if m4 is None else mf[..., P[0], P[1]] - mf[..., Q[0], Q[1]]
                t = sum_to(2.0 * g * mdiff, gf[..., P[0], P[1]].shape)
                gf[..., P[0], P[1]].add_(t)
                gf[..., Q[0], Q[1]].sub_(t)
            if need_m:
                gdiff = g * diff  # (B, Kout, F, h, w)
                gm += torch.matmul(gdiff.flatten(3), diff.expand_as(gdiff).flatten(3).transpose(-1, -2))
        if need_m:
            gm = 0.5 * (gm + gm.transpose(-1, -2))  # gradient through the symmetrisation
            gm = sum_to(gm, m4.shape).reshape(metric.shape)
        return gf, gm, None
