"""Where one training step of a shipped model spends its time: torch.profiler over one step
(forward, L1, backward; Adam) on dead-leaves patches, after a warm-up step, with the step's wall
time and the no-grad forward of the same batch beside it. The table lists operators and the
custom autograd ops (``_UnrolledCG``, ``_AdmmEdgeStepBackward``, ``EdgeWeightsBackward``, ...);
the native kernels they call count as their self time.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/profile_training_step.py ugtv_demosaic --batch 4
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/profile_training_step.py uglr_upscale2x --sort cpu_time_total
    PYTHONPATH=../other-tree .venv/bin/python benchmarks/profile_training_step.py ...   # another checkout
"""

from __future__ import annotations

import argparse
import time

import torch

from bench_training_step import patches

from gsprestore.physics.tasks import network_input
from gsprestore.methods.weights import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="method_task of a shipped model, e.g. ugtv_demosaic")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--patch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sort", default="self_cpu_time_total", help="self_cpu_time_total or cpu_time_total")
    ap.add_argument("--rows", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import gsprestore.training as training

    if hasattr(training, "keep_freed_memory"):  # as gsprestore train does
        training.keep_freed_memory()
    method, task = args.model.split("_")
    model = load_model(method, task)
    model.train()
    gt = patches(args.batch, args.patch)
    known, mask = network_input(task, gt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-12)

    def step():
        opt.zero_grad(set_to_none=True)
        (model(known, mask) - gt).abs().mean().backward()
        opt.step()

    step()
    t = time.perf_counter()
    step()
    step_s = time.perf_counter() - t
    with torch.no_grad():
        t = time.perf_counter()
        model(known, mask)
        fwd_s = time.perf_counter() - t
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print(f"{args.model}, batch {args.batch} of {args.patch}x{args.patch}, {args.threads} thread(s): "
          f"step {step_s:.3f} s, no-grad forward {fwd_s:.3f} s ({step_s / fwd_s:.1f}x)")
    print(prof.key_averages().table(sort_by=args.sort, row_limit=args.rows))


if __name__ == "__main__":
    main()
