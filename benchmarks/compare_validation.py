"""Score weight files on the validation patches of a training recipe under several seeds, so that
two training stages can be compared on the same held-out patches (each run validates on its own
seed's split). Used to decide which stage to ship (docs/training.md); never reads a test set.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/compare_validation.py RUN_DIR WEIGHTS.pt [WEIGHTS.pt ...] \\
        --seeds 0 1 --val-patches 256

RUN_DIR supplies the recipe (data folders, patch size, downscaling); every weights file must be a
model of that run's method and task.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from gsprestore.methods import weights
from gsprestore.training import build_patch_sets, evaluate, load_run_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a training run folder (its config.json gives the recipe)")
    ap.add_argument("weights", nargs="+", help="weight files to score (model.pt / best.pt / shipped .pt)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--val-patches", type=int, default=256)
    args = ap.parse_args(argv)
    cfg = load_run_config(args.run)
    method = ("ugtv" if cfg.prior == "gtv" else "uglr")
    models = {w: weights.load_model(method, cfg.task, w, verify=False) for w in args.weights}
    for seed in args.seeds:
        val = build_patch_sets(replace(cfg, seed=seed, patches=8, val_patches=args.val_patches)).val
        for w, model in models.items():
            print(f"{cfg.task} {method} val-seed {seed} ({val.shape[0]} patches) {w}: "
                  f"{evaluate(model, cfg.task, val)['psnr']:.3f} dB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
