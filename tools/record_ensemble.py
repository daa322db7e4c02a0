"""Record the ensemble's scores (``gsprestore.methods.ensemble``: the mean of uGTV and uGLR) in the weights
manifest, bound to the member weights they were measured with.

Usage (from the repository root)::

    gsprestore benchmark --task demosaic --dataset mcm --data-dir ~/datasets --methods ensemble --json ens-mcm.json
    gsprestore benchmark --task demosaic --dataset kodak --data-dir ~/datasets --methods ensemble --json ens-kodak.json
    .venv/bin/python tools/record_ensemble.py --task demosaic \\
        --scores mcm=ens-mcm.json --scores kodak=ens-kodak.json \\
        --command "mcm=gsprestore benchmark ..." --command "kodak=gsprestore benchmark ..." --notes "..."

Each ``--scores`` file must hold an ``ensemble`` row whose members' SHA-256 (the benchmark records
them) are the weights the manifest ships now for this task; a row measured with other weights is
refused. The manifest's ``ensembles`` list gets one entry per task (replacing that task's):
``{"method", "task", "members": {member: sha256}, "scores": {NAME: {"rows", "protocol",
"command"}}, "speed": {device: record}, "notes"}``. ``--speed DEVICE=FILE:KEY`` records a measured
speed as ``tools/ship_weights.py`` does (the GPU job's ``ensemble_<task>_fp32_fused`` blocks); the
task's earlier speed records are kept otherwise. Shipping new weights for a member later makes
the entry stale (``gsprestore.methods.defaults.current_ensembles``) until this is run again on new scores.
"""

from __future__ import annotations

import argparse
import json
import os

from gsprestore.core.atomic import atomic_file
from gsprestore.methods.ensemble import MEMBERS, NAME
from gsprestore.methods.weights import MANIFEST, manifest_entry, read_manifest, weights_dir
from ship_weights import ROW_KEYS, pairs, measured_speed


def ensemble_rows(data: dict, shipped: dict[str, str], path: str) -> list[dict]:
    """The scored ``ensemble`` rows of a benchmark report whose members are ``shipped``
    (``{member: sha256}``); SystemExit naming ``path`` when there is none, or when a row was
    measured with other member weights."""
    rows = []
    for r in data.get("results") or []:
        if str(r.get("method")).partition("@")[0].partition("+")[0] != NAME:
            continue
        if str(r.get("method")).endswith("+se"):
            raise SystemExit(f"{path}: a self-ensemble row ({r['method']}); record the one-pass ensemble (the "
                             "protocol of every recorded score)")
        members = ((r.get("weights") or {}).get("members") or {})
        used = {m: (rec or {}).get("sha256") for m, rec in members.items()}
        if used != shipped:
            stale = ", ".join(m for m in MEMBERS if used.get(m) != shipped.get(m))
            raise SystemExit(f"{path}: the ensemble row was measured with {stale} weights other than those "
                             "shipped now; benchmark it again")
        if r.get("psnr_dataset_mse") is None:
            raise SystemExit(f"{path}: the ensemble row has no score ({r.get('skipped')})")
        rows.append({k: r.get(k) for k in ROW_KEYS})
    if not rows:
        raise SystemExit(f"{path}: no ensemble row")
    return rows


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

    manifest_file = os.path.join(args.folder or weights_dir(), MANIFEST)
    manifest = read_manifest(manifest_file)
    shipped = {}
    for m in MEMBERS:
        entry = manifest_entry(m, args.task, manifest)
        if not entry or not entry.get("sha256"):
            raise SystemExit(f"{manifest_file}: no shipped {m} {args.task} weights to record an ensemble of")
        shipped[m] = entry["sha256"]
    commands = pairs(args.command, "--command")
    scores = {}
    for name, path in pairs(args.scores, "--scores").items():
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        scores[name] = {"rows": ensemble_rows(data, shipped, path), "protocol": data.get("protocol"),
                        "command": commands.get(name)}
    before = next((e for e in manifest.get("ensembles") or [] if e.get("task") == args.task), {})
    if not scores:
        if not before.get("scores") or before.get("members") != shipped:
            raise SystemExit(f"{manifest_file}: no {args.task} ensemble scores recorded with the member weights "
                             "shipped now; give --scores")
        scores = before["scores"]
    entry = {"method": NAME, "task": args.task, "members": shipped, "scores": scores}
    speed = dict(before.get("speed") or {})  # speed does not depend on the weights' values
    for device, spec in pairs(args.speed, "--speed").items():
        speed[device] = measured_speed(spec, NAME, args.task)
    if speed:
        entry["speed"] = speed
    if args.notes or before.get("notes"):
        entry["notes"] = args.notes or before["notes"]
    others = [e for e in manifest.get("ensembles") or [] if e.get("task") != args.task]
    manifest["ensembles"] = sorted([*others, entry], key=lambda e: ("demosaic", "upscale2x").index(e["task"]))
    with atomic_file(manifest_file, "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps({"method": NAME, "task": args.task, "members": shipped,
                      "psnr": {k: v["rows"][0]["psnr_dataset_mse"] for k, v in scores.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
