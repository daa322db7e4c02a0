"""How noisy a shipped model's training gradient is in float32 (the floor of the GPU job's gradient
check, ``grad_check`` in ``lab/tools/device_train.py``).

For each model, on the CPU, the L1 training gradient of all parameters on two random 64 x 64
patches (seed 0): its relative difference from the float64 gradient, and from the float32
gradients at the same patches moved by a 1e-6 jitter (``--draws`` draws). The L1 loss and the ADMM
projections are not smooth, so a rounding or a jitter that flips one residual's sign moves the
gradient by a finite step: the moves of trained weights are percent-sized and heavy-tailed.

    .venv/bin/python lab/research/grad_noise.py                       # the shipped weights
    .venv/bin/python lab/research/grad_noise.py --weights-dir OUT/    # a GPU job's returned models
"""

from __future__ import annotations

import argparse
import copy
import os

import torch

from gsprestore.physics.tasks import network_input
from gsprestore.training import make_loss
from gsprestore.methods.weights import load_model

MODELS = ("ugtv_demosaic", "uglr_demosaic", "ugtv_upscale2x", "uglr_upscale2x")


def gradient(model, task: str, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """All parameters' L1 training gradient at ``x`` in ``dtype``, flattened, as float64."""
    m = copy.deepcopy(model).to(dtype)
    x = x.to(dtype)
    make_loss("l1")(m(*network_input(task, x)), x).backward()
    return torch.cat([p.grad.flatten().double() for p in m.parameters() if p.grad is not None])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights-dir", help="a folder of <method>_<task>.pt files (default: the shipped weights)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--jitter", type=float, default=1e-6)
    args = ap.parse_args()
    torch.set_num_threads(1)
    gt = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    for name in args.models.split(","):
        method, task = name.split("_")
        model = load_model(method, task, os.path.join(args.weights_dir, f"{name}.pt") if args.weights_dir else None)
        g32, g64 = gradient(model, task, gt, torch.float32), gradient(model, task, gt, torch.float64)
        rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
        moves = [rel(gradient(model, task, (gt + args.jitter * torch.randn(
            gt.shape, generator=torch.Generator().manual_seed(k))).clamp(0, 1), torch.float32), g32)
            for k in range(1, args.draws + 1)]
        print(f"{name}: float32 vs float64 {rel(g32, g64):.1e}; jitter {args.jitter:g} moves "
              + " ".join(f"{m:.1e}" for m in moves), flush=True)


if __name__ == "__main__":
    main()
