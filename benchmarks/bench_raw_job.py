"""Issue 50: the whole job of developing a camera RAW file, stage by stage, against LibRaw's own
development plus a library encoder, measured in the same run.

Two views, each repeated ``--repeats`` times, alternating, the median printed:

1. **Whole commands** (a fresh process each, what a user waits for): ``gsprestore demosaic RAW -o
   OUT.{png,tif,jpg} --method M`` for each method of ``--methods``, against a fresh Python process
   that runs LibRaw's ``postprocess()`` (AHD, 16-bit, camera white balance) and writes the same
   output kind with OpenCV (PNG at zlib level 1, TIFF uncompressed, JPEG quality 92). The ratio
   ``gsprestore / LibRaw`` is the figure to compare across machines.
2. **Stages in one process** (after a warm-up): start-up (``import torch`` and the package),
   decode (:func:`gsprestore.imageio.camera_raw.read_raw`), development without the demosaicker
   (white balance, colour matrix, brightness, curve, orientation), the demosaicker itself, the
   metadata and the encode of each output kind, one after another.

The share of the job outside the model is printed both ways; the first is the figure to quote: the
whole command's median time less the model's own time in one process, i.e. everything the user
waits for that is not the network, with the command's overlaps (the RAW decoding while torch
loads) and its start and exit as they happen. The stage sum counts no overlap and no interpreter
start or exit.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_raw_job.py ../shared/raw/bmpcc4k-cinemadng-daylight.dng
    .venv/bin/python benchmarks/bench_raw_job.py RAW --methods bilinear,ugtv-lite --kinds png --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIBRAW_JOB = """
import sys, time
t0 = time.perf_counter()
import cv2, rawpy
src, out = sys.argv[1], sys.argv[2]
with rawpy.imread(src) as raw:
    rgb = raw.postprocess(output_bps=16, use_camera_wb=True)
bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
if out.endswith(".png"):
    cv2.imwrite(out, bgr, [cv2.IMWRITE_PNG_COMPRESSION, 1])
elif out.endswith(".tif"):
    cv2.imwrite(out, bgr, [cv2.IMWRITE_TIFF_COMPRESSION, 1])
else:
    cv2.imwrite(out, (bgr >> 8).astype("uint8"), [cv2.IMWRITE_JPEG_QUALITY, 92])
"""


def _run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def whole_jobs(raw: str, methods: list[str], kinds: list[str], repeats: int, tmp: Path) -> dict:
    exe = [sys.executable, "-m", "gsprestore"]
    rows: dict[str, list[float]] = {}
    for _ in range(repeats):
        for kind in kinds:
            out = tmp / f"libraw.{kind}"
            rows.setdefault(f"libraw {kind}", []).append(_run([sys.executable, "-c", LIBRAW_JOB, raw, str(out)]))
            for m in methods:
                out = tmp / f"{m}.{kind}"
                rows.setdefault(f"{m} {kind}", []).append(
                    _run(exe + ["demosaic", raw, "-o", str(out), "--method", m, "--overwrite", "-q"]))
    return {k: statistics.median(v) for k, v in rows.items()}


def stages(raw: str, methods: list[str], kinds: list[str], tmp: Path) -> dict:
    t0 = time.perf_counter()
    import numpy as np

    from gsprestore.core.process import configure_openmp

    configure_openmp()  # as the gsprestore command does, before torch
    import torch

    from gsprestore.imageio.camera_raw import read_raw
    from gsprestore.imageio.raw_develop import develop
    from gsprestore.imageio.images import write_image
    from gsprestore.imageio.metadata import for_output, raw_metadata
    from gsprestore.methods.registry import get_restorer
    from gsprestore.runtime.tiling import restore

    res: dict = {"start-up (torch, package)": time.perf_counter() - t0}
    t = time.perf_counter()
    frame = read_raw(raw)
    res["decode"] = time.perf_counter() - t
    t = time.perf_counter()
    meta = raw_metadata(raw)
    res["metadata"] = time.perf_counter() - t
    for m in methods:
        restorer = get_restorer(m, "demosaic")
        model_s: list[float] = []

        def demosaic(mosaic, bayer, restorer=restorer, model_s=model_s):
            t = time.perf_counter()
            out = restore(restorer, torch.from_numpy(mosaic)[None], bayer).numpy()
            model_s.append(time.perf_counter() - t)
            return out

        develop(frame, demosaic)  # warm-up (first calls, allocations)
        model_s.clear()
        t = time.perf_counter()
        out = develop(frame, demosaic)
        total = time.perf_counter() - t
        res[f"model {m}"] = model_s[0]
        res[f"develop without the model ({m})"] = total - model_s[0]
    md = for_output(meta, out.shape[1], out.shape[0], "gsprestore bench")
    for kind in kinds:
        path = tmp / f"stage.{kind}"
        t = time.perf_counter()
        write_image(path, out, 8 if kind == "jpg" else 16, overwrite=True, metadata=md)
        res[f"encode {kind}"] = time.perf_counter() - t
    res["megapixels"] = float(np.prod(out.shape[:2]) / 1e6)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw")
    ap.add_argument("--methods", default="bilinear,ugtv-lite")
    ap.add_argument("--kinds", default="png,tif,jpg")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    methods, kinds = args.methods.split(","), args.kinds.split(",")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        whole = whole_jobs(args.raw, methods, kinds, args.repeats, tmp)
        st = stages(args.raw, methods, kinds, tmp)
    print(f"{args.raw}: {st['megapixels']:.1f} MP, load average {os.getloadavg()[0]:.1f}, "
          f"{args.repeats} alternating rounds, medians")
    print("whole commands (fresh processes):")
    for kind in kinds:
        ref = whole[f"libraw {kind}"]
        print(f"  {kind}: LibRaw postprocess + OpenCV {ref:.2f} s; "
              + ", ".join(f"{m} {whole[f'{m} {kind}']:.2f} s = {whole[f'{m} {kind}'] / ref:.2f}x" for m in methods))
    print("stages (one process):")
    for k, v in st.items():
        if k != "megapixels":
            print(f"  {k}: {v:.2f} s")
    print("the job outside the model (issue 50's share):")
    for m in methods:
        model = st[f"model {m}"]
        for kind in kinds:
            outside = st["start-up (torch, package)"] + st["decode"] + st["metadata"] + \
                st[f"develop without the model ({m})"] + st[f"encode {kind}"]
            whole_s = whole[f"{m} {kind}"]
            rest = max(0.0, whole_s - model)
            print(f"  {m} to {kind}: the whole command less the model {rest:.2f} s = {rest / whole_s:.0%} of "
                  f"{whole_s:.2f} s (what the user waits for: start-up, decode, development, encode and exit as "
                  f"they run, overlaps included); the stages above one after another {outside:.2f} s = "
                  f"{outside / (outside + model):.0%} (no overlap, no interpreter start or exit)")
    if args.json:
        Path(args.json).write_text(json.dumps({"whole": whole, "stages": st}, indent=1))


if __name__ == "__main__":
    main()
