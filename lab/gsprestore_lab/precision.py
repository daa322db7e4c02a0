"""The PSNR change of reduced precision (issue 16: "fp32 and bf16, state the PSNR change"): a graph
network scored on held-out crops in fp32 and under ``torch.autocast`` (``benchmarks/precision_psnr.py``
and the GPU job, ``lab/tools/device_train.py``).

Reduced precision runs the feature CNN under autocast; the graphs and solvers stay float32
(``UnrolledBlock.projected_features`` casts back). Scores are the PSNR of the mean squared error
over every pixel of every crop (the dataset-MSE PSNR when the crops are one size, as the training
pack's are) in the task's protocol space (:func:`gsprestore.physics.tasks.score_space`), no border
crop, crops cut to even sizes, the output clipped to [0, 1] as a written image is."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from gsprestore import metrics
from gsprestore.physics.tasks import network_input, score_space

#: autocast's dtype of each precision (None: no autocast).
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}

#: The crop files :func:`load_crops` reads.
CROP_SUFFIXES = (".png", ".webp", ".tif", ".tiff", ".jpg")


def load_crops(folder: str | Path, limit: int) -> list[torch.Tensor]:
    """The first ``limit`` images of ``folder`` (sorted by name) as float ``(3, H, W)`` in [0, 1],
    cut to even sizes; ValueError when there is none."""
    from PIL import Image

    folder = Path(folder)
    paths = sorted(p for p in folder.iterdir() if p.suffix.lower() in CROP_SUFFIXES)[:limit]
    if not paths:
        raise ValueError(f"{folder}: no images")
    out = []
    for p in paths:
        with Image.open(p) as im:
            a = np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0
        h, w = a.shape[0] // 2 * 2, a.shape[1] // 2 * 2
        out.append(torch.from_numpy(a[:h, :w]).permute(2, 0, 1).contiguous())
    return out


def precision_psnr(model: torch.nn.Module, task: str, crops: list[torch.Tensor], dev: torch.device,
                   precision: str) -> tuple[float, float]:
    """PSNR (dB) of the squared error summed over all pixels of ``crops`` (see the module's text) of
    ``model`` at ``precision`` (a key of :data:`DTYPES`), and the seconds it took."""
    space = score_space(task)
    dtype = DTYPES[precision]
    sq, n = 0.0, 0
    t0 = time.perf_counter()
    for gt in crops:
        gt = gt[None].to(dev)
        with torch.no_grad(), torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            est = model(*network_input(task, gt)).float().clamp(0, 1)
        est, gt = metrics.to_space(est, space), metrics.to_space(gt, space)
        sq += float(((est - gt) ** 2).sum())
        n += gt.numel()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return float(metrics.psnr_from_mse(sq / n)), time.perf_counter() - t0
