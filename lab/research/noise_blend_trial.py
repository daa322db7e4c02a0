"""The trial behind the noise-aware network's clean anchor (issue 49): the shipped noise-aware
weights (``DENOISE``) and the clean network's (``CLEAN``, loaded into the noise-aware shape, where
it restores exactly as the clean network) blended with a fixed weight ``g`` (deep network
interpolation, Wang et al., CVPR 2019: ``W = W_clean + g (W_denoise - W_clean)``), scored on
held-out crops at fractions of the protocol's ``low`` level, zero included (the same
Poisson-Gaussian model and seeds as benchmarks/bench_noisy_protocol.py; dataset-MSE PSNR, sRGB).

It answers two questions before any code ships: does a blend between the two beat both ends
somewhere between zero and ``low`` noise, and where should the weight reach 1.

Usage (from the repository root)::

    GSP_THREADS=2 .venv/bin/python lab/research/noise_blend_trial.py DENOISE.pt CLEAN.pt carry/pack/val \\
        --fractions 0,0.0625,0.25,0.5,1 --blends 0,0.25,0.5,0.75,1
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch


def main() -> None:
    from gsprestore import metrics
    from gsprestore.evaluation.datasets import find_dataset
    from gsprestore.imageio.images import read_image
    from gsprestore.methods.registry import get_restorer
    from gsprestore.models.noise_aware import load_clean_weights
    from gsprestore.physics import noise as N

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("denoise")
    ap.add_argument("clean")
    ap.add_argument("data_dir")
    ap.add_argument("--fractions", default="0,0.0625,0.25,0.5,1")
    ap.add_argument("--blends", default="0,0.25,0.5,0.75,1")
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("GSP_THREADS", "1")))
    den = get_restorer("ugtv-lite-denoise", "demosaic", weights=a.denoise)
    dn_state = {k: v.clone() for k, v in den.module.state_dict().items()}
    clean = torch.load(a.clean, weights_only=True)["state_dict"]
    load_clean_weights(den.module, clean)
    anchor = {k: v.clone() for k, v in den.module.state_dict().items()}
    files = list(find_dataset("custom", a.data_dir).files)
    gts = [torch.from_numpy(np.ascontiguousarray(read_image(f).array)).permute(2, 0, 1)[None].float() for f in files]
    low = N.level_params("low")
    print(f"{len(files)} crops; rows: fraction of 'low' (a, b scaled); columns: blend weight g")
    print("fraction  " + "  ".join(f"g={g:<6}" for g in a.blends.split(",")))
    for fi, frac in enumerate(float(f) for f in a.fractions.split(",")):
        noise = low * frac
        ys = [N.noisy_mosaic(gt, noise, seed=7000 + fi * 1000 + i) if frac > 0 else None for i, gt in enumerate(gts)]
        cells = []
        for g in (float(x) for x in a.blends.split(",")):
            den.module.load_state_dict({k: anchor[k] + g * (dn_state[k] - anchor[k]) if v.is_floating_point()
                                        else dn_state[k] for k, v in anchor.items()})
            r = get_restorer("ugtv-lite-denoise", "demosaic", weights=a.denoise, **({"noise": noise[0]} if frac > 0 else {}))
            r.module.load_state_dict(den.module.state_dict())
            mses = []
            for gt, y in zip(gts, ys):
                obs = N.noisy_mosaic(gt, noise, seed=0) if y is None else y  # frac 0: the clean mosaic
                mses.append(float(metrics.mse(r(obs).float(), gt)[0]))
            cells.append(metrics.psnr_dataset_mse(mses))
        print(f"{frac:<8g}  " + "  ".join(f"{c:8.3f}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
