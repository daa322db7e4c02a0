"""Widen the packed feature trunk of a CPU-size weights file (``ugtv-lite`` / ``uglr-lite``) from
``width`` to a larger width without changing what the network computes: a start for training
the wider candidates of the size frontier (docs/cpu-networks.md) from the shipped accuracy
instead of from scratch (Net2Net-style, Chen et al. ICLR 2016, with zero-initialised fan-out).

Usage (from the repository root)::

    .venv/bin/python lab/research/widen_weights.py IN.pt OUT.pt 48 [--seed 0]

How the function is kept. The trunk is ``h_1 = relu(conv_1(x))``, ``h_l = h_{l-1} +
relu(conv_l(h_{l-1}))`` and each block's head reads it through a 1x1 ``unpack`` convolution.
The added channels get small random weights from every input (so they carry features and get
gradients), while every *old* output channel's weights from the *added* input channels, and the
head's ``unpack`` weights from the added channels, are zero: the old channels, and so the
features, the graph and the output, are exactly those of ``IN``; training then grows the
zero weights from their non-zero gradients.
"""

from __future__ import annotations

import argparse
import math


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("width", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=0.5,
                    help="std of the added weights relative to PyTorch's default init (kaiming-uniform)")
    a = ap.parse_args()
    obj = torch.load(a.src, weights_only=True)
    cfg, sd = dict(obj["config"]), obj["state_dict"]
    if cfg.get("feature_trunk") != "packed":
        raise SystemExit(f"{a.src}: not a CPU-size (packed trunk) network")
    old, new = int(cfg["width"]), a.width
    if new <= old:
        raise SystemExit(f"new width {new} must exceed the stored {old}")
    g = torch.Generator().manual_seed(a.seed)
    out = {}
    for name, t in sd.items():
        if name.startswith("trunk.cnn.convs.") and name.endswith(".weight"):
            o, i, kh, kw = t.shape
            i_new = i if i != old else new
            bound = a.scale / math.sqrt(i_new * kh * kw)
            w = (torch.rand(new, i_new, kh, kw, generator=g, dtype=torch.float64) * 2 - 1) * bound
            w[:o] = 0.0
            w[:o, :i] = t.double()  # old outputs: old weights, zero from added inputs
            out[name] = w.to(t.dtype)
        elif name.startswith("trunk.cnn.convs.") and name.endswith(".bias"):
            b = torch.zeros(new, dtype=torch.float64)
            b[:old] = t.double()
            out[name] = b.to(t.dtype)
        elif name.endswith(".head.unpack.weight"):
            o, i = t.shape[:2]
            w = torch.zeros(o, new, *t.shape[2:], dtype=t.dtype)
            w[:, :i] = t
            out[name] = w
        else:
            out[name] = t
    cfg["width"] = new
    obj["config"], obj["state_dict"] = cfg, out
    obj["meta"] = dict(obj.get("meta") or {}, widened={"from": a.src, "width": [old, new], "seed": a.seed})
    torch.save(obj, a.out)
    print(f"wrote {a.out}: trunk width {old} -> {new}")


if __name__ == "__main__":
    main()
