"""Count what one training step costs, per model, before timing anything on a GPU (issue #12).

For one forward + L1 loss + backward of each shipped model on ``--batch`` patches of ``--patch``
pixels, :class:`gsprestore_lab.op_count.Counter` (the cost model's operator counter) sees every
ATen operator the unfused PyTorch path runs: each is one kernel launch on a GPU, reading its distinct
tensor inputs and writing its outputs. The sums give two floors
for that step on a GPU, neither of which fusion-free code can beat:

* memory floor: bytes moved / HBM bandwidth (H100: ~3.0 TB/s measured; H200 ~4.0);
* launch floor: launches x ~4 us (one small kernel's launch and drain), the same for any batch.

    python lab/research/count_training_traffic.py [--models ugtv_demosaic,...] [--batch 4] [--patch 64]

The counts are device-independent (the same operators run on CUDA); the native CPU kernels are
switched off so that the PyTorch path (the one CUDA runs) is counted.

``--path fused`` counts the path a CUDA training step takes today instead: the fused Triton
kernels where they serve training (unrolled CG's forward and adjoint, uGTV's ADMM edge term:
``gsprestore.core.backend.TRITON_KERNELS``), PyTorch for the rest (feature CNNs, graph set-up, node
updates). It runs under ``TRITON_INTERPRET=1`` with every Triton kernel replaced by a recorder that
counts one launch and the bytes of its tensor arguments, each read or written once (a floor: the
5x5 window's neighbours assumed to come from cache), and does not run it: the PyTorch operators
around the kernels then see unwritten values, which changes no shape and no dispatch.

    python lab/research/count_training_traffic.py --path pytorch,fused --batch 2
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("GSPRESTORE_NATIVE", "0")
os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU tensors take the fused paths (--path fused)

import torch  # noqa: E402

from gsprestore_lab.op_count import Counter, Tracker  # noqa: E402

HBM_BYTES_PER_S = 3.0e12  # H100 80GB, measured in the first GPU window (lab/notes/gpu-windows.md)
LAUNCH_S = 4e-6


def _bytes(t: torch.Tensor) -> int:
    """What a kernel reads or writes of a tensor argument, once: its elements (a broadcast view
    counts its storage)."""
    return min(t.numel() * t.element_size(), t.untyped_storage().nbytes())


class _KernelRecorder:
    """Stands in for a Triton kernel: ``kernel[grid](*args)`` books a launch and its tensor
    arguments' bytes into ``counter`` (:meth:`gsprestore_lab.op_count.Counter.book`) and runs
    nothing."""

    def __init__(self, counter: Counter, name: str):
        self.counter, self.name = counter, name

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            moved = sum(_bytes(a) for a in args if isinstance(a, torch.Tensor))
            self.counter.book("triton:" + self.name, 0.0, moved)

        return launch


def count(name: str, batch: int, patch: int, path: str = "pytorch") -> dict:
    import importlib

    from gsprestore.core import backend
    from gsprestore.physics.tasks import network_input
    from gsprestore.methods.weights import load_model

    method, task = name.split("_")
    model = load_model(method, task).train()
    gt = torch.rand(batch, 3, patch, patch)
    inputs = network_input(task, gt)
    c = Counter(Tracker())
    saved = []
    if path == "fused":
        if not backend.gpu_fused_usable(gt):
            raise SystemExit("--path fused needs Triton (pip install triton) and TRITON_INTERPRET=1")
        for module, kernel in backend.TRITON_KERNELS:
            mod = importlib.import_module(module)
            saved.append((mod, kernel, getattr(mod, kernel)))
            setattr(mod, kernel, _KernelRecorder(c, kernel))
    try:
        with backend.configure(gpu_fused=1 if path == "fused" else 0), c:
            loss = torch.nn.functional.l1_loss(model(*inputs), gt)
            loss.backward()
    finally:
        for mod, kernel, real in saved:
            setattr(mod, kernel, real)
    launches, per_patch = sum(c.launches.values()), sum(c.bytes.values()) / batch
    return {"model": name, "launches": launches, "gb_per_patch": per_patch / 1e9,
            "mem_floor_patches_per_s": HBM_BYTES_PER_S / per_patch,
            "launch_floor_s_per_step": launches * LAUNCH_S,
            "top": sorted(c.by_op.items(), key=lambda kv: -kv[1][2])[:5],
            "by_op": c.by_op}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="ugtv_demosaic,uglr_demosaic,ugtv_upscale2x,uglr_upscale2x")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--patch", type=int, default=64)
    ap.add_argument("--path", default="pytorch", help="pytorch (unfused), fused (the Triton kernels where they "
                    "serve training), or both comma-separated")
    args = ap.parse_args()
    print(f"one training step (forward + L1 + backward), batch {args.batch} of {args.patch}x{args.patch}; "
          f"memory floor at {HBM_BYTES_PER_S / 1e12:.1f} TB/s, launch floor at {LAUNCH_S * 1e6:.0f} us")
    print(f"{'model':16} {'path':8} {'launches':>9} {'GB/patch':>9} {'mem floor p/s':>14} {'launch floor s/step':>20}")
    totals: dict[str, float] = {}
    for name in args.models.split(","):
        for path in args.path.split(","):
            r = count(name, args.batch, args.patch, path)
            totals[path] = totals.get(path, 0.0) + r["gb_per_patch"]
            print(f"{r['model']:16} {path:8} {r['launches']:9d} {r['gb_per_patch']:9.2f} "
                  f"{r['mem_floor_patches_per_s']:14.0f} {r['launch_floor_s_per_step']:20.3f}")
            print("    most traffic: " + ", ".join(f"{k} {v[2] / 1e9 / args.batch:.2f} GB ({v[0]}x)" for k, v in r["top"]))
    for path, gb in totals.items():
        print(f"{path}: {gb:.2f} GB per patch pass of each model; the {len(args.models.split(','))} side by side "
              f"on one card: at most {HBM_BYTES_PER_S / (gb * 1e9):.0f} passes/s of each, "
              f"{HBM_BYTES_PER_S / (gb * 1e9) * len(args.models.split(',')):.0f} in all (memory floor)")


if __name__ == "__main__":
    main()
