"""Our camera-RAW pipeline against LibRaw's own (rawpy ``postprocess``), on a DNG made from a
test image with a known pattern, white balance and colour matrix (docs/cli.md states the result).

Usage::

    GSPRESTORE_NATIVE=0 python benchmarks/check_camera_raw.py IMAGE.png [--pattern RGGB] [--orientation 1]

Prints, for bilinear vs LibRaw's LINEAR (the same demosaicker: what is left is the pipeline) and
for Menon / the default method vs LibRaw's AHD (different demosaickers), the PSNR between the two
developed 16-bit sRGB images (whole frame, and without a 4-pixel border), and each one's PSNR
against the test image itself.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from gsprestore import camera_raw as cr
from gsprestore.io import read_image

CAMERA_MATRIX = np.array([[0.90, -0.30, -0.05], [-0.40, 1.30, 0.10], [-0.05, 0.15, 0.60]])
NEUTRAL = (0.55, 1.0, 0.72)


def psnr(a: np.ndarray, b: np.ndarray, border: int = 0) -> float:
    if border:
        a, b = a[border:-border, border:-border], b[border:-border, border:-border]
    return float(10 * np.log10(1.0 / np.mean((a.astype(np.float64) - b) ** 2)))


def main(argv: list[str] | None = None) -> int:
    import rawpy
    import torch

    from gsprestore.engine import restore
    from gsprestore.restorers import default_method, get_restorer

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("image")
    ap.add_argument("--pattern", default="RGGB")
    ap.add_argument("--orientation", type=int, default=1)
    args = ap.parse_args(argv)
    truth = read_image(args.image).array
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "test.dng")
        cfa = cr.mosaic_for_dng(cr.srgb_decode(truth), args.pattern, color_matrix=CAMERA_MATRIX,
                                as_shot_neutral=NEUTRAL)
        cr.write_dng(path, cfa, args.pattern, color_matrix=CAMERA_MATRIX, as_shot_neutral=NEUTRAL,
                     orientation=args.orientation)
        frame = cr.read_raw(path)
        truth_o = cr.orient(truth, frame.flip)
        pairs = [("bilinear", "LINEAR"), ("menon", "AHD")]
        if default_method("demosaic") not in ("bilinear", "menon"):
            pairs.append((default_method("demosaic"), "AHD"))
        print(f"{args.image}: {truth.shape[1]}x{truth.shape[0]}, {args.pattern}, orientation {args.orientation}, "
              f"camera WB {np.round(frame.wb_camera, 3).tolist()}")
        for ours_name, libraw_name in pairs:
            restorer = get_restorer(ours_name, "demosaic")
            ours = cr.develop(frame, lambda m, p: restore(restorer, torch.from_numpy(m)[None], p,  # noqa: B023
                                                          device="cpu").numpy())
            ours = np.rint(ours * 65535) / 65535  # the 16-bit file
            with rawpy.imread(path) as raw:
                ref = raw.postprocess(demosaic_algorithm=getattr(rawpy.DemosaicAlgorithm, libraw_name),
                                      use_camera_wb=True, no_auto_bright=True, output_bps=16, gamma=(2.4, 12.92),
                                      adjust_maximum_thr=0.0,  # the file's white level, not LibRaw's guess
                                      output_color=rawpy.ColorSpace.sRGB).astype(np.float64) / 65535
            print(f"  ours {ours_name:9s} vs LibRaw {libraw_name:6s}: {psnr(ours, ref):6.2f} dB "
                  f"(without a 4 px border {psnr(ours, ref, 4):6.2f} dB); vs the image: ours "
                  f"{psnr(ours, truth_o, 4):.2f} dB, LibRaw {psnr(ref, truth_o, 4):.2f} dB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
