"""Tiled vs untiled output of one method on real images (issue "Whole images and folders").

For each image: the observation (RGGB mosaic, or the 2x decimation), the method run on the whole
image in one pass, and the same through the tiled engine (``--tile``, ``--overlap``, the
``gsprestore demosaic/upscale2x --tile N --overlap N`` path); prints the PSNR between the two
outputs (target >= 50 dB for uGTV with ``--tile 256 --overlap 32``), the max abs difference, and
each output's PSNR against the ground truth.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_tiling.py ~/datasets/kodak24/kodim01.png \\
        --method ugtv [--weights weights/ugtv_demosaic.pt] --tile 256 --overlap 32

``--rules`` (issue 24) instead times the automatic tile size (``--tile 0``) under the rule before
issue 24 (a 1 GiB cap on the planned working set: square tiles from the budget, whatever the image)
against the current one (:func:`gsprestore.runtime.tiling.choose_tile`: the whole image when it fits, else
the tiles computing the fewest pixels within a share of the available memory), in the same run,
also the new tile rule without the engine's allocator setting (``tiles``: glibc keeps freed
memory in the heap, :func:`gsprestore.core.memory.keep_freed_heap_memory`, which the old engine did
not ask for): each in its own child process (same engine path, ``engine.auto_tile`` swapped), which reports
the tile size and count, the seconds of ``engine.restore`` and its peak resident memory; then the
old/new time ratio and the largest difference between the two outputs. ``--repeat N`` runs each
rule N times, alternating old and new, and keeps the fastest of each (on a shared machine the
load drifts during a run). Without images it makes a
dead-leaves ground truth whose observation is ``--size`` (default 384x260, issue 24's photo)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_tiling.py --rules --method uglr --task upscale2x --repeat 2
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_tiling.py --rules --method ugtv --task demosaic \\
        --size 768x512
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch

from gsprestore.runtime import tiling as engine
from gsprestore.evaluation.benchmark import load_ground_truth, make_observation
from gsprestore.methods.registry import get_restorer


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


#: old: the tile rule and allocator before issue 24; tiles: the new tile rule alone; new: the engine
#: now (new tile rule, freed memory kept in the heap: gsprestore.core.memory.keep_freed_heap_memory).
RULES = ("old", "tiles", "new")


def legacy_auto_tile(restorer, y, pattern, device, autocast, overlap, room=None) -> int:
    """The CPU rule before issue 24: a square core from min(1/4 of available memory, 1 GiB, half
    the room the output leaves) at the method's bytes per pixel, whatever the image's size."""
    scale = engine.SCALE[restorer.task]
    budget = min(0.25 * engine.available_memory(), engine.LEGACY_CPU_BUDGET_CAP)
    if room is not None:
        budget = min(budget, 0.5 * room)
    tile = engine.tile_for_budget(budget, engine.bytes_per_pixel(restorer), overlap, scale)
    return max(tile, engine._even_up(2 * overlap + 2))


def _observation(path: str | None, task: str, size: tuple[int, int], seed: int) -> torch.Tensor:
    """The (1, C, H, W) observation of an image file's ground truth, or of a dead-leaves one whose
    observation is ``size`` = (width, height)."""
    if path:
        return make_observation(task, load_ground_truth(path))
    from gsprestore.evaluation.deadleaves import dead_leaves

    scale = engine.SCALE[task]
    w, h = scale * size[0], scale * size[1]
    gt = dead_leaves(max(w, h), seed=seed, supersample=1)[:h, :w]
    return make_observation(task, torch.from_numpy(gt).permute(2, 0, 1)[None].contiguous())


def _status_mb(key: str) -> float:
    """``VmRSS`` / ``VmHWM`` (peak) of this process in MB from /proc (not ``ru_maxrss``, which a
    child inherits across exec from its parent's high-water mark)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(args) -> int:
    """One rule in this (child) process: restore with ``tile=0`` and print a JSON line."""
    import numpy as np

    opts = {"weights": args.weights} if args.weights else {}
    r = get_restorer(args.method, args.task, **opts)
    y = torch.from_numpy(np.load(args.images[0]))  # the observation the parent saved
    chosen = []
    rule = legacy_auto_tile if args.worker == "old" else engine.auto_tile
    if args.worker != "new":  # before issue 24 the allocator was left alone
        engine.CPU_KEEP_FREED_MEMORY = False

    def record(*a, **k):
        chosen.append(rule(*a, **k))
        return chosen[-1]

    engine.auto_tile = record
    totals = []
    before = _status_mb("VmHWM")
    t0 = time.perf_counter()
    out = engine.restore(r, y, "RGGB", tile=0, overlap=args.overlap, device="cpu",
                         progress=lambda done, total: totals.append(total))
    seconds = time.perf_counter() - t0
    peak = _status_mb("VmHWM")
    np.save(args.out, out.numpy())
    print(json.dumps({"rule": args.worker, "input": list(y.shape[-2:]), "tile": chosen[0], "tiles": totals[-1],
                      "seconds": seconds, "peak_rss_mb": peak, "peak_rss_before_mb": before,
                      "available_gb": engine.available_memory() / 1e9, "threads": torch.get_num_threads()}))
    return 0


def compare_rules(args) -> int:
    """Both rules, each in a child process, in this run; seconds, ratio and output difference."""
    import subprocess
    import tempfile

    import numpy as np

    script = os.path.abspath(__file__)
    images = args.images or [None]
    size = tuple(int(v) for v in args.size.lower().split("x"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in images:
            obs = os.path.join(tmp, "observation.npy")
            np.save(obs, _observation(path, args.task, size, args.seed)[0].numpy())
            runs: dict[str, dict] = {}
            times: dict[str, list[float]] = {rule: [] for rule in RULES}
            order = [RULES if i % 2 == 0 else RULES[::-1] for i in range(args.repeat)]
            for rule in [r for pair in order for r in pair]:  # alternating, so load drifts hit both
                out = os.path.join(tmp, f"{rule}.npy")
                cmd = [sys.executable, script, "--worker", rule, "--out", out, "--method", args.method,
                       "--task", args.task, obs]
                cmd += ["--overlap", str(args.overlap)] if args.overlap is not None else []
                cmd += ["--weights", args.weights] if args.weights else []
                cmd += ["--threads", str(args.threads)] if args.threads else []
                res = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if res.returncode:
                    sys.stderr.write(res.stderr)
                    return res.returncode
                runs[rule] = json.loads(res.stdout.strip().splitlines()[-1])
                runs[rule]["output"] = np.load(out)
                times[rule].append(runs[rule]["seconds"])
            for rule in RULES:  # the fastest of the repeats: the least disturbed by other jobs
                runs[rule]["seconds"] = min(times[rule])
                runs[rule]["all_seconds"] = times[rule]
            old, new = runs["old"], runs["new"]
            diff = float(np.abs(old["output"].astype(np.float64) - new["output"]).max())
            for rec in runs.values():
                rec.pop("output")
            name = os.path.basename(path) if path else f"dead-leaves, observation {args.size}"
            row = {"image": name, "method": args.method, "task": args.task, **runs,
                   "ratio_old_over_new": old["seconds"] / new["seconds"],
                   "ratio_old_over_tiles_only": old["seconds"] / runs["tiles"]["seconds"], "max_abs_diff": diff}
            rows.append(row)
            print(f"{name}, {args.method} {args.task}, input {old['input'][1]}x{old['input'][0]}, "
                  f"{old['available_gb']:.1f} GB available, {old['threads']} thread(s):")
            for rule, rec in (("old (1 GiB cap)", old), ("new tiles only", runs["tiles"]), ("new (tiles + heap)", new)):
                runs_s = ", ".join(f"{t:.1f}" for t in rec["all_seconds"])
                print(f"  {rule:22s} tile {rec['tile']:5d}  {rec['tiles']:3d} tiles  {rec['seconds']:8.1f} s "
                      f"(fastest of {runs_s})  peak RSS {rec['peak_rss_mb']:6.0f} MB "
                      f"({rec['peak_rss_before_mb']:.0f} MB before the run)")
            print(f"  old / new time: {row['ratio_old_over_new']:.2f}x (tiles alone: "
                  f"{row['ratio_old_over_tiles_only']:.2f}x); max |old - new| = {diff:.2e}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("images", nargs="*")
    ap.add_argument("--rules", action="store_true", help="time the old and the new automatic tile rule")
    ap.add_argument("--size", default="384x260", help="--rules without images: the observation's WxH")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="--rules: runs of each rule, alternating (fastest kept)")
    ap.add_argument("--worker", choices=RULES, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--method", default="ugtv")
    ap.add_argument("--task", default="demosaic", choices=("demosaic", "upscale2x"))
    ap.add_argument("--weights", default=None)
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--overlap", type=int, default=None, help="default: 32 (--rules: the method's own)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        return worker(args)
    if args.rules:
        return compare_rules(args)
    if not args.images:
        ap.error("give images (or --rules)")
    args.overlap = 32 if args.overlap is None else args.overlap
    opts = {"weights": args.weights} if args.weights else {}
    r = get_restorer(args.method, args.task, **opts)
    rows = []
    for path in args.images:
        gt = load_ground_truth(path)  # (1, 3, H, W)
        y = make_observation(args.task, gt)
        t0 = time.perf_counter()
        with torch.inference_mode():
            whole = r(y, "RGGB")[0].permute(1, 2, 0)
        t1 = time.perf_counter()
        tiled = engine.restore(r, y[0], "RGGB", tile=args.tile, overlap=args.overlap, device="cpu")
        t2 = time.perf_counter()
        ref = gt[0].permute(1, 2, 0)
        row = {"image": os.path.basename(path), "size": list(gt.shape[-2:]), "method": args.method,
               "tile": args.tile, "overlap": args.overlap,
               "psnr_tiled_vs_untiled": psnr(tiled, whole), "max_abs_diff": float((tiled - whole).abs().max()),
               "psnr_untiled_vs_gt": psnr(whole, ref), "psnr_tiled_vs_gt": psnr(tiled, ref),
               "seconds_untiled": t1 - t0, "seconds_tiled": t2 - t1}
        rows.append(row)
        print(f"{row['image']}: tiled vs untiled {row['psnr_tiled_vs_untiled']:.2f} dB (max |diff| "
              f"{row['max_abs_diff']:.2e}); vs ground truth untiled {row['psnr_untiled_vs_gt']:.2f} dB, tiled "
              f"{row['psnr_tiled_vs_gt']:.2f} dB; {row['seconds_untiled']:.1f} s / {row['seconds_tiled']:.1f} s",
              flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
