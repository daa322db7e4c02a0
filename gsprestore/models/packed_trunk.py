"""The graph-learning features of the CPU-size networks (``feature_trunk="packed"``, issue 39):
one feature CNN shared by every block, run once per forward at half resolution on the packed
2x2 grid, and a cheap per-block head that unpacks it to per-pixel features.

The paper's networks (``feature_trunk="per-block"``) run a 4-layer, 48-wide 3x3 CNN on the
full-resolution estimate x^t in each of their 5 blocks: ~317k multiply-adds a pixel, half of
uGTV's CPU time. Here:

* the trunk (:class:`PackedTrunk`) is a :class:`~gsprestore.models.feature_cnn.FeatureCNN` on the
  observation packed 2x2 -> 1 (demosaicking: the Bayer mosaic's four phases R, G1, G2, B as
  four channels, the layout demosaicnet's CNN reads; 2x: the low-resolution image itself, which
  *is* the 2x grid's phase (0, 0)). It sees the observation, not an estimate, so it runs once,
  and at a quarter of the pixels: a 64-wide 4-layer trunk costs ~28k multiply-adds an output pixel;
* each block's head (:class:`BlockFeatureHead`) maps the trunk's features to the block's
  ``heads x features`` per-pixel features: a 1x1 convolution to 4 x that many channels at half
  resolution, a pixel shuffle (each of the four pixels of a 2x2 cell gets its own vector), plus a
  1x1 convolution of the block's current estimate x^t (so the graph of block t still depends on
  x^t, as in Sec. 5.2). ~(trunk width + C) x heads x features multiply-adds a pixel.

What follows is the paper's graph learning unchanged: the metric M_k = A_k A_k^T of eq. 27 on
these features, the 5x5-window edge weights, the unrolled GLR / GTV solvers.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .feature_cnn import FeatureCNN, luma


def packed_observation(known: Tensor, cnn_input: str) -> Tensor:
    """The trunk's input from ``known = H^T y`` ``(B, C, H, W)`` (H, W even): demosaicking
    (``cnn_input="estimate"``), the RGGB mosaic packed 2x2 -> ``(B, 4, H/2, W/2)`` (R, G1, G2, B:
    the mosaic is the sum of ``known``'s channels, one of which is non-zero at each pixel);
    2x (``"luma"``), the low-resolution samples ``known[..., 0::2, 0::2]`` reduced to their luma,
    ``(B, 1, H/2, W/2)``."""
    if cnn_input == "luma":
        return luma(known[..., 0::2, 0::2])
    return F.pixel_unshuffle(known.sum(dim=1, keepdim=True), 2)


class PackedTrunk(nn.Module):
    """The shared feature CNN at half resolution: ``(B, in, H/2, W/2)`` -> ``(B, width, H/2, W/2)``."""

    def __init__(self, in_channels: int, width: int, layers: int):
        super().__init__()
        self.cnn = FeatureCNN(in_channels, width, layers)

    def forward(self, packed: Tensor) -> Tensor:
        return self.cnn.features_any_layout(packed)


class BlockFeatureHead(nn.Module):
    """Block t's features ``(B, out, H, W)`` from the trunk's ``(B, width, H/2, W/2)`` and the
    estimate x^t's CNN input ``(B, C, H, W)``: ``shuffle(W_1 trunk) + W_2 x^t``."""

    def __init__(self, trunk_width: int, in_channels: int, out_channels: int):
        super().__init__()
        self.unpack = nn.Conv2d(trunk_width, 4 * out_channels, 1)
        self.estimate = nn.Conv2d(in_channels, out_channels, 1, bias=False)

    def forward(self, trunk: Tensor, x: Tensor) -> Tensor:
        f = F.pixel_shuffle(self.unpack(trunk), 2)
        if f.shape[-2:] != x.shape[-2:]:  # odd sizes: the trunk ran on the padded image
            f = f[..., : x.shape[-2], : x.shape[-1]]
        return f + self.estimate(x)

    def projected(self, trunk: Tensor, x: Tensor, factor: Tensor, workspace: dict | None = None, *,
                  luma_input: bool = False) -> Tensor | None:
        """Inference: ``g = A_k^T f`` ``(B, K, F, H, W)`` (:func:`gsprestore.graph.operators.project_features`
        of :meth:`forward`'s features of the trunk and the estimate ``x`` (its luma where
        ``luma_input``) by the metric factors ``factor`` ``(K, F, F)``) by one native
        kernel, ``A_k^T`` folded into both convolutions' weights (the same sum, in another order:
        equal to rounding). Four passes over the full-resolution features (the shuffle, the
        estimate's 1x1 convolution, their sum, the projection) become one. ``workspace``: the
        output buffer is kept there (:func:`gsprestore.graph.operators.reused_output`). None where
        the native kernels cannot run (autograd, autocast, a GPU, the PyTorch backend chosen)."""
        import torch

        from ..core import backend
        from ..graph.operators import reused_output

        if (torch.is_grad_enabled() or torch.is_autocast_enabled()
                or not backend.no_grad_usable(trunk, x, factor, self.unpack.weight)):
            return None
        if luma_input:
            x = luma(x)
        K, Fd, _ = factor.shape
        B, _, H, W = x.shape
        out = reused_output(workspace, "projected_features", (B, K, Fd, H, W), x)
        out = x.new_empty(B, K, Fd, H, W) if out is None else out
        ct, ce = self.unpack.in_channels, self.estimate.in_channels
        at = factor.transpose(-1, -2).to(x.dtype)  # at[k, c, e] = A_k[e, c]
        # unpack's output channel (k F + e) * 4 + phase is feature k F + e at that 2x2 phase
        w1 = torch.einsum("kce,kepx->pkcx", at, self.unpack.weight.to(x.dtype).view(K, Fd, 4, ct))
        bias = self.unpack.bias if self.unpack.bias is not None else torch.zeros(4 * K * Fd)
        b1 = torch.einsum("kce,kep->pkc", at, bias.to(x.dtype).view(K, Fd, 4))
        w2 = torch.einsum("kce,kex->kcx", at, self.estimate.weight.to(x.dtype).view(K, Fd, ce))
        backend.native().head_project(trunk.to(x.dtype), backend.rows_contiguous(x),
                                      w1.reshape(4, K * Fd, ct).contiguous(), b1.reshape(4, K * Fd).contiguous(),
                                      w2.reshape(K * Fd, ce).contiguous(), out.view(B, K * Fd, H, W))
        return out
