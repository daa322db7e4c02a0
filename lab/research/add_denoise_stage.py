"""Add a GLR denoising pass to a noise-aware network (``ugtv-lite-denoise``, ``denoise_stages``,
gsprestore/models/noise_aware.py): the new pass starts as a copy of the first one's graph
learning and strength, its refine convolution (the graph's features from the planes the first
pass denoised) at zero, so training starts from the first pass applied twice and learns what the
second should do.

Usage (from the repository root)::

    .venv/bin/python lab/research/add_denoise_stage.py RUN/best.pt OUT.pt   # a run's checkpoint, or a weights file
"""

from __future__ import annotations

import sys


def main() -> None:
    import torch

    from gsprestore.methods.weights import save_weights
    from gsprestore.models import build_model

    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1:]
    obj = torch.load(src, map_location="cpu", weights_only=True)
    cfg = dict(obj.get("model_config") or obj["config"])
    state = dict(obj.get("model") or obj["state_dict"])
    cfg.pop("prior")
    task = cfg.pop("task")
    stages = int(cfg.get("denoise_stages", 1))
    torch.manual_seed(1)
    model = build_model("ugtv-lite-denoise", task, **{**cfg, "denoise_stages": stages + 1})
    new = f"denoiser.stages.{stages - 1}."
    for key in ("project.weight", "project.bias", "metric_factor", "log_strength"):
        state[new + key] = state[f"denoiser.{key}"].clone()
    for key in ("refine.weight", "refine.bias"):
        state[new + key] = torch.zeros_like(model.state_dict()[new + key])
    model.load_state_dict(state, strict=True)
    save_weights(out, model, {"from": src, "added": f"denoise pass {stages + 1} (a copy of the first)"})
    print(f"wrote {out}: {stages + 1} denoising passes")


if __name__ == "__main__":
    main()
