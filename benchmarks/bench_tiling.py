"""Tiled vs untiled output of one method on real images (issue "Whole images and folders").

For each image: the observation (RGGB mosaic, or the 2x decimation), the method run on the whole
image in one pass, and the same through the tiled engine (``--tile``, ``--overlap``, the
``gsprestore demosaic/upscale2x --tile N --overlap N`` path); prints the PSNR between the two
outputs (target >= 50 dB for uGTV with ``--tile 256 --overlap 32``), the max abs difference, and
each output's PSNR against the ground truth.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_tiling.py ~/datasets/kodak24/kodim01.png \\
        --method ugtv [--weights weights/ugtv_demosaic.pt] --tile 256 --overlap 32
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gsprestore import engine  # noqa: E402
from gsprestore.benchmark import load_ground_truth, make_observation  # noqa: E402
from gsprestore.restorers import get_restorer  # noqa: E402


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("images", nargs="+")
    ap.add_argument("--method", default="ugtv")
    ap.add_argument("--task", default="demosaic", choices=("demosaic", "upscale2x"))
    ap.add_argument("--weights", default=None)
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--overlap", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    opts = {"weights": args.weights} if args.weights else {}
    r = get_restorer(args.method, args.task, **opts)
    rows = []
    for path in args.images:
        gt = load_ground_truth(path)  # (1, 3, H, W)
        y = make_observation(args.task, gt)
        t0 = time.perf_counter()
        with torch.inference_mode():
            whole = r(y, "RGGB")[0].permute(1, 2, 0)
        t1 = time.perf_counter()
        tiled = engine.restore(r, y[0], "RGGB", tile=args.tile, overlap=args.overlap, device="cpu")
        t2 = time.perf_counter()
        ref = gt[0].permute(1, 2, 0)
        row = {"image": os.path.basename(path), "size": list(gt.shape[-2:]), "method": args.method,
               "tile": args.tile, "overlap": args.overlap,
               "psnr_tiled_vs_untiled": psnr(tiled, whole), "max_abs_diff": float((tiled - whole).abs().max()),
               "psnr_untiled_vs_gt": psnr(whole, ref), "psnr_tiled_vs_gt": psnr(tiled, ref),
               "seconds_untiled": t1 - t0, "seconds_tiled": t2 - t1}
        rows.append(row)
        print(f"{row['image']}: tiled vs untiled {row['psnr_tiled_vs_untiled']:.2f} dB (max |diff| "
              f"{row['max_abs_diff']:.2e}); vs ground truth untiled {row['psnr_untiled_vs_gt']:.2f} dB, tiled "
              f"{row['psnr_tiled_vs_gt']:.2f} dB; {row['seconds_untiled']:.1f} s / {row['seconds_tiled']:.1f} s",
              flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
