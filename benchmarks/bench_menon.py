"""Speed and memory of gsprestore's Menon 2007 demosaicking against colour-demosaicing 0.2.7.

1. Time: ours (float32, torch) and colour-demosaicing's ``demosaicing_CFA_Bayer_Menon2007``
   (float64 numpy, what it computes in) on the same RGGB mosaic of one image, interleaved run by
   run so both see the same machine load; prints the medians and the ratio.
2. Memory: peak resident memory of ours on a large mosaic (default 4000 x 6000 = 24 MP), in a
   fresh subprocess, with the default strip processing and, with ``--untiled``, in one pass.
   Reported as the growth of the peak RSS over the RSS just before the call (input included
   before, the (B, 3, H, W) float32 output included in the growth).

Usage:
  python benchmarks/bench_menon.py [IMAGE] [--threads 1] [--runs 9] [--big 4000x6000] [--untiled]
IMAGE defaults to a generated 512 x 768 test chart (pass a Kodak image to compare on a photo).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def chart(h: int, w: int):
    """A smooth-plus-edges synthetic RGB image in [0, 1] (no data needed)."""
    import numpy as np

    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    r = 0.5 + 0.4 * np.sin(40 * x * y)
    g = 0.5 + 0.4 * np.cos(25 * (x - 0.3) ** 2 + 30 * y**2)
    b = ((np.floor(16 * x) + np.floor(16 * y)) % 2) * 0.6 + 0.2
    return np.stack([r, g, b], -1).astype(np.float32)


def memory_child(h: int, w: int, strip: bool, threads: int) -> None:
    """Runs in a fresh interpreter: prints JSON with the RSS growth of one Menon call."""
    import torch

    from gsprestore.methods.classical_methods import STRIP_PIXELS, demosaic_menon

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    raw = torch.rand(1, 1, h, w, generator=g)
    demosaic_menon(torch.rand(1, 1, 64, 64))  # warm up torch's lazy initialisation
    before = rss_mib()
    peak_before = peak_rss_mib()
    c0, t0 = time.process_time(), time.perf_counter()
    out = demosaic_menon(raw, "RGGB", strip_pixels=STRIP_PIXELS if strip else 0)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = peak_rss_mib()
    print(json.dumps({
        "shape": [h, w], "strips": strip, "seconds": seconds, "cpu_seconds": cpu, "rss_before_mib": before,
        "peak_growth_mib": max(peak, peak_before) - before,
        "input_mib": raw.numel() * 4 / 2**20, "output_mib": out.numel() * 4 / 2**20,
    }))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image", nargs="?", help="RGB image (default: a generated 512x768 chart)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch.set_num_threads (default 1: the reference is single-threaded numpy; "
                         "see docs/baselines.md for 2 threads on a busy machine)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--big", default="4000x6000", help="HxW of the memory test mosaic ('' to skip)")
    ap.add_argument("--untiled", action="store_true", help="also measure one pass without strips")
    ap.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()

    import torch

    threads = args.threads
    if args._child:
        h, w, strip = args._child
        memory_child(int(h), int(w), strip == "1", threads)
        return
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore")  # scipy.ndimage.filters deprecation inside colour-demosaicing
    import numpy as np
    from colour_demosaicing import demosaicing_CFA_Bayer_Menon2007

    from gsprestore.methods.classical_methods import demosaic_menon
    from gsprestore.physics.sampling import mosaic

    if args.image:
        from gsprestore.imageio.images import read_image

        rgb = read_image(args.image).array[..., :3]
        rgb = rgb[: rgb.shape[0] // 2 * 2, : rgb.shape[1] // 2 * 2]
        name = args.image
    else:
        rgb, name = chart(512, 768), "generated chart"
    raw = mosaic(torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1)[None], "RGGB")
    cfa64 = raw[0, 0].double().numpy()
    print(f"image: {name} {tuple(raw.shape[-2:])}, torch threads: {threads}, runs: {args.runs}")

    ours_t, ref_t, ours_cpu, ref_cpu = [], [], [], []
    out = demosaic_menon(raw)  # warm-up
    ref = demosaicing_CFA_Bayer_Menon2007(cfa64)
    for _ in range(args.runs):
        c0, t0 = time.process_time(), time.perf_counter()
        out = demosaic_menon(raw)
        c1, t1 = time.process_time(), time.perf_counter()
        ref = demosaicing_CFA_Bayer_Menon2007(cfa64)
        c2, t2 = time.process_time(), time.perf_counter()
        ours_t.append(t1 - t0)
        ref_t.append(t2 - t1)
        ours_cpu.append(c1 - c0)
        ref_cpu.append(c2 - c1)
    ours_med, ref_med = statistics.median(ours_t), statistics.median(ref_t)
    diff = out[0].permute(1, 2, 0).double().numpy() - ref
    mse = float(np.mean(diff**2))
    agree = float("inf") if mse == 0 else 10 * np.log10(1 / mse)
    load = os.getloadavg()[0]
    print(f"load average (1 min) {load:.1f} on {os.cpu_count()} CPUs; wall-clock medians (CPU-time medians):")
    print(f"gsprestore menon (float32):          median {ours_med * 1e3:8.1f} ms "
          f"({statistics.median(ours_cpu) * 1e3:.1f} ms CPU)")
    print(f"colour-demosaicing Menon2007 (f64):  median {ref_med * 1e3:8.1f} ms "
          f"({statistics.median(ref_cpu) * 1e3:.1f} ms CPU)")
    print(f"ratio colour-demosaicing / ours:     {ref_med / ours_med:8.2f}x  (PSNR ours vs reference {agree:.1f} dB)")
    strips = demosaic_menon(raw, strip_pixels=40_000)
    print(f"strips of 40k pixels identical to one pass: {torch.equal(strips, out)}")

    if args.big:
        h, w = (int(v) for v in args.big.lower().split("x"))
        for strip in ([True, False] if args.untiled else [True]):
            cmd = [sys.executable, __file__, "--threads", str(threads), "--_child", str(h), str(w), "1" if strip else "0"]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            print(f"{h}x{w} mosaic, {'strips' if strip else 'one pass'}: {res['seconds']:.2f} s "
                  f"({res['cpu_seconds']:.2f} s CPU), peak RSS growth "
                  f"{res['peak_growth_mib']:.0f} MiB (input {res['input_mib']:.0f} MiB already resident; "
                  f"output {res['output_mib']:.0f} MiB; working memory "
                  f"{res['peak_growth_mib'] - res['output_mib']:.0f} MiB)")


if __name__ == "__main__":
    main()
