"""Data-parallel training on the CPU: 2 gloo ranks of 1 thread against 1 rank of 2 threads (the
same 2 threads in all), in the same run, on the same patches and the same global batch.

Each configuration is a real ``gsprestore train`` (2 ranks under ``torchrun --standalone
--nproc_per_node 2``) of the shipped uGLR demosaicker's network (5 blocks, 15 CG iterations,
green-difference signal: 321,980 parameters) on 64x64 patches of dead-leaves images the script
writes, ``--max-steps`` warm-up + measured steps, one ``step`` record per step in ``log.jsonl``.
Patches/s is ``global batch x measured steps / wall time`` between the ``step`` records of rank 0
(all of a step: forward, backward, the gradient all-reduce, Adam and the ranks' agreements), the
first ``--warmup`` steps left out. The order of the 1-rank and 2-rank runs alternates between
rounds (``--rounds``), so that a change of the machine's load shows as a spread; the ratio is of the
means. ``--one-core`` (default) also runs 1 rank of 1 thread in each round: 2 ranks against it
is the scaling (2x would be perfect). Start-up (importing torch, cutting patches) and the final
validation are not counted.

Usage (from the repository root)::

    nice -n 10 .venv/bin/python benchmarks/bench_ddp.py --steps 5   # docs/training.md's figure (2 rounds)
    .venv/bin/python benchmarks/bench_ddp.py --rounds 1 --steps 4 --batch 8 --prior gtv
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

ROOT = Path(__file__).resolve().parents[1]


def _photos(folder: Path, n: int, size: int) -> None:
    import numpy as np
    from PIL import Image

    from gsprestore.evaluation.deadleaves import dead_leaves

    folder.mkdir(parents=True)
    for i in range(n):
        img = dead_leaves(size, seed=100 + i, supersample=2)
        Image.fromarray(np.clip(np.rint(img * 255), 0, 255).astype(np.uint8)).save(folder / f"dl{i}.png")


def _run(ranks: int, per_rank: int, args, photos: Path, out: Path) -> dict:
    train = ["-m", "gsprestore", "train", "--task", args.task, "--prior", args.prior, "--data", str(photos),
             "--out", str(out), "--patch-size", str(args.patch),
             "--patches", str(args.batch * (args.steps + args.warmup)),
             "--val-patches", "4", "--batch-size", str(args.batch), "--epochs", "1", "--max-steps",
             str(args.steps + args.warmup), "--log-every", "1", "--threads", str(per_rank), "--no-progress",
             "--seed", "0", "--model-opt", f"signal={json.dumps(args.signal)}", "--cg-iters", str(args.cg_iters)]
    if args.prior == "gtv":
        train += ["--admm-iters", str(args.admm_iters)]
    if ranks == 1:
        cmd = [sys.executable, *train]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), *train]
    env = {**os.environ, "OMP_NUM_THREADS": str(per_rank), "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{ranks} rank(s) failed:\n{res.stderr[-3000:]}")
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    steps = [r for r in log if r["event"] == "step"]
    start = next(r for r in log if r["event"] == "start")
    assert start.get("world_size", 1) == ranks and start["threads"] == per_rank, start
    kept = steps[args.warmup - 1:]  # the record of the last warm-up step starts the clock
    wall = kept[-1]["time"] - kept[0]["time"]
    measured = len(kept) - 1
    return {"ranks": ranks, "threads_per_rank": per_rank, "steps": measured, "wall_s": wall,
            "patches_per_s": args.batch * measured / wall, "call_s": time.monotonic() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="each round runs 1 rank and 2 ranks (order alternates)")
    ap.add_argument("--steps", type=int, default=6, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="steps not measured (>= 1)")
    ap.add_argument("--batch", type=int, default=8, help="global batch (each of 2 ranks takes half)")
    ap.add_argument("--patch", type=int, default=64)
    ap.add_argument("--task", default="demosaic")
    ap.add_argument("--prior", default="glr")
    ap.add_argument("--cg-iters", type=int, default=15)
    ap.add_argument("--admm-iters", type=int, default=2)
    ap.add_argument("--signal", default="green-difference")
    ap.add_argument("--threads", type=int, default=2, help="threads in all, either way")
    ap.add_argument("--one-core", action=argparse.BooleanOptionalAction, default=True,
                    help="also 1 rank with half the threads (the scaling of the 2 ranks)")
    args = ap.parse_args()
    if args.warmup < 1 or args.batch % 2 or args.threads % 2:
        raise SystemExit("--warmup must be >= 1, --batch and --threads even")
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        tmp = Path(tmp)
        _photos(tmp / "photos", 6, 256)
        runs = []
        order = []
        half = args.threads // 2
        for r in range(args.rounds):
            pair = [(1, args.threads), (2, half)]
            order += pair if r % 2 == 0 else pair[::-1]
            if args.one_core:
                order.append((1, half))
        for i, (ranks, per_rank) in enumerate(order):
            rec = _run(ranks, per_rank, args, tmp / "photos", tmp / f"run{i}")
            runs.append(rec)
            print(f"{ranks} rank(s) x {rec['threads_per_rank']} thread(s): {rec['patches_per_s']:.3f} patches/s "
                  f"({rec['steps']} steps of {args.batch} in {rec['wall_s']:.1f} s; whole call {rec['call_s']:.0f} s)",
                  flush=True)
    one = [r["patches_per_s"] for r in runs if r["ranks"] == 1 and r["threads_per_rank"] == args.threads]
    two = [r["patches_per_s"] for r in runs if r["ranks"] == 2]
    half_one = [r["patches_per_s"] for r in runs if r["ranks"] == 1 and r["threads_per_rank"] == args.threads // 2]
    m1, m2 = statistics.mean(one), statistics.mean(two)
    print(f"\n{args.prior} {args.task}, {args.patch}x{args.patch} patches, global batch {args.batch}, "
          f"{args.threads} threads in all:")
    print(f"1 rank  x {args.threads} threads: {m1:.3f} patches/s (runs: {', '.join(f'{v:.3f}' for v in one)})")
    print(f"2 ranks x {args.threads // 2} thread(s): {m2:.3f} patches/s (runs: {', '.join(f'{v:.3f}' for v in two)})")
    print(f"2 ranks / 1 rank: {m2 / m1:.2f}x (same threads in all)")
    if half_one:
        m0 = statistics.mean(half_one)
        print(f"1 rank  x {args.threads // 2} thread(s): {m0:.3f} patches/s (runs: "
              f"{', '.join(f'{v:.3f}' for v in half_one)}); 2 ranks / this: {m2 / m0:.2f}x (2 would be perfect "
              "scaling)")
    try:
        print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    except OSError:
        pass


if __name__ == "__main__":
    main()
