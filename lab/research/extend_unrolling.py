"""A uGTV weights file run deeper than it was trained: more ADMM iterations and CG steps, the extra
ones copying the last one's learned CG step sizes (``alpha``, ``beta``: one per ADMM iteration,
CG step and head). Score the written file on held-out crops with ``gsprestore benchmark``:

    .venv/bin/python lab/research/extend_unrolling.py gsprestore/weights/ugtv_demosaic.pt 5 10 /tmp/a5c10.pt
    gsprestore benchmark --task demosaic --dataset custom --data-dir carry/pack/val --methods ugtv \\
        --weights ugtv=/tmp/a5c10.pt
"""

from __future__ import annotations

import argparse

import torch


def extend(steps: torch.Tensor, admm: int, cg: int) -> torch.Tensor:
    """``steps`` (ADMM iterations, CG steps, heads) grown to (``admm``, ``cg``, heads) by repeating
    its last ADMM iteration, then its last CG step."""
    a, c, h = steps.shape
    if admm > a:
        steps = torch.cat([steps, steps[-1:].expand(admm - a, c, h)], 0)
    if cg > c:
        steps = torch.cat([steps, steps[:, -1:].expand(steps.shape[0], cg - c, h)], 1)
    return steps.clone()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("weights")
    ap.add_argument("admm_iters", type=int)
    ap.add_argument("cg_iters", type=int)
    ap.add_argument("out")
    args = ap.parse_args()
    blob = torch.load(args.weights, map_location="cpu", weights_only=False)
    blob["config"] = {**blob["config"], "admm_iters": args.admm_iters, "cg_iters": args.cg_iters}
    blob["state_dict"] = {k: extend(v, args.admm_iters, args.cg_iters) if k.endswith((".alpha", ".beta")) else v
                          for k, v in blob["state_dict"].items()}
    torch.save(blob, args.out)
    print(f"wrote {args.out}: {args.admm_iters} ADMM x {args.cg_iters} CG")


if __name__ == "__main__":
    main()
