"""PSNR of the shipped graph models in fp32 against reduced precision (issue 16: "fp32 and bf16,
state the PSNR change").

The scoring is :mod:`gsprestore_lab.precision`'s (the GPU job uses it too). On the CPU autocast emulates bf16 /
fp16 (slow, but the rounding of the CNN is the same kind as cuDNN's), so the change measured
here is an indication of the GPU's; on a GPU (``--device cuda``) it is the real thing.

Scores are dataset-MSE PSNR over all images (demosaic: RGB; 2x: BT.601 Y), no border crop,
images cut to even sizes. Use held-out images (the training pack's ``val/`` crops), not a test set.

    .venv/bin/python benchmarks/precision_psnr.py carry/pack/val --limit 64
    python benchmarks/precision_psnr.py carry/pack/val --device cuda
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from gsprestore_lab.precision import load_crops, precision_psnr
from gsprestore.methods.weights import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--limit", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default="ugtv_demosaic,uglr_demosaic,ugtv_upscale2x,uglr_upscale2x")
    ap.add_argument("--precisions", default="bf16,fp16")
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = torch.device(args.device)
    images = load_crops(args.folder, args.limit)
    print(f"{len(images)} images from {args.folder}, device {dev}")
    report = {"folder": str(args.folder), "images": len(images), "device": str(dev), "models": {}}
    for name in args.models.split(","):
        method, task = name.split("_", 1)
        model = load_model(method, task).to(dev).eval()
        rec = {}
        for prec in ["fp32", *args.precisions.split(",")]:
            db, secs = precision_psnr(model, task, images, dev, prec)
            rec[prec] = {"psnr_db": round(db, 4), "seconds": round(secs, 1)}
        for prec in args.precisions.split(","):
            rec[prec]["change_db"] = round(rec[prec]["psnr_db"] - rec["fp32"]["psnr_db"], 4)
        report["models"][name] = rec
        print(f"  {name}: fp32 {rec['fp32']['psnr_db']:.3f} dB; "
              + "; ".join(f"{p} {rec[p]['psnr_db']:.3f} dB ({rec[p]['change_db']:+.3f})" for p in args.precisions.split(",")),
              flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
