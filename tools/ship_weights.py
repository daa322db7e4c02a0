"""Ship a trained model: copy its weights into ``gsprestore/weights/`` and record it in the manifest.

Usage (from the repository root)::

    .venv/bin/python tools/ship_weights.py runs/ugtv-dm-2/model.pt \\
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
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from gsprestore.methods.weights import _read_file, sha256_file, ship_weights

#: The training records of every shipped file, stage by stage (the manifest keeps the last one).
HISTORY = Path(__file__).resolve().parents[1] / "docs" / "weights-history.json"

ROW_KEYS = ("dataset", "noise_sigma", "images", "psnr_dataset_mse", "psnr_mean", "ssim_mean",
            "seconds_per_image", "megapixels_per_second")


def chart_scores(model: str) -> dict:
    """The model's and its task's classical baseline's PSNR on the bundled chart (the shipped-weights
    test recomputes both, so a code change that alters what the shipped weights do is caught)."""
    from gsprestore.imageio.sample_chart import CHART_BASELINE, chart_psnr
    from gsprestore.methods.registry import get_restorer

    obj = _read_file(model)
    method, task = obj["method"], obj["task"]
    base = CHART_BASELINE[task]
    return {"image": "gsprestore/data/chart.png", "space": "rgb" if task == "demosaic" else "y",
            "psnr": chart_psnr(get_restorer(method, task, weights=model), task),
            "baseline": base, "baseline_psnr": chart_psnr(get_restorer(base, task), task)}


def dead_leaves_scores(model: str, seeds=(0, 1, 2), size: int = 128) -> dict:
    """PSNR of the model and of its task's classical baseline on generated dead-leaves images (what
    tests/test_shipped_weights.py uses for "clearly beats the baseline")."""
    from gsprestore.evaluation.benchmark import restored_psnr
    from gsprestore.imageio.sample_chart import CHART_BASELINE
    from gsprestore.evaluation.deadleaves import dead_leaves
    from gsprestore.methods.registry import get_restorer

    obj = _read_file(model)
    method, task = obj["method"], obj["task"]
    ours, base = get_restorer(method, task, weights=model), get_restorer(CHART_BASELINE[task], task)
    images = [dead_leaves(size, seed=s) for s in seeds]
    return {"image": f"gsprestore.evaluation.deadleaves.dead_leaves({size}, seed=s)", "seeds": list(seeds),
            "space": "rgb" if task == "demosaic" else "y",
            "psnr": [round(restored_psnr(ours, task, im), 3) for im in images],
            "baseline": CHART_BASELINE[task],
            "baseline_psnr": [round(restored_psnr(base, task, im), 3) for im in images]}


def measured_speed(spec: str, method: str, task: str) -> dict:
    """``FILE:KEY`` -> the speed record of a measurement file (the GPU job's ``infer.json``): its
    ``KEY`` block's megapixels per second, which must be of this method and task and, for a fused
    measurement, must have run the fused kernels."""
    path, sep, key = spec.rpartition(":")
    if not sep:
        raise SystemExit(f"--speed takes DEVICE=FILE:KEY, got {spec!r}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    block = data.get(key)
    if not isinstance(block, dict) or not isinstance(block.get("megapixels_per_s"), (int, float)):
        raise SystemExit(f"{path}: no measured megapixels_per_s under {key!r}")
    # a block may name its own method and task (the 2x networks' blocks), else the file's
    measures = (block.get("method", data.get("method")), block.get("task", data.get("task")))
    if measures != (method, task):
        raise SystemExit(f"{path}: {key} measures {measures[0]} {measures[1]}, not {method} {task}")
    if "fused" in key and "unfused" not in key and not block.get("fused_ran"):
        raise SystemExit(f"{path}: {key} did not run the fused kernels")
    if "probe_gflops" in block:  # a CPU measurement (benchmarks/bench_cpu_target.py --json)
        return {"megapixels_per_second": block["megapixels_per_s"], "key": key, "device_name": data.get("device_name"),
                "torch": data.get("torch"), "source": path, "threads": block.get("threads"),
                "probe_gflops": block["probe_gflops"], "conditions": data.get("conditions")}
    return {"megapixels_per_second": block["megapixels_per_s"], "key": key, "device_name": data.get("device_name"),
            "torch": data.get("torch"), "source": path,
            "conditions": (f"{block.get('input_megapixels')} MP image to {block.get('megapixels')} MP"
                           if "input_megapixels" in block else f"{block.get('megapixels')} MP mosaic")
                          + f" in {data.get('tile')}-pixel tiles (overlap {data.get('overlap')}), after an untimed"
                          " run on the same tiles"}


def _shipped_entry(folder: str | None, method: str, task: str) -> dict:
    """The manifest entry of the weights shipped now for ``method`` and ``task`` ({} if none)."""
    from gsprestore.methods.weights import manifest_entry, manifest_path, read_manifest

    path = os.path.join(folder, "manifest.json") if folder else manifest_path()
    return (manifest_entry(method, task, read_manifest(path)) if os.path.exists(path) else None) or {}


def read_history(path: Path) -> dict:
    """``{METHOD_TASK: [stage, ...]}`` ({} when there is no file yet)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def write_history(path: Path, key: str, stages: list[dict]) -> None:
    from gsprestore.core.atomic import atomic_file

    history = read_history(path)
    history[key] = stages
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, "w") as f:
        f.write(json.dumps(dict(sorted(history.items())), indent=1) + "\n")


