"""What the speed measurements share (``benchmarks/bench_*.py``, the cost model, the GPU job): a
synthetic image or mosaic to time on, the best of several timings, and the plain CNN of demosaicnet's shape that the graph
networks are compared against (issue 16's CPU target)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import nn


def synthetic_rgb(h: int, w: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    """Smooth colour texture with edges (a stand-in for a photo; timing is data-independent)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(batch, 3, h // 8 + 1, w // 8 + 1, generator=g)
    img = torch.nn.functional.interpolate(base, size=(h, w), mode="bilinear", align_corners=False)
    edges = (torch.rand(batch, 1, h // 32 + 1, w // 32 + 1, generator=g) > 0.5).float()
    edges = torch.nn.functional.interpolate(edges, size=(h, w), mode="nearest")
    return (0.7 * img + 0.3 * edges).clamp(0, 1)


def synthetic_mosaic(megapixels: float, pattern: str = "RGGB") -> torch.Tensor:
    """A 3:2 Bayer mosaic of smooth colour waves plus texture, float32 (1, H, W), built row block by
    row block so the generator itself stays small (a 24-MP mosaic for the GPU's throughput)."""
    import numpy as np

    from gsprestore.physics.sampling import bayer_masks

    w = int(math.sqrt(megapixels * 1e6 * 3 / 2)) // 2 * 2
    h = int(megapixels * 1e6 / w) // 2 * 2
    out = torch.empty(1, h, w)
    x = np.arange(w, dtype=np.float32)
    rng = np.random.default_rng(0)
    for r0 in range(0, h, 512):
        r1 = min(h, r0 + 512)
        y = np.arange(r0, r1, dtype=np.float32)[:, None]
        rgb = np.stack([0.5 + 0.3 * np.sin(x / (40 + 13 * c) + y / (57 + 7 * c)) * np.cos(y / 300 + c) for c in range(3)])
        rgb += 0.02 * rng.standard_normal(rgb.shape, dtype=np.float32)
        m = bayer_masks(r1 - r0, w, pattern).numpy()  # r0 is even: same phase
        out[0, r0:r1] = torch.from_numpy((rgb * m).sum(0))
    return out


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """The shortest wall time of ``repeats`` calls of ``fn``, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


class DemosaicnetShape(nn.Module):
    """demosaicnet's BayerDemosaick layer shapes (depth 15, width 64), random weights.

    Gharbi et al. 2016's demosaicnet rebuilt with ``torch.nn`` for timing only: the mosaic packed
    2x2 into 4 channels at half resolution, 15 3x3 convolutions with ReLU (4 -> 64, 13 x 64 -> 64,
    64 -> 128), the last layer's two halves multiplied (filters x masks), a 1x1 conv to 12
    channels, a grouped 2x2 transposed conv to RGB at full resolution, concatenated with the
    3-channel mosaic, a 3x3 conv 6 -> 64 with ReLU and a 1x1 conv to 3: 560,834 parameters
    (demosaicnet: 561k). Zero padding keeps the size (the original crops; the arithmetic is the
    same to within the borders)."""

    def __init__(self, depth: int = 15, width: int = 64):
        super().__init__()
        layers = []
        for i in range(depth):
            n_in = 4 if i == 0 else width
            n_out = 2 * width if i == depth - 1 else width
            layers += [nn.Conv2d(n_in, n_out, 3, padding=1), nn.ReLU(inplace=True)]
        self.main = nn.Sequential(*layers)
        self.width = width
        self.residual = nn.Conv2d(width, 12, 1)
        self.up = nn.ConvTranspose2d(12, 3, 2, stride=2, groups=3)
        self.fullres = nn.Sequential(nn.Conv2d(6, width, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(width, 3, 1))

    def forward(self, mosaic3: torch.Tensor) -> torch.Tensor:
        """``mosaic3`` (B, 3, H, W): the RGGB mosaic as three masked channels."""
        packed = torch.cat([mosaic3[:, 0:1, 0::2, 0::2], mosaic3[:, 1:2, 0::2, 1::2],
                            mosaic3[:, 1:2, 1::2, 0::2], mosaic3[:, 2:3, 1::2, 1::2]], dim=1)
        f = self.main(packed)
        filtered = f[:, : self.width] * f[:, self.width :]
        up = self.up(self.residual(filtered))
        return self.fullres(torch.cat([up, mosaic3], dim=1))
