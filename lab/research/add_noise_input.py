"""Make a noise-aware start (``noise_input=True``, gsprestore/models/noise_aware.py) from clean
CPU-size demosaicking weights: every stored tensor is kept, the trunk's first convolution gets
zero weights from the four added noise-map channels, and the graph denoiser gets its initial
values (seeded). On clean input (no noise level) the result restores exactly as the source did;
training on noisy pairs (``gsprestore train --raw-noise high --init OUT``) starts from there.

Usage (from the repository root)::

    .venv/bin/python lab/research/add_noise_input.py gsprestore/weights/ugtv-lite_demosaic.pt OUT.pt
"""

from __future__ import annotations

import sys


def main() -> None:
    import torch

    from gsprestore.models.noise_aware import load_clean_weights
    from gsprestore.models.unrolled import build_model

    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1:]
    obj = torch.load(src, weights_only=True)
    cfg = dict(obj["config"])
    method, task = obj.get("method", "ugtv-lite"), cfg.pop("task")
    cfg.pop("prior")
    torch.manual_seed(0)
    model = build_model(method, task, **cfg, noise_input=True)
    load_clean_weights(model, obj["state_dict"])
    obj["config"], obj["state_dict"], obj["method"] = dict(model.config), model.state_dict(), model.method
    obj["meta"] = dict(obj.get("meta") or {}, noise_input_from=src)
    torch.save(obj, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
