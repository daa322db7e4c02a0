"""Releasing weights: what a shipped model and the ensemble record in the weights manifest.

:func:`ship` ships a trained model (``lab/tools/ship_weights.py`` is its command line): it copies the
weights file into the weights folder (:func:`gsprestore.methods.weights.ship_weights`) with its
training stages, its benchmark scores (the rows of ``gsprestore benchmark --json`` reports that
scored this very file), its PSNR on the bundled chart and on dead-leaves images against the task's
classical baseline, and its measured speeds; every stage is kept in a history file (the installed
manifest keeps the last). :func:`record_ensemble` records the ensemble's scores, bound to the
member weights they were measured with (``lab/tools/record_ensemble.py``). Both stop with SystemExit
naming the file when a report or measurement does not fit what is being recorded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gsprestore.methods.ensemble import MEMBERS, NAME
from gsprestore.methods.weights import read_weights_file, sha256_file, ship_weights

#: The checkout the lab sits in, two folders up (shipping writes into it: ``gsprestore/weights/``, the history).
CHECKOUT = Path(__file__).resolve().parents[2]
#: The training records of every shipped file, stage by stage (the manifest keeps the last one).
HISTORY = CHECKOUT / "docs" / "weights-history.json"

ROW_KEYS = ("dataset", "noise_sigma", "images", "psnr_dataset_mse", "psnr_mean", "ssim_mean",
            "seconds_per_image", "megapixels_per_second")


def chart_scores(model: str) -> dict:
    """The model's and its task's classical baseline's PSNR on the bundled chart (the shipped-weights
    test recomputes both, so a code change that alters what the shipped weights do is caught)."""
    from gsprestore.imageio.sample_chart import CHART_BASELINE, chart_psnr
    from gsprestore.methods.registry import get_restorer

    obj = read_weights_file(model)
    method, task = obj["method"], obj["task"]
    base = CHART_BASELINE[task]
    return {"image": "gsprestore/data/chart.png", "space": "rgb" if task == "demosaic" else "y",
            "psnr": chart_psnr(get_restorer(method, task, weights=model), task),
            "baseline": base, "baseline_psnr": chart_psnr(get_restorer(base, task), task)}


def dead_leaves_scores(model: str, seeds=(0, 1, 2), size: int = 128) -> dict:
    """PSNR of the model and of its task's classical baseline on generated dead-leaves images (what
    tests/test_shipped_weights.py uses for "clearly beats the baseline")."""
    from gsprestore.imageio.sample_chart import CHART_BASELINE
    from gsprestore.methods.registry import get_restorer
    from gsprestore.evaluation.benchmark import restored_psnr
    from gsprestore.evaluation.deadleaves import dead_leaves

    obj = read_weights_file(model)
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
    """Keep ``stages`` as the records of ``key`` in the history file ``path`` (written atomically;
    the other keys' records as they were)."""
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
    """``["NAME=VALUE", ...]`` (the items of the command-line option ``what``) -> ``{NAME: VALUE}``."""
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"{what} takes NAME=VALUE, got {item!r}")
        out[k] = v
    return out

def ship(model: str | Path, *, stages: list[str | Path] = (), scores: dict[str, str | Path] | None = None,
         commands: dict[str, str] | None = None, after_shipped: bool = False,
         speeds: dict[str, str] | None = None, history: str | Path | None = None, keep_speed: bool = False,
         notes: str | None = None, folder: str | Path | None = None) -> dict[str, Any]:
    """Ship the weights file ``model`` into ``folder`` (default: the package's weights folder) and
    return its manifest entry.

    ``stages`` lists the weight files of every training stage in order (a curriculum is several
    runs chained with ``--init``; default: the model's own record); each one's ``meta`` (recipe,
    command, data, steps, validation PSNR, speed, device) is recorded. The manifest entry keeps the
    last stage (how the shipped file was made); every stage is kept in ``history`` (default:
    :data:`HISTORY`, by ``METHOD_TASK``; with ``folder``, ``weights-history.json`` in that folder).
    ``after_shipped``: the model is one more stage on top of the weights shipped now, whose
    recorded stages are kept before it. ``scores`` ``{NAME: FILE}`` takes the JSON written by
    ``gsprestore benchmark --json FILE --weights METHOD=...`` and keeps, for this model's method,
    every row (:data:`ROW_KEYS`) with the protocol and the benchmark command ``commands[NAME]``.
    ``speeds`` ``{DEVICE: FILE:KEY}`` records the megapixels per second a measurement file holds
    under ``KEY`` (:func:`measured_speed`) as the model's speed on that kind of device;
    ``keep_speed`` keeps the shipped entry's speed records (speed does not depend on the weights'
    values)."""
    commands = dict(commands or {})
    obj = read_weights_file(model)
    method = obj["method"]
    recorded = [dict(read_weights_file(p).get("meta") or {}, file=os.path.basename(os.path.dirname(os.path.abspath(p))))
                for p in stages] or None
    key = f"{method}_{obj['task']}"
    history = Path(history) if history else (Path(folder) / "weights-history.json" if folder else HISTORY)
    shipped = _shipped_entry(folder, method, obj["task"]) if after_shipped or keep_speed else {}
    recorded = recorded or [dict(obj.get("meta") or {})]
    if after_shipped:
        recorded = list(read_history(history).get(key) or shipped.get("training") or []) + recorded
    speed = dict(shipped.get("speed") or {}) if keep_speed else {}
    for device, spec in (speeds or {}).items():
        speed[device] = measured_speed(spec, method, obj["task"])
    sha = sha256_file(model)
    scored = {}
    for name, path in (scores or {}).items():
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        rows = [{k: r.get(k) for k in ROW_KEYS} for r in data["results"] if _scores_this(r, method, sha)]
        if not rows or any(r["psnr_dataset_mse"] is None for r in rows):
            raise SystemExit(f"{path}: no scored {method} row")
        scored[name] = {"rows": rows, "protocol": data.get("protocol"), "command": commands.get(name)}
    scored["chart"] = chart_scores(model)
    scored["dead_leaves"] = dead_leaves_scores(model)
    write_history(history, key, recorded)
    where = os.path.relpath(history, CHECKOUT) if not folder else history.name
    return ship_weights(model, folder=folder, stages=recorded[-1:], scores=scored, notes=notes,
                        speed=speed or None, history=f"{where}: {len(recorded)} stage(s), the last one here")


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

