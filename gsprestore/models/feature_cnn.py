"""The shallow feature CNN of the graph-learning module (appendix "Experimental Details"), shared by
the paper-size networks (one per block, on the estimate x^t) and the CPU-size ones (one trunk on
the packed observation, :mod:`.packed_trunk`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .constants import constant

#: BT.601 luma weights (R, G, B) used when the CNN input is ``"luma"``.
LUMA_WEIGHTS: tuple[float, float, float] = (0.299, 0.587, 0.114)


def luma(x: Tensor) -> Tensor:
    """``(B, C, H, W)`` -> ``(B, 1, H, W)``: BT.601 luma for C = 3, the channel for C = 1,
    the channel mean otherwise."""
    C = x.shape[-3]
    if C == 1:
        return x
    if C == 3:
        w = constant(LUMA_WEIGHTS, x.dtype, x.device).view(3, 1, 1)
        return (x * w).sum(dim=-3, keepdim=True)
    return x.mean(dim=-3, keepdim=True)


class FeatureCNN(nn.Module):
    """The shallow feature CNN of the graph-learning module (appendix "Experimental Details"):
    ``layers`` 3x3 convolutions with ``width`` maps, a ReLU after each, no down-sampling.

    Skip connections: identity (residual) shortcuts around every layer after the first,
    ``h_1 = relu(conv_1(x))`` and ``h_l = h_{l-1} + relu(conv_l(h_{l-1}))`` for l >= 2, so the
    output mixes every depth (receptive fields 3, 5, 7, 9) at no parameter cost.
    ``out_channels`` must equal ``width`` for the last shortcut (48 = 4 heads x 12 features).
    Replicate padding keeps borders free of the dark rim zero padding would suggest.
    """

    def __init__(self, in_channels: int, width: int = 48, layers: int = 4):
        super().__init__()
        if layers < 1:
            raise ValueError("the feature CNN needs at least one layer")
        self.convs = nn.ModuleList(
            nn.Conv2d(in_channels if i == 0 else width, width, 3, padding=1, padding_mode="replicate")
            for i in range(layers)
        )

    @property
    def radius(self) -> int:
        return len(self.convs)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` -> ``(B, width, H, W)``, contiguous."""
        return to_contiguous(self.features_any_layout(x))

    def features_any_layout(self, x: Tensor) -> Tensor:
        """:meth:`forward` without the final layout change: channels-last on the CPU at inference
        (for a consumer that can read it: see :meth:`UnrolledBlock.projected_features`)."""
        if torch.is_grad_enabled() or min(x.shape[-2:]) < 2:
            h = F.relu(self.convs[0](x))
            for conv in self.convs[1:]:
                h = h + F.relu(conv(h))
            return h
        # inference: the same values with fewer passes, in the channels-last layout, where
        # oneDNN's CPU convolution runs ~1.5x faster than on NCHW tensors
        if x.device.type == "cpu":
            x = x.contiguous(memory_format=torch.channels_last)
        h = _conv3x3_replicate(self.convs[0], x, relu=True)
        for conv in self.convs[1:]:
            h.add_(_conv3x3_replicate(conv, h, relu=True))
        return h


def to_contiguous(h: Tensor, chunk: int = 4096) -> Tensor:
    """``h.contiguous()`` of a (B, C, H, W) tensor; from channels-last, transposed ``chunk``
    pixels at a time (cache-sized blocks: ~6x faster than one strided copy of the whole tensor)."""
    if h.is_contiguous() or not h.is_contiguous(memory_format=torch.channels_last):
        return h.contiguous()
    B, C, H, W = h.shape
    src = h.permute(0, 2, 3, 1).reshape(B, H * W, C)  # a view: channels-last memory is (B, H, W, C)
    out = h.new_empty(B, C, H * W)
    for i in range(0, H * W, chunk):
        out[:, :, i : i + chunk].copy_(src[:, i : i + chunk].transpose(1, 2))
    return out.view(B, C, H, W)


def _conv3x3_replicate(conv: nn.Conv2d, x: Tensor, relu: bool = False) -> Tensor:
    """``conv(x)`` (``relu``: ``relu(conv(x))``) of a 3x3 ``padding_mode="replicate"`` convolution
    without the padded copy of ``x``: a zero-padded convolution, then the outermost rows and
    columns (the only outputs the padding reaches) recomputed from thin replicate-padded strips.
    The ReLU is the convolution's post-op where :func:`_fused_relu` allows it."""
    H, W = x.shape[-2:]
    out = _conv_with_relu(x, conv) if relu and _fused_relu(x) else None
    fused = out is not None
    if out is None:
        out = F.conv2d(x, conv.weight, conv.bias, padding=1)
    for rows, cols, pad, (r0, c0) in (
        (slice(0, 2), slice(None), (1, 1, 1, 0), (0, 0)),
        (slice(H - 2, H), slice(None), (1, 1, 0, 1), (H - 1, 0)),
        (slice(None), slice(0, 2), (1, 0, 1, 1), (0, 0)),
        (slice(None), slice(W - 2, W), (0, 1, 1, 1), (0, W - 1)),
    ):
        edge = F.conv2d(F.pad(x[..., rows, cols], pad, mode="replicate"), conv.weight, conv.bias)
        out[..., r0 : r0 + edge.shape[-2], c0 : c0 + edge.shape[-1]] = edge.relu_() if fused else edge
    return out.relu_() if relu and not fused else out


def _fused_relu(x: Tensor) -> bool:
    """Whether the ReLU may be the convolution's post-op: on the CPU in float32, oneDNN's
    convolution with a ReLU (the op PyTorch's own compiler emits for this pair; one pass over the
    output less), unless that op is missing or the PyTorch formulas were chosen
    (``gsprestore.core.backend.use("torch")``)."""
    from ..core import backend

    return x.device.type == "cpu" and x.dtype == torch.float32 and _POINTWISE is not None and backend.usable(x)


def _conv_with_relu(x: Tensor, conv: nn.Conv2d) -> Tensor | None:
    """oneDNN's zero-padded 3x3 convolution with the ReLU post-op, or None (and never again in
    this process) where this build refuses it."""
    global _POINTWISE
    try:
        return _POINTWISE(x, conv.weight, conv.bias, [1, 1], [1, 1], [1, 1], 1, "relu", [], "")
    except RuntimeError:
        _POINTWISE = None
        return None


def _pointwise_op():
    try:
        return torch.ops.mkldnn._convolution_pointwise if torch.backends.mkldnn.is_available() else None
    except (AttributeError, RuntimeError):
        return None


_POINTWISE = _pointwise_op()
