"""Would a deeper unrolling help the trained weights at once? The gradient of the training loss
(L1) with respect to the CG step sizes that ``--init`` adds at 0 when a network is unrolled
deeper than its weights (:func:`gsprestore.models.unrolled.regrown_step_sizes`): at the start of
such a run the network computes what the weights did, and a negative gradient on an added
``alpha_t`` means that taking that step would lower the loss.

Prints, over ``--batches`` batches of training patches (the pack's training photos, never the
test sets): the share of added step sizes (block, ADMM iteration, CG step, head) whose mean
gradient is negative, how often a batch's sign agrees with the mean's, and the mean gradient's
size beside that of the trained step sizes::

    .venv/bin/python lab/research/unrolling_gradient.py gsprestore/weights/ugtv_demosaic.pt \\
        --data carry/pack --admm-iters 2 --cg-iters 10

A share near 0.5 with agreement at the level of noise alone (printed beside it: 0.667 for 4
batches) is no direction: the deeper network has to re-adapt before its added steps pay.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch


def main() -> None:
    from gsprestore import training as T
    from gsprestore.models.unrolled import added_steps
    from gsprestore.physics.tasks import observation, observe

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("weights")
    ap.add_argument("--data", required=True, help="training photos or a training pack")
    ap.add_argument("--admm-iters", type=int, default=None)
    ap.add_argument("--cg-iters", type=int, default=None)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from gsprestore.training.checkpoints import init_config

    config = init_config(Path(args.weights)) or {}
    deeper = {k: v for k, v in (("admm_iters", args.admm_iters), ("cg_iters", args.cg_iters)) if v is not None}
    cfg = T.TrainConfig(task=config["task"], prior=config["prior"], data=[args.data], seed=args.seed,
                        patches=args.batches * args.batch, val_patches=1, init=args.weights, model=deeper)
    T.adopt_init_config(cfg)
    net = T.build_network(cfg)  # --init: the weights, the added steps at 0 (net.init_regrown)
    if not net.init_regrown:
        raise SystemExit("the network is no deeper than the weights: give --admm-iters / --cg-iters")
    new_shape = tuple(net.blocks[0].alpha.shape)  # ([admm,] cg, heads)
    old_shape = ((config["admm_iters"],) if len(new_shape) == 3 else ()) + (config["cg_iters"], new_shape[-1])
    patches = T.build_patch_sets(cfg).train.float()
    patches = patches / 255 if patches.max() > 2 else patches
    grads = []
    for i in range(args.batches):
        gt = patches[i * args.batch:(i + 1) * args.batch]
        known, mask = observation(cfg.task, observe(cfg.task, gt))
        net.zero_grad()
        loss = (net(known, mask) - gt).abs().mean()
        loss.backward()
        grads.append(torch.stack([b.alpha.grad for b in net.blocks]))
        print(f"batch {i}: loss {loss.item():.5f}", flush=True)
    g = torch.stack(grads)  # (batches, blocks, [admm,] cg, heads)
    mean = g.mean(0)  # (blocks, ...)
    sel = added_steps(old_shape, new_shape).expand_as(mean)
    agree = (torch.sign(g) == torch.sign(mean)).float().mean(0)
    print(f"{args.weights}: {tuple(old_shape[:-1])} -> {tuple(new_shape[:-1])} steps per block, "
          f"{int(sel.sum())} added step sizes over {len(net.blocks)} blocks")
    print(f"  share with a negative mean gradient (the step would help): {(mean[sel] < 0).float().mean().item():.3f}")
    # independent noise: a batch's gradient correlates 1/sqrt(n) with the mean of n
    noise = 0.5 + math.asin(1 / math.sqrt(args.batches)) / math.pi
    print(f"  batches agreeing with the mean's sign: {agree[sel].mean().item():.3f} (noise alone: {noise:.3f})")
    print(f"  mean |gradient|: added {mean[sel].abs().mean().item():.2e}, trained {mean[~sel].abs().mean().item():.2e}")


if __name__ == "__main__":
    main()