def record_ensemble(task: str, *, scores: dict[str, str | Path] | None = None, commands: dict[str, str] | None = None,
                    speeds: dict[str, str] | None = None, notes: str | None = None,
                    folder: str | Path | None = None) -> dict[str, Any]:
    """Record the ensemble's scores for ``task`` in the manifest of ``folder`` (default: the
    package's weights folder), bound to the member weights shipped now; returns what was recorded
    (``{"method", "task", "members", "psnr": {NAME: dB}}``).

    Each ``scores`` file (``{NAME: FILE}``, ``gsprestore benchmark --json``) must hold an
    ``ensemble`` row whose members' SHA-256 are the weights the manifest ships now for this task
    (:func:`ensemble_rows`); without any, the task's recorded scores are kept (they must be of the
    member weights shipped now, e.g. to add a speed). The manifest's ``ensembles`` list gets one
    entry per task (replacing that task's): ``{"method", "task", "members": {member: sha256},
    "scores": {NAME: {"rows", "protocol", "command"}}, "speed": {device: record}, "notes"}``.
    ``speeds`` ``{DEVICE: FILE:KEY}`` records a measured speed as :func:`ship` does; the task's
    earlier speed records are kept otherwise."""
    from gsprestore.core.atomic import atomic_file
    from gsprestore.methods.weights import MANIFEST, manifest_entry, read_manifest, weights_dir

    commands = dict(commands or {})
    manifest_file = os.path.join(folder or weights_dir(), MANIFEST)
    manifest = read_manifest(manifest_file)
    shipped = {}
    for m in MEMBERS:
        entry = manifest_entry(m, task, manifest)
        if not entry or not entry.get("sha256"):
            raise SystemExit(f"{manifest_file}: no shipped {m} {task} weights to record an ensemble of")
        shipped[m] = entry["sha256"]
    scored = {}
    for name, path in (scores or {}).items():
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        scored[name] = {"rows": ensemble_rows(data, shipped, str(path)), "protocol": data.get("protocol"),
                        "command": commands.get(name)}
    before = next((e for e in manifest.get("ensembles") or [] if e.get("task") == task), {})
    if not scored:
        if not before.get("scores") or before.get("members") != shipped:
            raise SystemExit(f"{manifest_file}: no {task} ensemble scores recorded with the member weights "
                             "shipped now; give --scores")
        scored = before["scores"]
    entry = {"method": NAME, "task": task, "members": shipped, "scores": scored}
    speed = dict(before.get("speed") or {})  # speed does not depend on the weights' values
    for device, spec in (speeds or {}).items():
        speed[device] = measured_speed(spec, NAME, task)
    if speed:
        entry["speed"] = speed
    if notes or before.get("notes"):
        entry["notes"] = notes or before["notes"]
    others = [e for e in manifest.get("ensembles") or [] if e.get("task") != task]
    manifest["ensembles"] = sorted([*others, entry], key=lambda e: ("demosaic", "upscale2x").index(e["task"]))
    with atomic_file(manifest_file, "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")
    return {"method": NAME, "task": task, "members": shipped,
            "psnr": {k: v["rows"][0]["psnr_dataset_mse"] for k, v in scored.items()}}
