"""The figures behind the encoders' choices (lab/notes/performance.md, "Help at once, and the whole
RAW job's encoders"): a camera RAW developed by LibRaw (linear interpolation, 16-bit), then, best
of ``--repeats`` in one process, gsprestore's PNG encoder with ISA-L's deflate and with zlib's,
with the per-row filter heuristic and with Sub on every row; its TIFF encoder both ways; the
inflate of that PNG's data both ways; and RAW development (:func:`gsprestore.imageio.raw_develop.
develop`, the demosaicker a copy) on one thread and on two.

Usage (from the repository root)::

    .venv/bin/python lab/research/codec_speed.py ../shared/raw/bmpcc4k-cinemadng-daylight.dng
"""

from __future__ import annotations

import argparse
import io
import time
import zlib
from functools import partial


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    import numpy as np
    import rawpy

    import gsprestore.core.process as process
    from gsprestore.imageio import png, raw_develop, tiff
    from gsprestore.imageio.camera_raw import read_raw

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with rawpy.imread(args.raw) as r:
        image = r.postprocess(output_bps=16, demosaic_algorithm=rawpy.DemosaicAlgorithm.LINEAR)
    print(f"{args.raw}: {image.shape[1]}x{image.shape[0]} 16-bit RGB, {png.deflate_threads()} deflate threads, "
          f"best of {args.repeats}")
    isal = png.isal_zlib
    for name, module in (("ISA-L", isal), ("zlib", None)):
        png.isal_zlib = module
        for label, ft in (("heuristic", None), ("Sub", 1)):
            encode = partial(_png, png, image, ft)
            s = best(encode, args.repeats)
            print(f"  {name:5s} PNG encode, {label:9s}: {s:.2f} s, {len(encode()) / 1e6:.1f} MB")
        buf = io.BytesIO()
        tiff.encode(buf, image)
        s = best(lambda: tiff.encode(io.BytesIO(), image), args.repeats)
        print(f"  {name:5s} TIFF encode          : {s:.2f} s, {len(buf.getvalue()) / 1e6:.1f} MB")
        info = png.read_chunks(_png(png, image, None))
        s = best(partial(png.inflate_bounded, bytes(info.idat), png.raw_size(info), "image data"), args.repeats)
        print(f"  {name:5s} inflate of the PNG's data: {s:.2f} s")
    png.isal_zlib = isal
    assert zlib  # the fall-back above is Python's zlib
    frame = read_raw(args.raw)
    rgb = np.repeat(raw_develop.balanced_mosaic(frame)[:, :, None], 3, axis=2)

    def develop() -> None:
        raw_develop.develop(frame, lambda mosaic, pattern: rgb.copy())

    usable = process.usable_cpus
    for threads in (1, 2):
        process.usable_cpus = lambda n=threads: n  # type: ignore[assignment]
        print(f"  development without the demosaicker, {threads} thread(s): {best(develop, args.repeats):.2f} s")
    process.usable_cpus = usable


def _png(png, image, filter_type) -> bytes:
    buf = io.BytesIO()
    png.encode(buf, image, filter_type=filter_type)
    return buf.getvalue()


if __name__ == "__main__":
    main()