def _scores_this(row: dict, method: str, sha: str) -> bool:
    """A benchmark row of this model: the method's own row (the benchmark ran the weights being
    shipped), or one labelled ``method@FILE`` (``--weights method=FILE``) whose file has this
    model's SHA-256."""
    name, at, _ = str(row.get("method")).partition("@")
    return name == method and (not at or (row.get("weights") or {}).get("sha256") == sha)


def pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"{what} takes NAME=VALUE, got {item!r}")
        out[k] = v
    return out


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

    obj = _read_file(args.model)
    method = obj["method"]
    stages = [dict(_read_file(p).get("meta") or {}, file=os.path.basename(os.path.dirname(os.path.abspath(p))))
              for p in args.stage] or None
    key = f"{method}_{obj['task']}"
    history = Path(args.history) if args.history else (Path(args.folder) / "weights-history.json" if args.folder
                                                         else HISTORY)
    shipped = _shipped_entry(args.folder, method, obj["task"]) if args.after_shipped or args.keep_speed else {}
    stages = stages or [dict(obj.get("meta") or {})]
    if args.after_shipped:
        stages = list(read_history(history).get(key) or shipped.get("training") or []) + stages
    speed = dict(shipped.get("speed") or {}) if args.keep_speed else {}
    for device, spec in pairs(args.speed, "--speed").items():
        speed[device] = measured_speed(spec, method, obj["task"])
    commands = pairs(args.command, "--command")
    sha = sha256_file(args.model)
    scores = {}
    for name, path in pairs(args.scores, "--scores").items():
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        rows = [{k: r.get(k) for k in ROW_KEYS} for r in data["results"] if _scores_this(r, method, sha)]
        if not rows or any(r["psnr_dataset_mse"] is None for r in rows):
            raise SystemExit(f"{path}: no scored {method} row")
        scores[name] = {"rows": rows, "protocol": data.get("protocol"), "command": commands.get(name)}
    scores["chart"] = chart_scores(args.model)
    scores["dead_leaves"] = dead_leaves_scores(args.model)
    write_history(history, key, stages)
    where = os.path.relpath(history, Path(__file__).resolve().parents[1]) if not args.folder else history.name
    entry = ship_weights(args.model, folder=args.folder, stages=stages[-1:], scores=scores, notes=args.notes,
                         speed=speed or None, history=f"{where}: {len(stages)} stage(s), the last one here")
    print(json.dumps({k: entry[k] for k in ("file", "sha256", "method", "task", "params")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
