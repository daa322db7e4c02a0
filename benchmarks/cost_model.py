"""Issue 16's cost model: operations and bytes per output pixel and per block of each shipped
model (and of the CPU-size ``-lite`` networks, and of any candidate configuration: ``--opt``),
split into parts, the floors they imply on this CPU and on an H200, and the measured time beside
them.

The model itself (the parts of a block, how FLOPs and bytes are counted, the floors, the timers)
is :mod:`gsprestore_lab.cost_model`; this script is its command line: it prints one report
per model (``--models``, ``--candidate``; ``--opt`` overrides configuration keys) and, with
``--json``, writes every figure.

Usage (from the repository root)::

    .venv/bin/python benchmarks/cost_model.py                       # 4 models, count 128x128, time 512x768
    .venv/bin/python benchmarks/cost_model.py --no-time             # counts and H200 floors, no timing
    .venv/bin/python benchmarks/cost_model.py --no-time --cpu-peaks 113,24.6   # ... and CPU floors at given GFLOP/s, GB/s
    .venv/bin/python benchmarks/cost_model.py --models ugtv_demosaic --size 512x768 --json cost.json
    # candidates for the CPU-size networks, before training (untrained networks, timed on 1 thread)
    .venv/bin/python benchmarks/cost_model.py --models ugtv_demosaic,ugtv-lite_demosaic --threads 1 --no-count \
        --candidate ugtv-lite_demosaic:blocks=3,heads=1 --candidate ugtv-lite_demosaic:blocks=4,heads=1,width=32
    .venv/bin/python benchmarks/cost_model.py --models ugtv-lite_demosaic --opt blocks=4 --opt heads=1
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from gsprestore_lab.cost_model import MODELS, jobs, price


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--size", default="512x768", help="HxW of the timed forward and the analytic figures")
    ap.add_argument("--count-size", default="128x128", help="HxW of the operator count (PyTorch path)")
    ap.add_argument("--no-count", action="store_true", help="skip the operator count")
    ap.add_argument("--no-time", action="store_true", help="skip the timed forwards and the CPU peak measurement")
    ap.add_argument("--cpu-peaks", default=None, help="GFLOPS,GB/s instead of measuring them (e.g. with --no-time)")
    ap.add_argument("--repeats", type=int, default=1, help="timed forwards per model (after one warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="write every figure to this file")
    ap.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                    help="override a configuration key of every model priced (JSON value: blocks=4, heads=1, "
                         "width=32, feature_trunk='\"packed\"'); repeatable. The network is then untrained "
                         "(a shipped model: its configuration with these keys over it)")
    ap.add_argument("--candidate", action="append", default=[], metavar="MODEL[:KEY=VALUE,...]",
                    help="also price MODEL with these overrides (over --opt), e.g. "
                         "ugtv-lite_demosaic:blocks=3,heads=1; repeatable, one summary table for all")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    size = tuple(int(v) for v in args.size.lower().split("x"))
    count_size = tuple(int(v) for v in args.count_size.lower().split("x"))
    priced = jobs(args.models, args.opt, args.candidate)
    peaks = None
    if args.cpu_peaks:
        gf, gb = (float(v) for v in args.cpu_peaks.split(","))
        peaks = {"threads": args.threads, "matmul_flops": gf * 1e9, "bytes_per_s": gb * 1e9, "given": True}
    command = " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:]))
    result = price(priced, size=size, count_size=count_size, counted=not args.no_count, timed=not args.no_time,
                   peaks=peaks, repeats=args.repeats, threads=args.threads, command=command, out=sys.stdout)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1, default=str)
    return result


if __name__ == "__main__":
    main()
