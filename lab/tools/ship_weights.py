"""Ship a trained model: copy its weights into ``gsprestore/weights/`` and record it in the manifest.

Usage (from the repository root)::

    .venv/bin/python lab/tools/ship_weights.py runs/ugtv-dm-2/model.pt \\
        --stage runs/ugtv-dm-1/model.pt --stage runs/ugtv-dm-2/model.pt \\
        --scores mcm=bench/ugtv-mcm.json --scores kodak=bench/ugtv-kodak.json \\
        --scores mcm-noise=bench/ugtv-mcm-noise.json --notes "..."

``--stage`` lists the weight files of every training stage in order (a curriculum is several
runs chained with ``--init``); each one's ``meta`` (recipe, command, data, steps, validation PSNR,
speed, device) is recorded. The installed manifest keeps the last stage (how the shipped file was
made); every stage is kept in ``--history`` (default: docs/weights-history.json, by
``METHOD_TASK``; with ``--folder``, ``weights-history.json`` in that folder). ``--after-shipped``:
the model is one more stage on top of the weights shipped now, whose recorded stages are kept
before it. ``--scores NAME=FILE`` takes the JSON
written by ``gsprestore benchmark --json FILE --weights METHOD=...`` and keeps, for this model's
method, every row (PSNR both ways, SSIM, seconds per image, noise level) with the protocol and
the benchmark command given by ``--command NAME=...``. ``--speed DEVICE=FILE:KEY`` records the
megapixels per second a measurement file holds under ``KEY`` (the GPU job's ``infer.json``, e.g.
``cuda=infer.json:fp32_fused``) as the model's speed on that kind of device, with the device name
and conditions it states; ``--keep-speed`` keeps the shipped entry's speed records (speed does not
depend on the weights' values).

What it records and how is :func:`gsprestore_lab.release.ship`; this is its command line.
"""

from __future__ import annotations

import argparse
import json

from gsprestore_lab.release import pairs, ship


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="the weights file to ship (a run's model.pt)")
    ap.add_argument("--stage", action="append", default=[], help="weights file of a training stage (in order)")
    ap.add_argument("--scores", action="append", default=[], help="NAME=benchmark.json")
    ap.add_argument("--command", action="append", default=[], help="NAME=the benchmark command line")
    ap.add_argument("--after-shipped", action="store_true",
                    help="the model is a further stage of the weights shipped now (train --init them): keep their "
                         "training records before the --stage ones")
    ap.add_argument("--speed", action="append", default=[],
                    help="DEVICE=FILE:KEY: MP/s measured on that kind of device (cpu / cuda), e.g. the GPU job's "
                         "infer.json and its fp32_fused record")
    ap.add_argument("--history", default=None,
                    help="the JSON file that keeps every stage's record (default: docs/weights-history.json)")
    ap.add_argument("--keep-speed", action="store_true", help="keep the shipped entry's speed records")
    ap.add_argument("--notes", default=None)
    ap.add_argument("--folder", default=None, help="weights folder (default: the package's gsprestore/weights/)")
    args = ap.parse_args(argv)

    entry = ship(args.model, stages=args.stage, scores=pairs(args.scores, "--scores"),
                 commands=pairs(args.command, "--command"), after_shipped=args.after_shipped,
                 speeds=pairs(args.speed, "--speed"), history=args.history, keep_speed=args.keep_speed,
                 notes=args.notes, folder=args.folder)
    print(json.dumps({k: entry[k] for k in ("file", "sha256", "method", "task", "params")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
