"""Start a noise-aware network (``ugtv-lite-denoise``) on a newer, wider clean network from a
trained noise-aware one, instead of from zero noise weights (lab/research/add_noise_input.py).

The clean network (``CLEAN``, e.g. the shipped ``ugtv-lite`` after widening its trunk with
lab/research/widen_weights.py and training on) keeps every tensor. From the trained noise-aware
network (``DENOISE``, a narrower trunk whose channels are the first ones of ``CLEAN``'s, as
widen_weights.py keeps them) it takes what the clean one lacks: the trunk's first-convolution
weights from the noise-map channels, and the graph denoiser's passes (gsprestore/models/
noise_aware.py). Where ``CLEAN``'s trunk is wider, the added channels get zero noise weights and
zero weight in the denoiser's 1x1 projections, so the denoiser starts reading the trunk channels it
was trained on. On clean input the result restores exactly as ``CLEAN`` does.

Usage (from the repository root)::

    .venv/bin/python lab/research/transplant_denoiser.py DENOISE.pt CLEAN.pt OUT.pt
"""

from __future__ import annotations

import sys


def main() -> None:
    import torch

    from gsprestore.models.noise_aware import load_clean_weights
    from gsprestore.models.unrolled import build_model

    if len(sys.argv) != 4:
        sys.exit(__doc__)
    den_path, clean_path, out = sys.argv[1:]
    den = torch.load(den_path, weights_only=True)
    clean = torch.load(clean_path, weights_only=True)
    cfg = dict(clean["config"])
    task = cfg.pop("task")
    cfg.pop("prior")
    stages = int(den["config"].get("denoise_stages", 1))
    torch.manual_seed(0)
    model = build_model("ugtv-lite-denoise", task, **cfg, noise_input=True, denoise_stages=stages)
    load_clean_weights(model, clean["state_dict"])
    state = model.state_dict()
    src = den["state_dict"]
    first = "trunk.cnn.convs.0.weight"
    n_in = clean["state_dict"][first].shape[1]
    old_w = src[first].shape[0]
    w = state[first].clone()
    w[:, n_in:] = 0
    w[:old_w, n_in:] = src[first][:, n_in:]
    state[first] = w
    for name, t in src.items():
        if not name.startswith("denoiser."):
            continue
        if name.endswith("project.weight"):
            p = torch.zeros_like(state[name])
            p[:, : t.shape[1]] = t
            state[name] = p
        else:
            state[name] = t.clone()
    model.load_state_dict(state, strict=True)
    obj = dict(clean, config=dict(model.config), state_dict=model.state_dict(), method=model.method)
    obj["meta"] = dict(clean.get("meta") or {}, noise_input_from=den_path, clean_from=clean_path)
    torch.save(obj, out)
    print(f"wrote {out}: {clean_path}'s network with {den_path}'s noise input and {stages} denoising passes")


if __name__ == "__main__":
    main()
