"""The noisy demosaicking protocol (docs/protocol.md, "Noisy RAW protocol"; issue 49): each test
photo's sRGB curve inverted to a linear RGGB mosaic, Poisson-Gaussian noise of a named level of
:data:`gsprestore.physics.noise.LEVELS` added there (no white balance: the same (a, b) in every
channel; seed = level index x 1000 + image index), the curve applied again; each method restores
the noisy mosaic and its sRGB output is scored against the photo (dataset-MSE PSNR, RGB, full
image, float, unclipped), all methods on the same noisy inputs in one run.

Methods:

* ``ugtv-lite-denoise``: the noise-aware network given the known level (``--weights`` or the
  shipped file);
* ``menon+bm3d`` / ``demosaicnet+bm3d``: Menon 2007 (ours) or demosaicnet 0.0.14's pretrained
  Bayer network (Gharbi et al. 2016; its GRBG grid reached by mirror-padding one column, as in
  docs/protocol.md), then colour BM3D (pip ``bm3d``, ``bm3d_rgb``, default profile) with its sigma
  set from the known level: the RMS over the image of the noise deviation the level gives each
  pixel in the encoded values (:func:`gsprestore.physics.noise.std_map`);
* ``menon``, ``ugtv-lite``, ``demosaicnet``: the demosaickers alone (no denoising), for scale.

BM3D takes 40 s to minutes a McM image on this 2-core machine: ``--limit N`` scores the first N
images of the set and ``--crop S`` their centre S x S pixels (every method on the same inputs; the
crop is taken from the photo before the mosaic, at even coordinates). Results are appended to ``--json`` as they come (a
rerun skips the rows it holds), so a long run can be resumed.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_noisy_protocol.py --dataset mcm --data-dir ../shared/datasets/mcm \\
        --methods ugtv-lite-denoise,menon+bm3d,demosaicnet+bm3d --limit 6 --json noisy-mcm.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from gsprestore.evaluation.datasets import find_dataset
from gsprestore.imageio.images import read_image
from gsprestore.methods.registry import get_restorer
from gsprestore import metrics
from gsprestore.physics import noise as N
from gsprestore.physics.tasks import observation

LEVEL_NAMES = ("low", "medium", "high")


def demosaicnet_restorer():
    """demosaicnet's pretrained Bayer network on an RGGB mosaic ``(1, 1, H, W)``: one mirrored
    column on the left makes the mosaic GRBG (its training grid), one on the right keeps the width
    even; both cropped off after."""
    import demosaicnet

    net = demosaicnet.BayerDemosaick(pad=True).eval()

    def run(y: torch.Tensor) -> torch.Tensor:
        m = torch.nn.functional.pad(y, (1, 1, 0, 0), mode="reflect")
        H, W = m.shape[-2:]
        mask = torch.zeros(1, 3, H, W)
        mask[:, 1, 0::2, 0::2] = 1  # G R / B G
        mask[:, 0, 0::2, 1::2] = 1
        mask[:, 2, 1::2, 0::2] = 1
        mask[:, 1, 1::2, 1::2] = 1
        with torch.inference_mode():
            out = net(m * mask)
        return out[..., :, 1:-1]

    return run


def bm3d_rgb(rgb: torch.Tensor, sigma: float) -> torch.Tensor:
    import bm3d

    x = rgb[0].permute(1, 2, 0).double().numpy()
    out = bm3d.bm3d_rgb(x, sigma)
    return torch.from_numpy(np.ascontiguousarray(out)).permute(2, 0, 1)[None].float()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--data-dir")
    ap.add_argument("--levels", default=",".join(LEVEL_NAMES))
    ap.add_argument("--methods", default="ugtv-lite-denoise,menon+bm3d,demosaicnet+bm3d,menon,ugtv-lite")
    ap.add_argument("--weights", help="ugtv-lite-denoise weights (default: the shipped file)")
    ap.add_argument("--denoise-iters", type=int, default=None,
                    help="CG steps of each of ugtv-lite-denoise's denoising passes instead of its weights' own "
                         "(how the shipped number was chosen on held-out crops)")
    ap.add_argument("--limit", type=int, default=0, help="score only the first N images")
    ap.add_argument("--crop", type=int, default=0, help="score the centre S x S of each image (S even)")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("GSP_THREADS", "1")))
    ds = find_dataset(a.dataset, a.data_dir)
    files = list(ds.files)[: a.limit or None]
    out_path = Path(a.json)
    rows = json.loads(out_path.read_text()) if out_path.exists() else []
    have = {(r["method"], r["level"], r["n_images"], r.get("weights"), r.get("crop", 0), r.get("denoise_iters"))
            for r in rows}
    gts = [torch.from_numpy(np.ascontiguousarray(read_image(f).array)).permute(2, 0, 1)[None].float() for f in files]
    if a.crop:
        def centre(gt: torch.Tensor) -> torch.Tensor:
            H, W = gt.shape[-2:]
            top, left = (H - a.crop) // 4 * 2, (W - a.crop) // 4 * 2
            return gt[..., top:top + a.crop, left:left + a.crop].contiguous()

        gts = [centre(gt) for gt in gts]
    dnet = None
    for level in a.levels.split(","):
        li = LEVEL_NAMES.index(level)
        noise = N.level_params(level)
        ys = [N.noisy_mosaic(gt, noise, seed=li * 1000 + i) for i, gt in enumerate(gts)]
        for method in a.methods.split(","):
            weights = a.weights if method == "ugtv-lite-denoise" else None
            iters = a.denoise_iters if method == "ugtv-lite-denoise" else None
            if (method, level, len(files), weights, a.crop, iters) in have:
                continue
            t0, mses = time.perf_counter(), []
            for gt, y in zip(gts, ys):
                if method == "ugtv-lite-denoise":
                    r = get_restorer(method, "demosaic", noise=noise[0], **({"weights": weights} if weights else {}))
                    if iters is not None:
                        r.module.denoiser.iters = iters
                    x = r(y)
                elif method.startswith("demosaicnet"):
                    dnet = dnet or demosaicnet_restorer()
                    x = dnet(y)
                else:
                    x = get_restorer(method.split("+")[0], "demosaic")(y)
                if method.endswith("+bm3d"):
                    known, mask = observation("demosaic", y)
                    sigma = float(N.std_map(known, mask, noise).pow(2).mean().sqrt())
                    x = bm3d_rgb(x, sigma)
                mses.append(float(metrics.mse(x.float(), gt)[0]))
            row = {"dataset": a.dataset, "level": level, "a": noise[0, 0, 0].item(), "b": noise[0, 0, 1].item(),
                   "method": method, "weights": weights, "n_images": len(files), "crop": a.crop, "denoise_iters": iters,
                   "psnr_dataset_mse": metrics.psnr_dataset_mse(mses), "seconds": time.perf_counter() - t0}
            rows.append(row)
            out_path.write_text(json.dumps(rows, indent=1) + "\n")
            print(f"{a.dataset} {level:6s} {method:20s} {row['psnr_dataset_mse']:.2f} dB  ({row['seconds']:.0f} s, "
                  f"{len(files)} images{f', centre {a.crop}x{a.crop}' if a.crop else ''})", flush=True)


if __name__ == "__main__":
    main()
