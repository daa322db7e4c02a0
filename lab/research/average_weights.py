"""A weighted mean of weight files of one architecture (a "model soup", or with a negative weight an
extrapolation along the line between them), written as a weights file to score with
``gsprestore benchmark ... --weights METHOD=OUT``.

Usage (from the repository root)::

    .venv/bin/python lab/research/average_weights.py OUT.pt 1:job1/ugtv_demosaic.pt 1:job2/ugtv_demosaic.pt
    .venv/bin/python lab/research/average_weights.py OUT.pt 1.5:job2/ugtv_demosaic.pt -0.5:job1/ugtv_demosaic.pt

The weights are normalised to sum to one; every tensor is averaged in float64; the first file's
configuration and metadata are kept (with the recipe of the blend under ``meta["average"]``).
"""

from __future__ import annotations

import sys


def main() -> None:
    import torch

    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out, parts = sys.argv[1], [(float(a.split(":", 1)[0]), a.split(":", 1)[1]) for a in sys.argv[2:]]
    total = sum(w for w, _ in parts)
    files = [torch.load(f, weights_only=True) for _, f in parts]
    base = files[0]
    for (_, f), obj in zip(parts, files):
        if obj["config"] != base["config"] or obj["state_dict"].keys() != base["state_dict"].keys():
            sys.exit(f"{f}: not the architecture of {parts[0][1]}")
    base["state_dict"] = {
        k: sum((w / total) * obj["state_dict"][k].double() for (w, _), obj in zip(parts, files)).to(v.dtype)
        for k, v in base["state_dict"].items()}
    base["meta"] = dict(base.get("meta") or {}, average=[[w, f] for w, f in parts])
    torch.save(base, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
