"""Count what one training step costs, per model, before timing anything on a GPU (issue #12).

For one forward + L1 loss + backward of each shipped model on ``--batch`` patches of ``--patch``
pixels, a ``TorchDispatchMode`` sees every ATen operator the unfused PyTorch path runs: each is one
kernel launch on a GPU, reading its tensor inputs and writing its outputs. The sums give two floors
for that step on a GPU, neither of which fusion-free code can beat:

* memory floor: bytes moved / HBM bandwidth (H200: ~4.0 TB/s achievable of 4.8 peak);
* launch floor: launches x ~4 us (one small kernel's launch and drain), the same for any batch.

    python benchmarks/count_training_traffic.py [--models ugtv_demosaic,...] [--batch 4] [--patch 64]

The counts are device-independent (the same operators run on CUDA); the native CPU kernels are
switched off so that the PyTorch path (the one CUDA runs) is counted.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("GSPRESTORE_NATIVE", "0")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

HBM_BYTES_PER_S = 4.0e12
LAUNCH_S = 4e-6
#: views and metadata-only operators: no kernel, no traffic
FREE = {"view", "_unsafe_view", "reshape", "expand", "as_strided", "permute", "transpose", "t", "unsqueeze",
        "squeeze", "slice", "select", "detach", "alias", "unbind", "split", "split_with_sizes", "chunk",
        "narrow", "diagonal", "lift_fresh", "_to_copy_noop", "empty", "empty_like", "empty_strided", "new_empty",
        "new_empty_strided", "_reshape_alias", "view_as_real", "view_as_complex", "unfold", "movedim"}


class Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.launches = 0
        self.bytes = 0
        self.by_op: dict[str, list[int]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in FREE:
            return out
        moved = sum(t.numel() * t.element_size() for t in tree_flatten((args, kwargs))[0]
                    if isinstance(t, torch.Tensor))
        moved += sum(t.numel() * t.element_size() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        self.launches += 1
        self.bytes += moved
        rec = self.by_op.setdefault(name, [0, 0])
        rec[0] += 1
        rec[1] += moved
        return out


def count(name: str, batch: int, patch: int) -> dict:
    from gsprestore.training import observe
    from gsprestore.weights import load_model

    method, task = name.split("_")
    model = load_model(method, task).train()
    gt = torch.rand(batch, 3, patch, patch)
    inputs = observe(task, gt)
    with Counter() as c:
        loss = torch.nn.functional.l1_loss(model(*inputs), gt)
        loss.backward()
    per_patch = c.bytes / batch
    return {"model": name, "launches": c.launches, "gb_per_patch": per_patch / 1e9,
            "mem_floor_patches_per_s": HBM_BYTES_PER_S / per_patch,
            "launch_floor_s_per_step": c.launches * LAUNCH_S,
            "top": sorted(c.by_op.items(), key=lambda kv: -kv[1][1])[:5]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="ugtv_demosaic,uglr_demosaic,ugtv_upscale2x,uglr_upscale2x")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--patch", type=int, default=64)
    args = ap.parse_args()
    print(f"one training step (forward + L1 + backward), batch {args.batch} of {args.patch}x{args.patch}, "
          f"unfused PyTorch path")
    print(f"{'model':16} {'launches':>9} {'GB/patch':>9} {'mem floor p/s':>14} {'launch floor s/step':>20}")
    for name in args.models.split(","):
        r = count(name, args.batch, args.patch)
        print(f"{r['model']:16} {r['launches']:9d} {r['gb_per_patch']:9.2f} {r['mem_floor_patches_per_s']:14.0f} "
              f"{r['launch_floor_s_per_step']:20.3f}")
        print("    most traffic: " + ", ".join(f"{k} {v[1] / 1e9 / args.batch:.2f} GB ({v[0]}x)" for k, v in r["top"]))


if __name__ == "__main__":
    main()
