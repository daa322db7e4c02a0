"""Does averaging two methods' outputs beat either? Dataset-MSE PSNR (the benchmark's protocol) of
each method, of each as its self-ensemble, and of the mean of their outputs, one pass and
self-ensembled, on a folder of photos (the training pack's held-out crops: never a test set).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/average_outputs.py carry/pack/val --task demosaic \\
        --methods ugtv,uglr

Each method runs once plain and once as its self-ensemble (:mod:`gsprestore.self_ensemble`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's gsprestore


def main() -> None:
    import torch

    from gsprestore.benchmark import load_ground_truth
    from gsprestore.datasets import find_dataset
    from gsprestore.metrics import image_scores, psnr_dataset_mse
    from gsprestore.restorers import get_restorer
    from gsprestore.tasks import observe, score_space

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a folder of photos")
    ap.add_argument("--task", default="demosaic")
    ap.add_argument("--methods", default="ugtv,uglr", help="two or more methods, comma-separated")
    args = ap.parse_args()
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    runs = {(n, se): get_restorer(n, args.task, self_ensemble=se) for n in names for se in (False, True)}
    space = score_space(args.task)
    mses: dict[str, list[float]] = {}
    with torch.no_grad():
        for path in find_dataset("custom", args.data).files:
            gt = load_ground_truth(path)
            y = observe(args.task, gt)
            outs = {key: r(y).float() for key, r in runs.items()}
            rows = {f"{n}{'+se' if se else ''}": out for (n, se), out in outs.items()}
            for se in (False, True):
                rows[" + ".join(f"{n}{'+se' if se else ''}" for n in names) + " (mean)"] = (
                    sum(outs[(n, se)] for n in names) / len(names))
            for label, out in rows.items():
                mses.setdefault(label, []).append(float(image_scores(out, gt, space)["mse"][0]))
    for label, values in mses.items():
        print(f"{label:>32}  {psnr_dataset_mse(values):.3f} dB ({len(values)} images)")


if __name__ == "__main__":
    main()
