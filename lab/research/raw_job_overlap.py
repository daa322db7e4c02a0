"""Issue 50 / 49: the four measurements behind the RAW job's start and end and the denoiser's
share of the noise-aware network's time, each one command.

* ``overlap RAW``: ``import torch`` and :func:`gsprestore.imageio.camera_raw.read_raw` of ``RAW``
  one after the other, then the decode on a thread during the import (what
  ``runtime.file_restore.RawPrefetch`` does): a fresh process each, ``--repeats`` alternating
  rounds, medians.
* ``teardown RAW``: ``gsprestore demosaic RAW -o OUT.png --method ugtv-lite`` as the console entry
  runs it (``cli.entry``, which ends without the interpreter's teardown) against the same command
  through ``cli.app.main`` (an ordinary exit), alternating, medians.
* ``cores RAW``: the default demosaicker (``ugtv-lite``) on the RAW's white-balanced mosaic in one
  process, after a warm-up, on 2 threads, 1 and 2 again: wall time, CPU time and the cores it kept
  busy (CPU / wall): how much of the second core the model leaves for work beside it (development
  and encoding streamed alongside would have that much, less what OpenMP's waiting spins hold).
* ``denoiser``: the shipped ``ugtv-lite-denoise`` on a 768x512 mosaic with the medium level given
  (its denoising passes run) and without a level, ``--threads`` torch threads, median of 20.

Usage (from the repository root)::

    .venv/bin/python lab/research/raw_job_overlap.py overlap ../shared/raw/bmpcc4k-cinemadng-daylight.dng
    .venv/bin/python lab/research/raw_job_overlap.py teardown ../shared/raw/bmpcc4k-cinemadng-daylight.dng
    .venv/bin/python lab/research/raw_job_overlap.py cores ../shared/raw/bmpcc4k-cinemadng-daylight.dng
    .venv/bin/python lab/research/raw_job_overlap.py denoiser --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

OVERLAP = """
import sys, threading, time
mode, raw = sys.argv[1], sys.argv[2]
from gsprestore.imageio.camera_raw import read_raw
t = time.perf_counter()
if mode == "serial":
    import torch
    read_raw(raw)
else:
    th = threading.Thread(target=read_raw, args=(raw,))
    th.start()
    import torch
    th.join()
print(time.perf_counter() - t)
"""

NO_LEAVE = """
import sys
sys.argv = ["gsprestore"] + sys.argv[1:]
from gsprestore.cli.app import main
main()
"""


def _timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def overlap(raw: str, repeats: int) -> None:
    runs: dict[str, list[float]] = {"serial": [], "thread": []}
    for _ in range(repeats):
        for mode in runs:
            out = subprocess.run([sys.executable, "-c", OVERLAP, mode, raw], check=True, capture_output=True, text=True)
            runs[mode].append(float(out.stdout))
    s, t = statistics.median(runs["serial"]), statistics.median(runs["thread"])
    print(f"import torch + read_raw, one after the other: {s:.2f} s; the decode on a thread: {t:.2f} s "
          f"(medians of {repeats})")


def teardown(raw: str, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        args = ["demosaic", raw, "-o", f"{d}/x.png", "--method", "ugtv-lite", "--overwrite", "-q"]
        runs: dict[str, list[float]] = {"entry": [], "app": []}
        for _ in range(repeats):
            runs["entry"].append(_timed([sys.executable, "-m", "gsprestore", *args]))
            runs["app"].append(_timed([sys.executable, "-c", NO_LEAVE, *args]))
    e, a = statistics.median(runs["entry"]), statistics.median(runs["app"])
    print(f"demosaic, ending without the teardown: {e:.2f} s; with it: {a:.2f} s (medians of {repeats})")


def cores(raw: str) -> None:
    import resource

    from gsprestore.core.process import configure_openmp

    configure_openmp()  # as the console script does, before torch loads
    import torch

    from gsprestore.imageio.camera_raw import read_raw
    from gsprestore.imageio.raw_develop import balanced_mosaic
    from gsprestore.methods.registry import get_restorer
    from gsprestore.runtime.tiling import restore

    frame = read_raw(raw)
    mosaic = torch.from_numpy(balanced_mosaic(frame, "camera", None))[None]
    restorer = get_restorer("ugtv-lite", "demosaic")
    restore(restorer, mosaic, frame.pattern)  # warm-up
    for threads in (2, 1, 2):
        torch.set_num_threads(threads)
        c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        restore(restorer, mosaic, frame.pattern)
        t1, c1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
        print(f"ugtv-lite, {threads} thread(s): wall {t1 - t0:.2f} s, CPU {cpu:.2f} s, cores busy {cpu / (t1 - t0):.2f}")


def denoiser(threads: int) -> None:
    import torch

    from gsprestore.methods.registry import get_restorer
    from gsprestore.physics import noise as N
    from gsprestore.physics.tasks import observation

    torch.set_num_threads(threads)
    level = N.level_params("medium")
    y = N.noisy_mosaic(torch.rand(1, 3, 512, 768, generator=torch.Generator().manual_seed(0)), level, seed=0)
    module = get_restorer("ugtv-lite-denoise", "demosaic", noise=level[0]).module
    known, mask = observation("demosaic", y)

    def median_ms(fn) -> float:
        fn()
        times = []
        for _ in range(20):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return 1000 * statistics.median(times)

    with torch.inference_mode():
        given = median_ms(lambda: module(known, mask, noise=level))
        clean = median_ms(lambda: module(known, mask))
    print(f"ugtv-lite-denoise on 768x512, {threads} thread(s): {given:.0f} ms with the medium level given, "
          f"{clean:.0f} ms without a level (the denoising passes off)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["overlap", "teardown", "cores", "denoiser"])
    ap.add_argument("raw", nargs="?")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.what != "denoiser" and not a.raw:
        ap.error(f"{a.what} needs a RAW file")
    {"overlap": lambda: overlap(a.raw, a.repeats), "teardown": lambda: teardown(a.raw, a.repeats),
     "cores": lambda: cores(a.raw), "denoiser": lambda: denoiser(a.threads)}[a.what]()


if __name__ == "__main__":
    main()
