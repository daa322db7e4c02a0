"""Our camera-RAW pipeline against LibRaw's own (rawpy ``postprocess``): on a camera RAW file, or
on a DNG made from a test image with a known pattern, white balance and colour matrix (docs/cli.md
states the results).

Usage::

    GSPRESTORE_NATIVE=0 python benchmarks/check_camera_raw.py PHOTO.KDC|PHOTO.DNG|...   # a camera file
    GSPRESTORE_NATIVE=0 python benchmarks/check_camera_raw.py IMAGE.png [--pattern RGGB] [--orientation 1]

For a camera RAW file: the PSNR of our bilinear development against LibRaw's LINEAR one (the same
demosaicker: what is left is the pipeline, colour matrix included), in sRGB with camera white
balance, once without brightness scaling (``--bright none`` / ``no_auto_bright``) and once with
both tools' default auto-brightness; the target is >= 45 dB.

For a test image: for bilinear vs LibRaw's LINEAR and for Menon / the default method vs LibRaw's
AHD (different demosaickers), the PSNR between the two developed 16-bit sRGB images (whole frame,
and without a 4-pixel border), and each one's PSNR against the test image itself.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from gsprestore.imageio import camera_raw as cr, raw_develop
from gsprestore.imageio import dng as dng_io
from gsprestore.imageio.images import read_image

CAMERA_MATRIX = np.array([[0.90, -0.30, -0.05], [-0.40, 1.30, 0.10], [-0.05, 0.15, 0.60]])
NEUTRAL = (0.55, 1.0, 0.72)


def psnr(a: np.ndarray, b: np.ndarray, border: int = 0) -> float:
    if border:
        a, b = a[border:-border, border:-border], b[border:-border, border:-border]
    return float(10 * np.log10(1.0 / np.mean((a.astype(np.float64) - b) ** 2)))


def libraw_srgb(path: str, algorithm: str = "LINEAR", *, auto_bright: bool = False) -> np.ndarray:
    """LibRaw's 16-bit sRGB development of ``path`` (camera white balance, the file's white level)
    as floats in [0, 1]."""
    import rawpy

    with rawpy.imread(path) as raw:
        return raw.postprocess(demosaic_algorithm=getattr(rawpy.DemosaicAlgorithm, algorithm), use_camera_wb=True,
                               no_auto_bright=not auto_bright, output_bps=16, gamma=(2.4, 12.92),
                               adjust_maximum_thr=0.0,  # the file's white level, not LibRaw's guess
                               output_color=rawpy.ColorSpace.sRGB).astype(np.float64) / 65535


def check_raw_file(path: str) -> list[tuple[str, float, float]]:
    """Print and return ``(brightness, PSNR without the outermost pixel, PSNR of the whole frame)``
    of our bilinear sRGB development of the camera file ``path`` against LibRaw's LINEAR one,
    without and with auto-brightness. LibRaw's LINEAR fills the outermost pixel of the frame by
    averaging its 3x3 neighbours of each colour (``border_interpolate(1)``), our bilinear mirrors
    the image there: a difference of demosaicker, which a strong colour matrix amplifies."""
    import torch

    from gsprestore.runtime.tiling import restore
    from gsprestore.methods.registry import get_restorer

    frame = cr.read_raw(path)
    bilinear = get_restorer("bilinear", "demosaic")
    out = []
    for bright in ("none", "auto"):
        ours = raw_develop.develop(frame, lambda m, p: restore(bilinear, torch.from_numpy(m)[None], p, device="cpu").numpy(),
                          bright=bright)
        ours = np.rint(ours * 65535) / 65535  # the 16-bit file
        ref = libraw_srgb(path, auto_bright=bright == "auto")
        out.append((bright, psnr(ours, ref, 1), psnr(ours, ref)))
    matrix = "none (camera RGB = sRGB)" if frame.rgb_cam is None else np.round(frame.rgb_cam, 3).tolist()
    print(f"{path}: {frame.mosaic.shape[1]}x{frame.mosaic.shape[0]} {frame.pattern}, LibRaw's matrix {matrix}")
    for bright, value, whole in out:
        print(f"  ours bilinear vs LibRaw LINEAR, sRGB, camera WB, --bright {bright}: {value:6.2f} dB "
              f"({'ok' if value >= 45 else 'BELOW'} the 45 dB target; without the 1-px frame edge, where the "
              f"two bilinears differ; whole frame {whole:.2f} dB)")
    return out


def main(argv: list[str] | None = None) -> int:
    import rawpy
    import torch

    from gsprestore.runtime.tiling import restore
    from gsprestore.methods.defaults import default_method
    from gsprestore.methods.registry import get_restorer

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("image", nargs="+", help="camera RAW files, or one test image")
    ap.add_argument("--pattern", default="RGGB")
    ap.add_argument("--orientation", type=int, default=1)
    args = ap.parse_args(argv)
    if all(cr.is_raw_name(p) for p in args.image):
        scores = [value for p in args.image for _, value, _ in check_raw_file(p)]
        return 0 if min(scores) >= 45 else 1
    args.image = args.image[0]
    truth = read_image(args.image).array
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "test.dng")
        cfa = dng_io.mosaic_for_dng(raw_develop.srgb_decode(truth), args.pattern, color_matrix=CAMERA_MATRIX,
                                as_shot_neutral=NEUTRAL)
        dng_io.write_dng(path, cfa, args.pattern, color_matrix=CAMERA_MATRIX, as_shot_neutral=NEUTRAL,
                     orientation=args.orientation)
        frame = cr.read_raw(path)
        truth_o = raw_develop.orient(truth, frame.flip)
        pairs = [("bilinear", "LINEAR"), ("menon", "AHD")]
        if default_method("demosaic") not in ("bilinear", "menon"):
            pairs.append((default_method("demosaic"), "AHD"))
        print(f"{args.image}: {truth.shape[1]}x{truth.shape[0]}, {args.pattern}, orientation {args.orientation}, "
              f"camera WB {np.round(frame.wb_camera, 3).tolist()}")
        for ours_name, libraw_name in pairs:
            restorer = get_restorer(ours_name, "demosaic")
            ours = raw_develop.develop(frame, lambda m, p: restore(restorer, torch.from_numpy(m)[None], p,  # noqa: B023
                                                          device="cpu").numpy(), bright="none")
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
