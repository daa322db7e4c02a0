"""Which lossless codec carries the most training pixels per byte (docs/training.md, the pack).

For every ``--every``-th photo of a folder, the most textured ``--crop`` x ``--crop`` grid cell
(:func:`gsprestore.training.trainpack.texture_score`) is encoded as optimised PNG and as lossless WebP at
several ``method`` settings; printed: bytes / raw RGB bytes and encoding seconds per crop. Every
encoding is decoded again and checked bit-exact.

    python lab/research/pack_codecs.py ../shared/datasets/train/photos --every 12
"""

from __future__ import annotations

import argparse
import io
import time
from pathlib import Path

import numpy as np
from PIL import Image

from gsprestore.training.trainpack import texture_score

CODECS = {"png (optimize)": dict(format="PNG", optimize=True),
          **{f"webp lossless m{m}": dict(format="WEBP", lossless=True, quality=100, method=m) for m in (2, 4, 6)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--every", type=int, default=12)
    ap.add_argument("--crop", type=int, default=256)
    args = ap.parse_args()
    files = sorted(args.folder.rglob("*.png"))[:: args.every]
    size = {k: 0 for k in CODECS}
    secs = {k: 0.0 for k in CODECS}
    raw, n = 0, 0
    c = args.crop
    for f in files:
        try:
            a = np.asarray(Image.open(f).convert("RGB"))
        except OSError:
            continue  # a damaged photo
        cells = [(texture_score(a[r:r + c, q:q + c]), r, q) for r in range(0, a.shape[0] - c + 1, c)
                 for q in range(0, a.shape[1] - c + 1, c)]
        if not cells:
            continue
        _, r, q = max(cells)
        crop = np.ascontiguousarray(a[r:r + c, q:q + c])
        raw, n = raw + crop.nbytes, n + 1
        for name, kw in CODECS.items():
            buf = io.BytesIO()
            t0 = time.perf_counter()
            Image.fromarray(crop).save(buf, **kw)
            secs[name] += time.perf_counter() - t0
            size[name] += buf.tell()
            assert np.array_equal(np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")), crop), name
    print(f"{n} most-textured {c}x{c} crops from {args.folder}")
    for name in CODECS:
        print(f"{name:20s} {size[name] / raw:.3f} of raw RGB   {secs[name] / n * 1000:7.1f} ms per crop")


if __name__ == "__main__":
    main()
