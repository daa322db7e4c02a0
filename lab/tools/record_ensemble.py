"""Record the ensemble's scores (``gsprestore.methods.ensemble``: the mean of uGTV and uGLR) in the weights
manifest, bound to the member weights they were measured with.

Usage (from the repository root)::

    gsprestore benchmark --task demosaic --dataset mcm --data-dir ~/datasets --methods ensemble --json ens-mcm.json
    gsprestore benchmark --task demosaic --dataset kodak --data-dir ~/datasets --methods ensemble --json ens-kodak.json
    .venv/bin/python lab/tools/record_ensemble.py --task demosaic \\
        --scores mcm=ens-mcm.json --scores kodak=ens-kodak.json \\
        --command "mcm=gsprestore benchmark ..." --command "kodak=gsprestore benchmark ..." --notes "..."

Each ``--scores`` file must hold an ``ensemble`` row whose members' SHA-256 (the benchmark records
them) are the weights the manifest ships now for this task; a row measured with other weights is
refused. The manifest's ``ensembles`` list gets one entry per task (replacing that task's):
``{"method", "task", "members": {member: sha256}, "scores": {NAME: {"rows", "protocol",
"command"}}, "speed": {device: record}, "notes"}``. ``--speed DEVICE=FILE:KEY`` records a measured
speed as ``lab/tools/ship_weights.py`` does (the GPU job's ``ensemble_<task>_fp32_fused`` blocks); the
task's earlier speed records are kept otherwise. Shipping new weights for a member later makes
the entry stale (``gsprestore.methods.defaults.current_ensembles``) until this is run again on new scores.

The recording is :func:`gsprestore_lab.release.record_ensemble`; this is its command line.
"""

from __future__ import annotations

import argparse
import json

from gsprestore_lab.release import pairs, record_ensemble


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", required=True, choices=["demosaic", "upscale2x"])
    ap.add_argument("--scores", action="append", default=[],
                    help="NAME=benchmark.json (without any: keep the task's recorded scores, which must be of the "
                         "member weights shipped now, e.g. to add a --speed)")
    ap.add_argument("--command", action="append", default=[], help="NAME=the benchmark command line")
    ap.add_argument("--speed", action="append", default=[],
                    help="DEVICE=FILE:KEY: MP/s measured on that kind of device, e.g. the GPU job's infer.json and "
                         "its ensemble_demosaic_fp32_fused record (without it the task's recorded speeds are kept)")
    ap.add_argument("--notes", default=None)
    ap.add_argument("--folder", default=None, help="weights folder (default: the package's gsprestore/weights/)")
    args = ap.parse_args(argv)

    recorded = record_ensemble(args.task, scores=pairs(args.scores, "--scores"), commands=pairs(args.command, "--command"),
                               speeds=pairs(args.speed, "--speed"), notes=args.notes, folder=args.folder)
    print(json.dumps(recorded, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
