"""Training-step speed of the shipped models on the CPU: plain autograd through every unrolled CG
step (the reference) against the hand-written adjoint backward (:mod:`gsprestore.solvers.cg.adjoint`),
measured in the same process, alternating, on the same patches.

For each model, thread count and batch size it prints the no-grad forward time, the step time
(forward + L1 + backward + Adam) of each path, patches/s, the new / reference ratio and each step
as a multiple of the forward. Times are the minimum over ``--repeat`` steps (wall clock), with the
process CPU time of the same step beside them (a loaded machine inflates wall time, less so CPU
time). ``gsprestore train`` also keeps freed memory in the heap (:func:`gsprestore.training.keep_freed_memory`);
``--keep-freed`` (default on) does the same here, for both paths.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_training_step.py                       # 4 models, 1 and 2 threads, batch 4 and 16
    .venv/bin/python benchmarks/bench_training_step.py --models ugtv_demosaic,uglr_upscale2x --threads 1 --batch 4
    .venv/bin/python benchmarks/bench_training_step.py --models ugtv-lite_demosaic --threads 1 --batch 16 --patch 32 \
        --paths adjoint --precisions fp32,bf16        # bf16 autocast against float32, same process
    PYTHONPATH=../other-tree .venv/bin/python benchmarks/bench_training_step.py ...   # a tree without the setting:
                                                                              # its one path, labelled "tree"
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from gsprestore.core import backend
from gsprestore.evaluation.deadleaves import dead_leaves
from gsprestore.physics.tasks import network_input
from gsprestore.methods.weights import load_model

MODELS = ("ugtv_demosaic", "uglr_demosaic", "ugtv_upscale2x", "uglr_upscale2x",
          "ugtv-lite_demosaic", "uglr-lite_upscale2x")  # the CPU-size networks (issue 39)


def patches(batch: int, size: int) -> torch.Tensor:
    """``batch`` dead-leaves images (textured, edges at every scale), (B, 3, size, size) in [0, 1]."""
    imgs = [torch.from_numpy(dead_leaves(size, seed=s).copy()).permute(2, 0, 1).float() for s in range(batch)]
    return torch.stack(imgs).clamp(0, 1)


def timed(fn, repeat: int) -> tuple[float, float]:
    """(min wall s, CPU s of that call) over ``repeat`` calls after one warm-up."""
    fn()
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        c, t = time.process_time(), time.perf_counter()
        fn()
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        if wall < best[0]:
            best = (wall, cpu)
    return best


def bench(name: str, threads: int, batch: int, size: int, repeat: int, paths: dict,
          precisions: tuple[str, ...] = ("fp32",)) -> dict:
    torch.set_num_threads(threads)
    method, task = name.split("_")
    model = load_model(method, task)
    model.train()
    gt = patches(batch, size)
    known, mask = network_input(task, gt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-12)  # a step that barely moves the weights

    def forward():
        with torch.no_grad():
            model(known, mask)

    def step():
        opt.zero_grad(set_to_none=True)
        (model(known, mask) - gt).abs().mean().backward()
        opt.step()

    def step_bf16():  # bf16 autocast of the PyTorch ops (convolutions, matmuls); the loss in float32
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(known, mask)
        (out.float() - gt).abs().mean().backward()
        opt.step()

    row = {"model": name, "threads": threads, "batch": batch, "patch": size}
    row["forward_s"], row["forward_cpu_s"] = timed(forward, repeat)
    for label, settings in paths.items():
        for precision in precisions:
            with backend.configure(**settings):
                wall, cpu = timed(step if precision == "fp32" else step_bf16, repeat)
            key = label if precision == "fp32" else f"{label}-{precision}"
            row[key] = {"step_s": wall, "cpu_s": cpu, "patches_per_s": batch / wall,
                        "x_forward": wall / row["forward_s"]}
    if "adjoint" in row and "autograd" in row:
        row["speedup"] = row["autograd"]["step_s"] / row["adjoint"]["step_s"]
        row["speedup_cpu"] = row["autograd"]["cpu_s"] / row["adjoint"]["cpu_s"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batch", default="4,16")
    ap.add_argument("--patch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep-freed", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--paths", default="autograd,adjoint",
                    help="which of the tree's paths to time (a tree without the setting has one: 'tree')")
    ap.add_argument("--precisions", default="fp32",
                    help="fp32 and/or bf16 (torch.autocast on the CPU: pays on AVX512-BF16 / AMX cores, lscpu)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    if args.keep_freed:
        import gsprestore.training as training

        if hasattr(training, "keep_freed_memory"):  # a tree from before it has none
            training.keep_freed_memory()
    paths = ({"autograd": {"cg_adjoint": 0}, "adjoint": {"cg_adjoint": 1}} if hasattr(backend.settings, "cg_adjoint")
             else {"tree": {}})
    if len(paths) > 1:
        paths = {k: v for k, v in paths.items() if k in args.paths.split(",")}
    rows = []
    print(f"torch {torch.__version__}, native kernels: {backend.native() is not None}, paths: {', '.join(paths)}")
    for name in args.models.split(","):
        for threads in map(int, args.threads.split(",")):
            for batch in map(int, args.batch.split(",")):
                r = bench(name, threads, batch, args.patch, args.repeat, paths,
                          tuple(args.precisions.split(",")))
                rows.append(r)
                parts = [f"{name:15s} {threads}t b{batch:<3d} fwd {r['forward_s']:.3f}s"]
                for label in [k for k in r if isinstance(r[k], dict)]:
                    p = r[label]
                    parts.append(f"{label} {p['step_s']:.3f}s (cpu {p['cpu_s']:.3f}) {p['patches_per_s']:.2f} p/s "
                                 f"= {p['x_forward']:.1f}x fwd")
                if "speedup" in r:
                    parts.append(f"new/ref {r['speedup']:.2f}x (cpu {r['speedup_cpu']:.2f}x)")
                print(" | ".join(parts), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
