"""Hand-written backwards of the graph set-up in :mod:`gsprestore.graph`: degrees, the normalised
weights ``w_pq d_p^-1/2 d_q^-1/2`` (Sec. 5.2) and the L-bar weights ``wbar_pq^2 + wbar_qp^2``.

Plain autograd of their slice formulas (one slice of the 5x5 window per offset) zero-fills and
adds a full weight-sized gradient tensor per slice - 12 per degree, 24 per L-bar - which was a
large part of a training step; each op here writes its gradient once. Values are the same
formulas; tests/test_graph_backward.py checks them against plain autograd and by ``gradcheck``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import backend
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
        return scale_edges(w, dis, torch.zeros(torch.broadcast_shapes(w.shape, dis.shape[:2] + w.shape[2:]),
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
