"""A camera RAW's linear DNG (``gsprestore demosaic RAW -o OUT.dng``) rendered by LibRaw against
gsprestore's own development of the same RAW with the same demosaicker (docs/cli.md, "A linear
DNG for a raw editor"): PSNR of LibRaw's sRGB rendering (``rawpy.postprocess``, camera white
balance, the sRGB curve) with and without LibRaw's auto-brightness against ours with ``--bright
none`` / ``auto``.

Usage (from the repository root)::

    .venv/bin/python benchmarks/check_linear_dng.py ../shared/raw/bmpcc4k-cinemadng-daylight.dng --method menon
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import rawpy
import torch

from gsprestore.imageio.camera_raw import develop, read_raw
from gsprestore.methods.registry import get_restorer
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
        r = get_restorer(args.method, "demosaic")
        for bright in ("none", "auto"):
            ours = develop(read_raw(args.raw), lambda m, b: restore(r, torch.from_numpy(m)[None], b).numpy(),
                           bright=bright)
            with rawpy.imread(str(dng)) as raw:
                lib = raw.postprocess(output_bps=16, use_camera_wb=True, gamma=(2.4, 12.92),
                                      no_auto_bright=bright == "none").astype(np.float64) / 65535
            psnr = 10 * np.log10(1 / np.mean((ours - lib) ** 2))
            print(f"{args.raw}: --bright {bright}: LibRaw's rendering of the linear DNG vs ours: {psnr:.2f} dB")


if __name__ == "__main__":
    main()
