"""Give a trained noise-aware network (``ugtv-lite-denoise``) the clean anchor: the clean
network's weights stored beside its own and blended in by noise level (gsprestore/models/
noise_aware.py, ``clean_anchor``; the trial that chose it: lab/research/noise_blend_trial.py).
Every tensor of ``DENOISE`` is kept; ``CLEAN`` (a clean ``ugtv-lite`` of the same shape) becomes
the anchor. ``--denoise-iters N`` also sets the CG steps of each denoising pass at inference.

Usage (from the repository root)::

    .venv/bin/python lab/research/add_clean_anchor.py DENOISE.pt CLEAN.pt OUT.pt [--denoise-iters N]
"""

from __future__ import annotations

import argparse


def main() -> None:
    import torch

    from gsprestore.methods.weights import save_weights
    from gsprestore.models.unrolled import build_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("denoise")
    ap.add_argument("clean")
    ap.add_argument("out")
    ap.add_argument("--denoise-iters", type=int)
    a = ap.parse_args()
    den = torch.load(a.denoise, weights_only=True)
    clean = torch.load(a.clean, weights_only=True)
    cfg = {k: v for k, v in den["config"].items() if k not in ("prior", "task", "clean_anchor")}
    if a.denoise_iters:
        cfg["denoise_iters"] = a.denoise_iters
    model = build_model("ugtv-lite-denoise", den["config"]["task"], **cfg, clean_anchor=True)
    own = {k: v for k, v in den["state_dict"].items() if not k.startswith("clean_anchor.")}
    missing = model.load_state_dict(own, strict=False)
    if missing.unexpected_keys or any(not k.startswith("clean_anchor.") for k in missing.missing_keys):
        raise SystemExit(f"{a.denoise}: does not fit the network ({missing})")
    model.clean_anchor.set_clean(clean["state_dict"], model)
    meta = dict(den.get("meta") or {})
    meta["clean_anchor"] = {"denoise": a.denoise, "clean": a.clean}
    print(save_weights(a.out, model, meta))


if __name__ == "__main__":
    main()
