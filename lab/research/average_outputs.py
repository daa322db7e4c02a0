"""Does averaging two methods' outputs beat either? Dataset-MSE PSNR (the benchmark's protocol) of
each method, of each as its self-ensemble, and of the mean of their outputs, one pass and
self-ensembled, on a folder of photos (the training pack's held-out crops: never a test set).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 .venv/bin/python lab/research/average_outputs.py carry/pack/val --task demosaic \\
        --methods ugtv,uglr

Each method runs once plain and once as its self-ensemble (:mod:`gsprestore.methods.self_ensemble`);
``--mix 0.3,0.4,0.6,0.7`` adds weighted means of two methods' one-pass outputs.
"""

from __future__ import annotations

import argparse


def main() -> None:
    import torch

    from gsprestore.evaluation.benchmark import load_ground_truth
    from gsprestore.evaluation.datasets import find_dataset
    from gsprestore.metrics import image_scores, psnr_dataset_mse
    from gsprestore.methods.registry import get_restorer
    from gsprestore.physics.tasks import observe, score_space

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a folder of photos")
    ap.add_argument("--task", default="demosaic")
    ap.add_argument("--methods", default="ugtv,uglr", help="two or more methods, comma-separated")
    ap.add_argument("--mix", default="", help="with two methods: weights w of the first, comma-separated, for "
                    "rows w * first + (1 - w) * second (one pass each), e.g. 0.3,0.4,0.6,0.7")
    args = ap.parse_args()
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    mix = [float(w) for w in args.mix.split(",") if w.strip()]
    if mix and len(names) != 2:
        ap.error("--mix needs exactly two methods")
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
            for w in mix:
                rows[f"{w:g} {names[0]} + {1 - w:g} {names[1]}"] = w * outs[(names[0], False)] + (1 - w) * outs[
                    (names[1], False)]
            for label, out in rows.items():
                mses.setdefault(label, []).append(float(image_scores(out, gt, space)["mse"][0]))
    for label, values in mses.items():
        print(f"{label:>32}  {psnr_dataset_mse(values):.3f} dB ({len(values)} images)")


if __name__ == "__main__":
    main()
