"""Peak memory and speed of the tiled engine on a synthetic large Bayer mosaic.

Two modes:

* in-process (default): build a synthetic ``--megapixels`` mosaic (6000x4000 for 24 MP) and run
  :func:`gsprestore.runtime.tiling.restore` on it; prints peak resident memory (``ru_maxrss``) of this
  process, the resident memory before the run (Python + torch + the input), wall time and MP/s.
* ``--cli``: write the mosaic as a 16-bit PNG, run ``gsprestore demosaic`` on it in a child process
  (read, tiles, write: what a user runs) and print the child's peak resident memory and time.

Examples::

    python benchmarks/bench_engine.py --method menon
    python benchmarks/bench_engine.py --method menon --cli
    python benchmarks/bench_engine.py --method ugtv --tile 256 --overlap 32
    python benchmarks/bench_engine.py --method ugtv --device cuda --megapixels 24 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="menon")
    ap.add_argument("--megapixels", type=float, default=24.0)
    ap.add_argument("--tile", type=int, default=0)
    ap.add_argument("--overlap", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--weights", default=None)
    ap.add_argument("--repeat", type=int, default=1, help="runs (the first includes warm-up); best time reported")
    ap.add_argument("--cli", action="store_true", help="measure `gsprestore demosaic` end to end in a child process")
    args = ap.parse_args()

    if args.cli:
        return run_cli(args)

    import torch

    from gsprestore_lab.timing import synthetic_mosaic
    from gsprestore.methods.registry import get_restorer
    from gsprestore.runtime.tiling import resolve_device, restore

    y = synthetic_mosaic(args.megapixels)
    options = {"weights": args.weights} if args.weights else {}
    r = get_restorer(args.method, "demosaic", **options)
    dev = resolve_device(args.device)
    before = rss_mb()
    tiles = []
    times = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        out = restore(r, y, "RGGB", tile=args.tile, overlap=args.overlap, device=dev, precision=args.precision,
                      progress=lambda d, t: tiles.append(t), notice=lambda m: print("note:", m, file=sys.stderr))
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
        del out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mp = y.shape[-2] * y.shape[-1] / 1e6
    report = {
        "method": args.method, "device": str(dev), "precision": args.precision,
        "size": f"{y.shape[-1]}x{y.shape[-2]}", "megapixels": round(mp, 2), "tile": args.tile,
        "tiles": tiles[-1] if tiles else None, "seconds": round(min(times), 2),
        "megapixels_per_second": round(mp / min(times), 3),
        "rss_before_run_mb": round(before), "peak_rss_mb": round(peak),
        "torch": torch.__version__, "threads": torch.get_num_threads(),
    }
    if dev.type == "cuda":
        report["cuda_peak_allocated_mb"] = round(torch.cuda.max_memory_allocated(dev) / 2**20)
        report["gpu"] = torch.cuda.get_device_name(dev)
    print(json.dumps(report, indent=2))


def run_cli(args: argparse.Namespace) -> None:
    from gsprestore_lab.timing import synthetic_mosaic
    from gsprestore.imageio.images import write_image

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "mosaic.png"
        y = synthetic_mosaic(args.megapixels)
        h, w = y.shape[-2:]
        write_image(src, y[0].numpy().clip(0, 1), 16)
        del y
        cmd = [sys.executable, "-c", "from gsprestore.cli.app import main; main()", "demosaic", str(src), "-o", str(Path(tmp) / "out.png"),
               "-m", args.method, "--tile", str(args.tile), "--device", args.device, "--precision", args.precision,
               "-q"]
        if args.overlap is not None:
            cmd += ["--overlap", str(args.overlap)]
        if args.weights:
            cmd += ["--weights", args.weights]
        t0 = time.perf_counter()
        import os

        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - t0
        if proc.returncode:
            sys.exit(f"gsprestore failed ({proc.returncode}): {proc.stderr.strip()}")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(json.dumps({"mode": "cli", "command": "gsprestore " + " ".join(cmd[3:]), "method": args.method, "size": f"{w}x{h}",
                          "input": "16-bit PNG", "seconds_end_to_end": round(seconds, 2),
                          "peak_rss_mb": round(peak), "output_bytes": (Path(tmp) / "out.png").stat().st_size},
                         indent=2))


if __name__ == "__main__":
    main()
