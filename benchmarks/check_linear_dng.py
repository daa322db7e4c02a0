"""A camera RAW's linear DNG (``gsprestore demosaic RAW -o OUT.dng``) rendered by LibRaw against
gsprestore's own development of the same RAW with the same demosaicker (docs/cli.md, "A linear
DNG for a raw editor"): PSNR of LibRaw's sRGB rendering (``rawpy.postprocess``, camera white
balance, the sRGB curve) with and without LibRaw's auto-brightness against ours with ``--bright
none`` / ``auto``; and, where ``darktable-cli`` is installed (Debian: ``apt-get install darktable``),
darktable's rendering of the same DNG (its "none" workflow: the DNG's white balance, colour matrix
and the sRGB output profile, no tone mapping) against ours with ``--bright none``.

Usage (from the repository root)::

    .venv/bin/python benchmarks/check_linear_dng.py ../shared/raw/bmpcc4k-cinemadng-daylight.dng --method menon
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import rawpy
import torch

from gsprestore.imageio.camera_raw import read_raw
from gsprestore.imageio.raw_develop import develop
from gsprestore.methods.registry import get_restorer
from gsprestore.runtime.file_restore import raw_denoiser
from gsprestore.runtime.tiling import restore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("raw")
    ap.add_argument("--method", default="menon")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        dng = Path(d) / "linear.dng"
        subprocess.run([sys.executable, "-m", "gsprestore", "demosaic", args.raw, "-o", str(dng), "-m", args.method,
                        "-q"], check=True)
        frame = read_raw(args.raw)
        # the demosaicker the command ran: on a noisy file the method's noise-aware sibling
        # (--denoise auto, the default), which the DNG then holds
        r = raw_denoiser(get_restorer(args.method, "demosaic"), frame, "camera", "auto", lambda message: None)
        print(f"{args.raw}: demosaicked by {r.name}")
        for bright in ("none", "auto"):
            ours = develop(frame, lambda m, b: restore(r, torch.from_numpy(m)[None], b).numpy(), bright=bright)
            with rawpy.imread(str(dng)) as raw:
                # adjust_maximum_thr=0: LibRaw's default (0.75) rescales a frame whose brightest value is
                # under 75 % of white (an underexposed one) to white before anything else
                lib = raw.postprocess(output_bps=16, use_camera_wb=True, gamma=(2.4, 12.92), adjust_maximum_thr=0.0,
                                      no_auto_bright=bright == "none").astype(np.float64) / 65535
            psnr = 10 * np.log10(1 / np.mean((ours - lib) ** 2))
            print(f"{args.raw}: --bright {bright}: LibRaw's rendering of the linear DNG vs ours: {psnr:.2f} dB")
            if bright == "none":
                darktable(dng, ours, args.raw, Path(d))


def darktable(dng: Path, ours: np.ndarray, name: str, work: Path) -> None:
    """darktable-cli's 16-bit TIFF of ``dng`` against ``ours`` (PSNR), or a line saying it is absent."""
    import tifffile

    exe = shutil.which("darktable-cli")
    if exe is None:
        print(f"{name}: darktable-cli not installed (apt-get install darktable): darktable check skipped")
        return
    out = work / "darktable.tif"
    subprocess.run([exe, str(dng), str(out), "--core", "--configdir", str(work / "dtconf"), "--library", ":memory:",
                    "--conf", "plugins/darkroom/workflow=none", "--conf", "plugins/imageio/format/tiff/bpp=16"],
                   check=True, capture_output=True)
    dt = tifffile.imread(out)[..., :3].astype(np.float64) / 65535
    if dt.shape != ours.shape:
        print(f"{name}: darktable's rendering is {dt.shape[1]}x{dt.shape[0]}, ours {ours.shape[1]}x{ours.shape[0]}")
        return
    psnr = 10 * np.log10(1 / np.mean((ours - dt) ** 2))
    print(f"{name}: --bright none: darktable-cli's rendering of the linear DNG vs ours: {psnr:.2f} dB")


if __name__ == "__main__":
    main()
