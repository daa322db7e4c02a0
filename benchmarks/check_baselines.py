"""Check the classical baselines against their references on real photographs.

Demosaicking: PSNR between gsprestore's output (float32 by default) and colour-demosaicing 0.2.7's
(float64) on every image of each dataset folder, for every Bayer pattern, over the WHOLE image
(borders included, all three channels, no clipping); prints the minimum per method/pattern, and
the dataset-MSE PSNR (docs/protocol.md) of ours and of the reference against the ground truth.

2x interpolation: dataset-MSE PSNR (docs/protocol.md) on BT.601 studio Y of ``upscale_bicubic`` and
``upscale_bicubic_halfpixel`` (LR = HR[0::2, 0::2] of the 8-bit image / 255, float, unclipped,
full image), and the largest difference between ``upscale_bicubic_halfpixel`` and
``cv2.resize(..., INTER_CUBIC)``.

Usage: python benchmarks/check_baselines.py ~/datasets [--dtype float32|float64]
       [--methods bilinear,malvar,menon,bicubic] [--reference-input same|exact8bit] [--bicubic-search]
(the folder holds ``kodak24/`` and/or ``mcm/``; a dataset folder itself also works).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from gsprestore.methods import classical_methods as baselines
from gsprestore.imageio.images import read_image
from gsprestore.physics.sampling import PATTERNS, mosaic

DEMOSAIC = {
    "bilinear": (baselines.demosaic_bilinear, "demosaicing_CFA_Bayer_bilinear"),
    "malvar": (baselines.demosaic_malvar, "demosaicing_CFA_Bayer_Malvar2004"),
    "menon": (baselines.demosaic_menon, "demosaicing_CFA_Bayer_Menon2007"),
}


def dataset_dirs(root: Path) -> list[Path]:
    subs = [root / n for n in ("mcm", "kodak24") if (root / n).is_dir()]
    return subs or [root]


def load(folder: Path) -> list[tuple[str, np.ndarray]]:
    """(name, float64 (H, W, 3) array of the integer pixel values / (2**bits - 1)), cropped to even."""
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".png", ".tif", ".tiff"))
    out = []
    for p in files:
        im = read_image(p)
        peak = 2**im.bit_depth - 1
        a = np.round(im.array[..., :3].astype(np.float64) * peak) / peak
        h, w = a.shape[:2]
        out.append((p.name, np.ascontiguousarray(a[: h // 2 * 2, : w // 2 * 2])))
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


def luma(rgb: np.ndarray) -> np.ndarray:
    """BT.601 studio Y of an (H, W, 3) float image in [0, 1] (docs/protocol.md)."""
    return (16 + 65.481 * rgb[..., 0] + 128.553 * rgb[..., 1] + 24.966 * rgb[..., 2]) / 255


def _extend(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    i = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if mode == "mirror":  # whole-sample symmetric (d c b | a b c d)
        p = 2 * (n - 1)
        i = np.mod(i, p)
        return np.where(i >= n, p - i, i)
    p = 2 * n  # "reflect": half-sample symmetric (c b a | a b c d)
    i = np.mod(i, p)
    return np.where(i >= n, p - 1 - i, i)


def aligned_cubic_numpy(lr: np.ndarray, a: float, mode: str) -> np.ndarray:
    """Independent numpy version of a grid-aligned 2x cubic with any border: even outputs copy
    ``lr``, odd ones use Keys' weights ``[a, 4 - a, 4 - a, a] / 8`` (for the parameter search)."""
    w = np.array([a, 4 - a, 4 - a, a]) / 8
    out = lr
    for axis in (0, 1):
        x = np.moveaxis(out, axis, 0)
        n = x.shape[0]
        xp = x[_extend(n, 1, 2, mode)]
        odd = sum(w[k] * xp[k : k + n] for k in range(4))
        y = np.empty((2 * n,) + x.shape[1:])
        y[0::2], y[1::2] = x, odd
        out = np.moveaxis(y, 0, axis)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--methods", default="bilinear,malvar,menon,bicubic",
                    help="comma list among bilinear, malvar, menon, bicubic (= both bicubics)")
    ap.add_argument("--bicubic-search", action="store_true",
                    help="also print the aligned-cubic Y-PSNR for a in {-0.5, -0.75} x border modes")
    ap.add_argument("--reference-input", default="same", choices=["same", "exact8bit"],
                    help="same: the reference gets our mosaic cast to float64; exact8bit: it gets the "
                         "8-bit values / 255 computed in float64 (as docs/protocol.md's measured rows)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")  # scipy.ndimage.filters deprecation inside colour-demosaicing
    import colour_demosaicing
    import cv2

    dtype = getattr(torch, args.dtype)
    methods = set(args.methods.split(","))
    t0 = time.perf_counter()
    for folder in dataset_dirs(args.data_dir):
        images = load(folder)
        print(f"== {folder.name}: {len(images)} images, ours in {args.dtype}, reference input: {args.reference_input}")
        for method, (ours, ref_name) in DEMOSAIC.items():
            if method not in methods:
                continue
            ref_fn = getattr(colour_demosaicing, ref_name)
            for pattern in PATTERNS:
                worst, worst_name, worst_diff = math.inf, "", 0.0
                gt_mse: dict[str, list[float]] = {"ours": [], "ref": []}
                for name, rgb in images:
                    x = torch.from_numpy(rgb).permute(2, 0, 1)[None].to(dtype)
                    raw = mosaic(x, pattern)
                    out = ours(raw, pattern)[0].permute(1, 2, 0).double().numpy()
                    if args.reference_input == "exact8bit":
                        ref_raw = mosaic(torch.from_numpy(rgb).permute(2, 0, 1)[None], pattern)
                    else:
                        ref_raw = raw.double()
                    ref = ref_fn(ref_raw[0, 0].numpy(), pattern)
                    p = psnr(out, ref)
                    gt_mse["ours"].append(float(np.mean((out - rgb) ** 2)))
                    gt_mse["ref"].append(float(np.mean((ref - rgb) ** 2)))
                    worst_diff = max(worst_diff, float(np.abs(out - ref).max()))
                    if p < worst:
                        worst, worst_name = p, name
                gt = {k: 10 * math.log10(1 / np.mean(v)) for k, v in gt_mse.items()}
                print(f"{method:9s} {pattern}  min PSNR vs colour-demosaicing {worst:7.2f} dB ({worst_name})"
                      f"  max |diff| {worst_diff:.2e}  | dataset-MSE PSNR vs ground truth: ours {gt['ours']:.3f},"
                      f" reference {gt['ref']:.3f}")
        if "bicubic" not in methods:
            continue
        mse = {"bicubic": [], "bicubic-halfpixel": []}
        cv_diff = 0.0
        for _name, rgb in images:
            hr = rgb
            lr = np.ascontiguousarray(rgb[0::2, 0::2])
            x = torch.from_numpy(lr).permute(2, 0, 1)[None].to(dtype)
            for method, fn in (("bicubic", baselines.upscale_bicubic),
                               ("bicubic-halfpixel", baselines.upscale_bicubic_halfpixel)):
                up = fn(x)[0].permute(1, 2, 0).double().numpy()
                mse[method].append(float(np.mean((luma(up) - luma(hr)) ** 2)))
                if method == "bicubic-halfpixel" and dtype == torch.float32:
                    h, w = hr.shape[:2]
                    lr32 = lr.astype(np.float32)
                    cv = cv2.resize(lr32, (w, h), interpolation=cv2.INTER_CUBIC)
                    cv_diff = max(cv_diff, float(np.abs(up - cv).max()))
        for method, m in mse.items():
            print(f"{method:18s} dataset-MSE Y-PSNR vs ground truth {10 * math.log10(1 / np.mean(m)):.3f} dB")
        if dtype == torch.float32:
            print(f"bicubic-halfpixel  max |ours - cv2.resize INTER_CUBIC| {cv_diff:.2e}")
        if args.bicubic_search:
            for a in (-0.5, -0.75):
                row = []
                for mode in ("replicate", "mirror", "reflect"):
                    m = [float(np.mean((luma(aligned_cubic_numpy(im[0::2, 0::2], a, mode)) - luma(im)) ** 2))
                         for _, im in images]
                    row.append(f"{mode} {10 * math.log10(1 / np.mean(m)):.3f}")
                print(f"aligned cubic a={a:+.2f} (numpy) Y-PSNR by border: " + ", ".join(row))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
