"""Speed and memory of the unrolled networks on the CPU (issue "Speed and memory").

(a) inference: one uGTV forward (paper-size default config, random initialisation; the timing
    does not depend on the weights) on a 768 x 512 mosaic, against one full-resolution
    48 -> 48 channel 3x3 convolution timed in the same run; prints both and their ratio
    (target: <= 60x) and where the time goes (CNNs, graph weights, solvers).
(b) training: peak resident memory (``ru_maxrss`` of a fresh subprocess) for one training step
    (forward, backward, Adam step) on a batch of 16 64 x 64 patches (target: <= 4 GB), for each
    checkpoint mode of ``UnrolledNet`` asked for (default: none and per-head).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_models.py                 # both parts, uGTV demosaic
    .venv/bin/python benchmarks/bench_models.py --part inference --method uglr
    .venv/bin/python benchmarks/bench_models.py --part inference --signal green-difference
    .venv/bin/python benchmarks/bench_models.py --part training --batch 16 --patch 64 --json out.json
    .venv/bin/python benchmarks/bench_models.py --part halo [--weights model.pt]   # tiling halo check

(c) halo: how far a pixel's output depends on the input, for choosing ``Restorer.halo``: the
    central 32x32 of a 128x128 synthetic mosaic computed from crops with halo h = 8..48 against
    the full image (max abs difference), for iGLR/iGTV and for uGLR/uGTV (``--weights`` files, or
    untrained networks when none are given).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from contextlib import contextmanager

import torch

from gsprestore.physics import sampling
from gsprestore import training
from gsprestore.models import build_model
from gsprestore.models.unrolled import UnrolledBlock
from gsprestore.methods.registry import observation
from gsprestore_lab.timing import best_of, synthetic_rgb


@contextmanager
def timed_methods(acc: dict[str, float]):
    """Accumulate wall time of the block stages: CNN features, graph weights, solver."""
    originals = {
        "cnn": UnrolledBlock.head_features,
        "graph": UnrolledBlock.graph_weights,
        "solver": UnrolledBlock.solve,
    }

    def wrap(key, fn):
        def inner(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            acc[key] = acc.get(key, 0.0) + time.perf_counter() - t0
            return out

        return inner

    UnrolledBlock.head_features = wrap("cnn", originals["cnn"])
    UnrolledBlock.graph_weights = wrap("graph_incl_cnn", originals["graph"])
    UnrolledBlock.solve = wrap("solver", originals["solver"])
    try:
        yield
    finally:
        for name, key in (("head_features", "cnn"), ("graph_weights", "graph"), ("solve", "solver")):
            setattr(UnrolledBlock, name, originals[key])


def inference(args) -> dict:
    """A warm-up forward (it also faults in fresh memory), then ``args.repeats`` rounds of: the
    reference conv (best of 3, NCHW and channels-last) and one timed forward. Each round gives a
    ratio; the median round is reported (this shared machine's speed drifts by 2x over minutes,
    and the conv and the forward drift differently, so a ratio of two separately taken minima
    is noisier than the ratio within a round)."""
    torch.manual_seed(0)
    H, W = args.height, args.width
    conv = torch.nn.Conv2d(48, 48, 3, padding=1)
    feat = torch.randn(1, 48, H, W)
    feat_cl = feat.contiguous(memory_format=torch.channels_last)  # the layout our CNNs run in
    opts = {} if args.signal == "rgb" else {"signal": args.signal}
    model = build_model(args.method, args.task, **opts).eval()
    rgb = synthetic_rgb(H, W)
    y = sampling.mosaic(rgb) if args.task == "demosaic" else sampling.decimate(rgb)
    known, mask = observation(args.task, y)
    with torch.inference_mode():
        conv(feat)  # warm-ups
        conv(feat_cl)
        out = model(known, mask)
    assert out.shape == known.shape and torch.isfinite(out).all()
    rounds = []
    for _ in range(max(1, args.repeats)):
        acc: dict[str, float] = {}
        with torch.inference_mode():
            t_conv = best_of(lambda: conv(feat), 3)
            t_conv_cl = best_of(lambda: conv(feat_cl), 3)
            with timed_methods(acc):
                t0 = time.perf_counter()
                model(known, mask)
                t_model = time.perf_counter() - t0
        rounds.append({"conv48_s": t_conv, "conv48_channels_last_s": t_conv_cl, "model_s": t_model,
                       "ratio": t_model / t_conv, "ratio_channels_last": t_model / t_conv_cl, "acc": acc})
    med = sorted(rounds, key=lambda r: r["ratio"])[(len(rounds) - 1) // 2]
    acc, t_ref, t_model = med["acc"], med["conv48_s"], med["model_s"]
    breakdown = {
        "cnn_s": acc.get("cnn", 0.0),
        "graph_weights_s": acc.get("graph_incl_cnn", 0.0) - acc.get("cnn", 0.0),
        "solver_s": acc.get("solver", 0.0),
    }
    breakdown["other_s"] = t_model - sum(breakdown.values())
    res = {
        "part": "inference", "method": args.method, "task": args.task, "signal": args.signal, "size": [H, W],
        "threads": torch.get_num_threads(), "conv48_s": t_ref, "model_s": t_model,
        "ratio": med["ratio"], "target_ratio": 60, "breakdown": breakdown,
        "conv48_channels_last_s": med["conv48_channels_last_s"], "ratio_channels_last": med["ratio_channels_last"],
        "rounds": [{k: v for k, v in r.items() if k != "acc"} for r in rounds],
        "params": model.num_params(),
    }
    for i, r in enumerate(rounds):
        print(f"round {i + 1}: conv {r['conv48_s'] * 1e3:.1f} ms (channels-last {r['conv48_channels_last_s'] * 1e3:.1f} ms), "
              f"forward {r['model_s']:.2f} s: {r['ratio']:.1f}x ({r['ratio_channels_last']:.1f}x channels-last)")
    print(f"median round: one 48->48 3x3 conv at {W}x{H}: {t_ref * 1e3:.1f} ms (NCHW, the reference); "
          f"{med['conv48_channels_last_s'] * 1e3:.1f} ms channels-last")
    print(f"{args.method} ({args.task}, signal={args.signal}) forward at {W}x{H}: {t_model:.2f} s  =  {res['ratio']:.1f} x the conv"
          f"  (target <= 60x)")
    for k, v in breakdown.items():
        print(f"  {k[:-2]:>14}: {v:7.2f} s  ({v / t_ref:6.1f} conv)")
    print(f"  (the same forward = {res['ratio_channels_last']:.1f} x the channels-last conv, the layout of our CNNs)")
    return res


def _training_child(args) -> None:
    """Run in a fresh process: one training step, print JSON with ru_maxrss."""
    mmap_set = training.set_mmap_threshold(args.mmap_threshold) if args.mmap_threshold else False
    torch.manual_seed(0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mode = "" if args.checkpoint == "none" else args.checkpoint
    model = build_model(args.method, args.task, checkpoint=mode)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    rgb = synthetic_rgb(args.patch, args.patch, batch=args.batch)
    y = sampling.mosaic(rgb) if args.task == "demosaic" else sampling.decimate(rgb)
    known, mask = observation(args.task, y)
    t0 = time.perf_counter()
    out = model(known, mask)
    t_fwd = time.perf_counter() - t0
    loss = torch.nn.functional.mse_loss(out, rgb)
    loss.backward()
    opt.step()
    t_step = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "part": "training", "method": args.method, "task": args.task, "batch": args.batch,
        "patch": args.patch, "checkpoint": args.checkpoint, "threads": torch.get_num_threads(),
        "mmap_threshold": args.mmap_threshold if mmap_set else None,
        "peak_rss_gb": peak_kb / 2**20, "baseline_rss_gb": before / 2**20,
        "forward_s": t_fwd, "step_s": t_step, "loss": float(loss.detach()),
    }))


def measure_training(args) -> list[dict]:
    results = []
    for ck in args.checkpoint.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--method", args.method, "--task", args.task,
               "--batch", str(args.batch), "--patch", str(args.patch), "--checkpoint", ck,
               "--mmap-threshold", str(args.mmap_threshold)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"training step (checkpoint={ck}) failed (exit {proc.returncode}; killed for memory?):\n"
                  f"{proc.stderr[-2000:]}")
            results.append({"part": "training", "checkpoint": ck, "failed": proc.returncode})
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{args.method} ({args.task}) training step, batch {args.batch} x {args.patch}x{args.patch}, "
              f"checkpoint={ck}, mmap threshold={res['mmap_threshold'] or 'glibc default'}: "
              f"peak RSS {res['peak_rss_gb']:.2f} GB (target <= 4 GB), "
              f"forward {res['forward_s']:.1f} s, step {res['step_s']:.1f} s")
        results.append(res)
    return results


def halo(args) -> list[dict]:
    from gsprestore.methods.graph_methods import make_restorer
    from gsprestore.methods.registry import get_restorer
    from gsprestore.methods.weights import save_weights

    rgb = synthetic_rgb(128, 128, seed=3)
    y = sampling.mosaic(rgb)
    restorers = {"iglr": get_restorer("iglr", "demosaic"), "igtv": get_restorer("igtv", "demosaic"),
                 "iglr-exact": get_restorer("iglr", "demosaic", cg="exact")}
    files = list(args.weights or [])
    if not files:
        import tempfile

        tmp = tempfile.mkdtemp()
        for m in ("uglr", "ugtv"):
            torch.manual_seed(0)
            files.append(os.path.join(tmp, f"{m}-untrained.pt"))
            save_weights(files[-1], build_model(m, "demosaic"), {})
    for f in files:
        method = torch.load(f, weights_only=True)["method"]
        restorers[f"{method} ({os.path.basename(f)})"] = make_restorer(method, "demosaic", weights=f)
    c0, c1 = 48, 80
    out = []
    for name, r in restorers.items():
        full = r(y)[..., c0:c1, c0:c1]
        diffs = {}
        for h in (8, 16, 32, 48):
            part = r(y[..., c0 - h:c1 + h, c0 - h:c1 + h])[..., h:h + 32, h:h + 32]
            diffs[h] = float((part - full).abs().max())
        print(f"{name:>28}: " + "  ".join(f"h={h}: {d:.1e}" for h, d in diffs.items()), flush=True)
        out.append({"part": "halo", "method": name, "max_abs_diff": diffs})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["inference", "training", "both", "halo"], default="both")
    ap.add_argument("--weights", nargs="*", help="halo: weight files of uglr/ugtv demosaickers")
    ap.add_argument("--method", choices=["uglr", "ugtv"], default="ugtv")
    ap.add_argument("--task", choices=["demosaic", "upscale2x"], default="demosaic")
    ap.add_argument("--repeats", type=int, default=3,
                    help="inference: rounds of (reference conv, forward) after a warm-up; the median round is reported")
    ap.add_argument("--signal", choices=["rgb", "green-difference"], default="rgb",
                    help="inference: what the solvers interpolate (demosaicking models' config option)")
    ap.add_argument("--height", type=int, default=512)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--patch", type=int, default=64)
    ap.add_argument("--checkpoint", default="none,head",
                    help="training: comma-separated checkpoint modes to measure, each in a fresh process "
                         "(none, head, block, block+head)")
    ap.add_argument("--mmap-threshold", type=int, default=0,
                    help="training: glibc M_MMAP_THRESHOLD in bytes for the step's process (0: glibc default)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _training_child(args)
        return
    out = []
    if args.part in ("inference", "both"):
        out.append(inference(args))
    if args.part in ("training", "both"):
        out.extend(measure_training(args))
    if args.part == "halo":
        out.extend(halo(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
