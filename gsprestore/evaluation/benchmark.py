"""Benchmark restorers on a data set under the paper's evaluation protocol (docs/protocol.md).

One code path for every method: each is built by :func:`gsprestore.methods.registry.get_restorer` and
fed the task's observation made by :mod:`gsprestore.physics.sampling` from the ground truth:

* ``demosaic``: ``y = mosaic(gt, pattern)``, the Bayer mosaic of the ground truth (8-bit / 255),
  scored on all three RGB channels;
* ``upscale2x``: ``y = decimate(gt) = gt[..., 0::2, 0::2]`` (no anti-aliasing), scored on BT.601
  studio luma Y.

Odd image sizes are cropped to even (last row / column dropped) before sampling; there is no
border crop when scoring. With a noise level ``sigma`` > 0, Gaussian noise of std ``sigma / 255``
is added to the observation ``y`` (paper Table 2), drawn from a generator seeded with
``seed + image index`` so every method sees the same noise; several levels (the robustness
table) give one row per method and level. Scores come from
:func:`gsprestore.metrics.image_scores` (both PSNR definitions and SSIM).

:func:`run_benchmark` returns ``{"protocol": {...}, "results": [row, ...]}``, ready for
:func:`write_json`, :func:`write_csv` or :func:`write_markdown` (all atomic, no silent
overwrite). A learned method whose weights are missing is a row with ``skipped`` set to the
reason instead of an error, so a default run over every method of a task always completes.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import paper
from ..methods import registry as restorers
from .._version import __version__
from ..core.atomic import atomic_file
from .datasets import Dataset, find_dataset
from ..runtime.tiling import resolve_device
from ..core.errors import GspError, UsageError, WeightsError
from .benchmark_plan import check_limit, check_output_paths, dataset_megapixels, estimate_seconds, limit_dataset, output_path, save_output
from ..physics.tasks import restored_psnr  # noqa: F401 - part of this module's protocol API
from ..physics.tasks import TASK_SPECS, is_mosaic, observe

CHANNEL_SPACE = {name: task.score_space for name, task in TASK_SPECS.items()}

_CHANNEL_SPACE_TEXT = {
    "rgb": "RGB, all three channels",
    "y": "Y, BT.601 studio luma: (16 + 65.481 R + 128.553 G + 24.966 B) / 255, R, G, B in [0, 1]",
}
_OBSERVATION_TEXT = {
    "demosaic": "Bayer mosaic ({pattern}) of the ground truth scaled to [0, 1]",
    "upscale2x": "LR = HR[0::2, 0::2] (plain decimation, no anti-aliasing); output 2x the LR size",
}

ROW_KEYS = (
    "method", "task", "dataset", "images", "psnr_dataset_mse", "psnr_mean", "ssim_mean",
    "seconds_per_image", "megapixels_per_second", "params",
)
CSV_KEYS = ("method", "kind", "task", "dataset", "noise_sigma", *ROW_KEYS[3:], "skipped", "weights_path",
            "weights_sha256", "paper_psnr", "paper_ssim", "image")


def default_methods(task: str) -> list[str]:
    """Every registered method of ``task`` but the ensemble (what ``gsprestore benchmark`` runs
    without ``--methods``: the paper's table, each method once; the ensemble reruns both networks,
    name it to score it); learned ones without weights end up as skipped rows."""
    return [m for m in restorers.methods_for(task) if restorers.METHODS[m].kind != "ensemble"]


def parse_sigmas(noise_sigma: float | str | Iterable[float] | None) -> list[float]:
    """Noise levels from a number, a list, or a comma-separated string (``"10,20,30,50"``);
    duplicates dropped, order kept. :class:`UsageError` for a negative or non-numeric level."""
    if noise_sigma is None:
        return [0.0]
    if isinstance(noise_sigma, str):
        items: list[Any] = [t.strip() for t in noise_sigma.split(",") if t.strip()]
    elif isinstance(noise_sigma, Iterable):
        items = list(noise_sigma)
    else:
        items = [noise_sigma]
    if not items:
        raise UsageError("no noise sigma given")
    out = []
    for t in items:
        try:
            v = float(t)
        except (TypeError, ValueError):
            raise UsageError(f"noise sigma must be a number, got {t!r}") from None
        if not (v >= 0 and math.isfinite(v)):
            raise UsageError(f"noise sigma must be >= 0, got {t}")
        out.append(v)
    return list(dict.fromkeys(out))


def parse_methods(task: str, methods: str | Iterable[str] | None) -> list[str]:
    """Canonical method names for ``task`` from a list or a comma-separated string; raises
    :class:`UsageError` for unknown names or methods that do not do ``task``."""
    if methods is None:
        return default_methods(task)
    items = methods.split(",") if isinstance(methods, str) else list(methods)
    names = [m.strip().lower() for m in items if m.strip()]
    if not names:
        raise UsageError("no methods given")
    return list(dict.fromkeys(restorers.method_spec(n, task).name for n in names))


def load_ground_truth(path: Path) -> "torch.Tensor":  # noqa: F821
    """Ground-truth RGB ``(1, 3, H, W)`` float32 of an image file, cropped to even size."""
    import torch

    from ..imageio.images import read_image

    from ..metrics import SSIM_WINDOW, has_ssim

    img = read_image(path)
    if img.channels != 3:
        raise GspError(f"ground truth must be RGB, got {img.channels} channel(s)", path)
    h, w = img.array.shape[0] // 2 * 2, img.array.shape[1] // 2 * 2
    if not has_ssim(h, w):  # every row's SSIM is a mean over all the images, or it would mislead
        raise GspError(f"image too small to score ({img.width}x{img.height}; the protocol's SSIM needs at least "
                       f"{SSIM_WINDOW}x{SSIM_WINDOW} pixels)", path)
    return torch.from_numpy(img.array[:h, :w]).permute(2, 0, 1).unsqueeze(0).contiguous()


make_observation = observe  # the task's observation ``y = H gt`` (gsprestore.physics.tasks)


def add_noise(y: "torch.Tensor", sigma: float, seed: int) -> "torch.Tensor":  # noqa: F821
    """``y + (sigma / 255) * N(0, 1)``, the noise drawn on the CPU from ``torch.Generator(seed)``
    (the same numbers on every device)."""
    import torch

    if sigma <= 0:
        return y
    g = torch.Generator().manual_seed(int(seed))
    n = torch.randn(y.shape, generator=g, dtype=torch.float32)
    return y + (sigma / 255.0) * n.to(device=y.device, dtype=y.dtype)


def _sync(device: "torch.device") -> None:  # noqa: F821
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def protocol(task: str, dataset: Dataset, pattern: str, noise_sigma: float | list[float], seed: int,
             device: str) -> dict[str, Any]:
    """The record of how the numbers were made, stored beside them. ``noise.sigma`` is the
    level, or the list of levels when several were run (each row carries its own)."""
    import torch

    space = CHANNEL_SPACE[task]
    sigmas = noise_sigma if isinstance(noise_sigma, list) else [noise_sigma]
    sigma_rec: float | list[float] = sigmas if len(sigmas) > 1 else sigmas[0]
    return {
        "task": task,
        "dataset": dataset.name,
        "custom_dataset": dataset.spec is None,
        "dataset_root": str(dataset.root),
        "images": len(dataset),
        "checksums_verified": dataset.verified,
        "pattern": pattern if is_mosaic(task) else None,
        "observation": _OBSERVATION_TEXT[task].format(pattern=pattern),
        "channel_space": _CHANNEL_SPACE_TEXT[space],
        "crop": "odd sizes cropped to even (last row/column dropped); no border crop",
        "psnr_dataset_mse": "10 log10(1 / mean over images of per-image MSE); float outputs, not clipped, not rounded",
        "psnr_mean": "mean over images of per-image PSNR; outputs rounded and clipped to 8 bits",
        "ssim": ("Wang et al. 2004: Gaussian window 11, sigma 1.5, K1 0.01, K2 0.03, data range 1, valid region, "
                 "per channel then averaged; float outputs clipped to [0, 1]; mean over images"),
        "noise": {
            "sigma": sigma_rec,
            "std": [x / 255.0 for x in sigmas] if len(sigmas) > 1 else sigmas[0] / 255.0,
            "distribution": "gaussian, added to the input observation; one draw per image (seed + image index) "
                            "scaled by each sigma",
            "seed": seed if max(sigmas) > 0 else None,
        },
        "timing": "wall clock of the restorer call per image, after one untimed warm-up call; excludes I/O and scoring",
        "gsprestore_version": __version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "device": device,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def weights_record(name: str, task: str, options: Mapping[str, Any], restorer: Any = None) -> dict[str, Any] | None:
    """Which weights a learned method's row was scored with: ``{"path", "sha256", "shipped"}``
    (``shipped``: the file's SHA-256 is the one the manifest lists for this method and task), or
    None for a method without weights. The ensemble's: ``{"members": {member: record}, "shipped":
    all are, "path": "ugtv=FILE,..." of the members' files that are not shipped}``."""
    from ..methods.ensemble import MEMBERS, NAME
    from ..methods.weights import LEARNED_METHODS, manifest_entry, sha256_file, weights_dir

    if name == NAME:  # the members' records, each as the member's own row would have it
        files = dict(options.get("weights") or {})
        for m, module in zip(MEMBERS, getattr(restorer, "module", None) or []):  # a ModuleList, one per member
            files.setdefault(m, getattr(module, "weights_file", None))
        members = {m: weights_record(m, task, {"weights": files[m]} if files.get(m) else {}) for m in MEMBERS}
        paths = [f"{m}={r['path']}" for m, r in members.items() if r and not r.get("shipped")]
        return {"members": members, "shipped": all(r and r.get("shipped") for r in members.values()),
                "path": ",".join(paths) or None}
    if name not in LEARNED_METHODS:
        return None
    try:
        entry = manifest_entry(name, task) or {}
    except WeightsError:
        entry = {}
    path = options.get("weights") or getattr(getattr(restorer, "module", None), "weights_file", None)
    if path is None and entry.get("file"):
        path = str(weights_dir() / str(entry["file"]))
    if path is None:
        return None
    try:
        digest = sha256_file(path)
    except OSError:
        digest = None
    return {"path": str(path), "sha256": digest, "shipped": digest is not None and digest == entry.get("sha256")}


def row_label(name: str, record: Mapping[str, Any] | None, given: bool = True, self_ensemble: bool = False) -> str:
    """A row's ``method``: the method's name, or ``uglr@run/model.pt`` for weights given by the
    user (``given``) that are not the shipped ones (so shipped and own weights can sit in one table),
    followed by ``+se`` when the method ran with ``self_ensemble``."""
    from ..methods.self_ensemble import SUFFIX

    end = SUFFIX if self_ensemble else ""
    if not given or record is None or record.get("shipped") or not record.get("path"):
        return name + end
    return f"{name}@{record['path']}{end}"


def _build(names: list[str], task: str, options: Mapping[str, Mapping[str, Any]], dev,
           self_ensemble: bool = False) -> tuple[list, dict[str, str]]:
    """Build each restorer; a :class:`WeightsError` (no or bad shipped weights) becomes a skip
    reason, but a weights file the caller named (``options[n]["weights"]``) that cannot be used is
    an error, as a missing one is."""
    built, skipped = [], {}
    for n in names:
        try:
            built.append(restorers.get_restorer(n, task, self_ensemble=self_ensemble,
                                                **dict(options.get(n, {}))).to(dev))
        except WeightsError as exc:
            if "weights" in options.get(n, {}):
                raise
            skipped[n] = str(exc)
    return built, skipped


#: Images of more pixels than this run through the tiled engine (:func:`gsprestore.runtime.tiling.restore`,
#: its tiles sized from the available memory), as ``demosaic`` / ``upscale2x`` run them: a method run
#: on a whole 24-MP photo at once takes GBs. The protocol's data sets (Kodak 0.39 MP, McM 0.25 MP,
#: Urban100 up to ~1 MP) run whole, as the paper's tables were made.
WHOLE_IMAGE_PIXELS = 4_000_000
#: The side of the warm-up crop of an image that runs tiled.
WARMUP_SIDE = 256


def _tiled(y: "torch.Tensor") -> bool:  # noqa: F821
    return y.shape[-2] * y.shape[-1] > WHOLE_IMAGE_PIXELS


def run_method(r: Any, y: "torch.Tensor", pattern: str, dev: Any) -> "torch.Tensor":  # noqa: F821
    """The output of restorer ``r`` on the observation ``y`` ``(1, C, H, W)``: the whole image at
    once, or, above :data:`WHOLE_IMAGE_PIXELS`, tile by tile through the engine (so a large photo
    needs the memory of a tile, not of the whole image; an output that cannot fit at all is refused
    before it runs, in one line)."""
    if not _tiled(y):
        return r(y, pattern)
    from ..runtime.tiling import restore_array

    return restore_array(r, y, pattern, device=dev)


def run_benchmark(
    task: str,
    dataset: str | Dataset | None,
    methods: str | Iterable[str] | None = None,
    data_dir: str | Path | None = None,
    pattern: str = "RGGB",
    noise_sigma: float | str | Iterable[float] = 0.0,
    device: str = "cpu",
    *,
    seed: int = 0,
    restorer_options: Mapping[str, Mapping[str, Any]] | None = None,
    warmup: bool = True,
    per_image: bool = False,
    download: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    limit: int | None = None,
    save_outputs: str | Path | None = None,
    overwrite: bool = False,
    self_ensemble: bool = False,
) -> dict[str, Any]:
    """Score ``methods`` (default: every method of the task) on ``dataset`` for ``task``.

    ``dataset`` is a registry name (located with :func:`~gsprestore.evaluation.datasets.find_dataset` under
    ``data_dir``, downloaded first with ``download``), ``"custom"`` / ``None`` for the folder of
    images ``data_dir``, or an already located :class:`~gsprestore.evaluation.datasets.Dataset`.
    ``noise_sigma`` is one level or several (list or ``"10,20,30,50"``): rows are ordered by
    method, then level. ``restorer_options`` maps a method name to keyword options for its factory
    (e.g. weights). ``progress(done, total, file_name)`` is called after each image. With
    ``per_image`` each row also lists every image's scores and time. Images are read one at a
    time and every method runs on each, so memory holds one image whatever the data set size.
    ``self_ensemble`` runs every method as its self-ensemble (:mod:`gsprestore.methods.self_ensemble`;
    rows labelled ``name+se``, the protocol says so).
    """
    import torch

    from ..physics import sampling
    from ..metrics import image_scores, psnr_dataset_mse, psnr_mean

    restorers.check_task(task)
    names = parse_methods(task, methods)
    pattern = sampling.check_pattern(pattern)
    sigmas = parse_sigmas(noise_sigma)
    dev = resolve_device(device)  # engine.py: auto | cpu | cuda | cuda:N
    limit = check_limit(limit)
    if isinstance(dataset, Dataset):
        ds = dataset
    else:
        ds = find_dataset(dataset, data_dir, download_missing=download)
    if len(ds) == 0:
        raise GspError("data set has no images", ds.root)
    full_size = len(ds)
    ds = limit_dataset(ds, limit)
    methods_built, skipped = _build(names, task, restorer_options or {}, dev, self_ensemble)
    space = CHANNEL_SPACE[task]
    options = restorer_options or {}
    built = {r.name: r for r in methods_built}
    records = {n: weights_record(n, task, options.get(n, {}), built.get(n)) for n in names}
    labels = {n: row_label(n, records[n], given=bool(options.get(n, {}).get("weights")), self_ensemble=self_ensemble)
              for n in names}
    save_dir = None if save_outputs is None else Path(save_outputs)
    if save_dir is not None:  # every output path is checked before the first image
        check_output_paths(save_dir, task, [labels[r.name] for r in methods_built], sigmas, ds.files,
                           overwrite=overwrite)

    # per (method, sigma), one record per image
    scores: dict[tuple[str, float], list[dict[str, Any]]] = {(r.name, s): [] for r in methods_built for s in sigmas}
    if progress is not None:
        progress(0, len(ds), "")  # the total (and so a bar and an ETA) from the start
    with torch.no_grad():
        for i, path in enumerate(ds.files):
            gt = load_ground_truth(path).to(dev)
            clean = make_observation(task, gt, pattern)
            for sigma in sigmas:
                y = add_noise(clean, sigma, seed + i)
                for r in methods_built:
                    if warmup and i == 0 and sigma == sigmas[0]:
                        r(y[..., :WARMUP_SIDE, :WARMUP_SIDE] if _tiled(y) else y, pattern)
                    _sync(dev)
                    t0 = time.perf_counter()
                    out = run_method(r, y, pattern, dev)
                    _sync(dev)
                    dt = time.perf_counter() - t0
                    if out.shape != gt.shape:
                        raise GspError(f"method {r.name} returned shape {tuple(out.shape)}, expected {tuple(gt.shape)}",
                                       path)
                    if not torch.isfinite(out).all():
                        raise GspError(f"method {r.name} returned NaN or Inf values", path)
                    sc = {k: float(v[0]) for k, v in image_scores(out.float(), gt, space).items()}
                    scores[(r.name, sigma)].append({"file": path.name, **sc, "seconds": dt,
                                                    "pixels": gt.shape[-2] * gt.shape[-1]})
                    if save_dir is not None:
                        save_output(out, output_path(save_dir, task, labels[r.name], sigma, path), overwrite)
            if progress is not None:
                progress(i + 1, len(ds), path.name)

    registered = ds.spec is not None
    results = []
    for name in names:
        for sigma in sigmas:
            if name in skipped:
                row: dict[str, Any] = {k: None for k in ROW_KEYS}
                row.update(method=labels[name], weights=records[name], task=task, dataset=ds.name,
                           images=0, kind=restorers.METHODS[name].kind,
                           noise_sigma=sigma, skipped=skipped[name],
                           paper=paper.reference(task, ds.name, name, sigma, pattern) if registered else None)
                results.append(row)
                continue
            r, recs = built[name], scores[(name, sigma)]
            seconds = sum(x["seconds"] for x in recs)
            row = {
                "method": labels[name],
                "task": task,
                "dataset": ds.name,
                "images": len(recs),
                "psnr_dataset_mse": psnr_dataset_mse([x["mse"] for x in recs]),
                "psnr_mean": psnr_mean([x["psnr_8bit"] for x in recs]),
                "ssim_mean": sum(x["ssim"] for x in recs) / len(recs),
                "seconds_per_image": seconds / len(recs),
                "megapixels_per_second": sum(x["pixels"] for x in recs) / 1e6 / seconds if seconds > 0 else None,
                "params": r.num_params,
                "kind": r.kind,
                "noise_sigma": sigma,
                "skipped": None,
                "weights": records[name],
                "paper": paper.reference(task, ds.name, name, sigma, pattern) if registered else None,
            }
            if per_image:
                row["per_image"] = recs
            results.append(row)
    proto_sigma: float | list[float] = sigmas if len(sigmas) > 1 else sigmas[0]
    proto = protocol(task, ds, pattern, proto_sigma, seed, str(dev))
    proto["limit"] = limit
    proto["dataset_images"] = full_size
    proto["self_ensemble"] = ("each method's output averaged with its output on the transposed input, "
                              "transposed back (two passes; rows labelled +se)" if self_ensemble else None)
    if registered:
        proto["paper"] = (f"{paper.CITATION}: {paper.TABLE_NAMES[task]} (and Table 2 for noisy McM demosaicking), "
                          "dataset-MSE PSNR and SSIM over the whole data set"
                          + (f" (these rows score only the first {len(ds)} of its {full_size} images)"
                             if len(ds) < full_size else ""))
    if save_dir is not None:
        proto["outputs"] = {"folder": str(save_dir), "layout": "<task>/<method>[/sigma-<s>]/<image stem>.png",
                            "format": "8-bit PNG, outputs clipped to [0, 1] and rounded (what psnr_mean scores)"}
    return {"protocol": proto, "results": results}


def _write_text(text: str, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``text`` atomically (temp file beside ``path`` + rename); an existing file is
    replaced only with ``overwrite``."""
    path = check_report_path(path, overwrite=overwrite, probe=False)
    try:
        with atomic_file(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as exc:
        raise GspError(f"could not write the report ({exc.strerror or exc})", path) from None
    return path


def check_report_path(path: str | Path, *, overwrite: bool = False, probe: bool = True) -> Path:
    """Raise :class:`GspError` unless a report can be written at ``path``: not a folder, absent
    (or ``overwrite``), its folder exists and, with ``probe``, really takes a file (a temp file is
    created and removed: a read-only file system or a full disk is found before the benchmark,
    not after it)."""
    import tempfile

    path = Path(path)
    if path.is_dir():
        raise GspError("output path is a folder", path)
    if path.exists() and not overwrite:
        raise GspError("output exists (pass --overwrite to replace it)", path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise GspError("output folder does not exist", parent)
    if probe:
        try:
            with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".probe") as fh:
                fh.write(b"\0" * 4096)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise GspError(f"cannot write a file in the output folder ({exc.strerror or exc})", parent) from None
    return path


def to_csv(result: Mapping[str, Any], *, per_image: bool = False) -> str:
    """The rows as CSV (columns :data:`CSV_KEYS`), preceded by ``# key: value`` comment lines
    holding the protocol (nested values as JSON). With ``per_image`` each method's row is followed
    by one row per image (``image`` set: the same columns over that image alone, ``images`` 1;
    data-set rows have an empty ``image``)."""
    buf = io.StringIO()
    for k, v in result["protocol"].items():
        buf.write(f"# {k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}\n")
    w = csv.DictWriter(buf, fieldnames=CSV_KEYS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in result["results"]:
        ref = row.get("paper") or {}
        flat = {**row, **{f"weights_{k}": v for k, v in (row.get("weights") or {}).items()},
                "paper_psnr": ref.get("psnr"), "paper_ssim": ref.get("ssim"), "image": None}
        w.writerow({k: ("" if flat.get(k) is None else flat.get(k)) for k in CSV_KEYS})
        if per_image:
            for rec in row.get("per_image") or []:
                w.writerow({k: ("" if v is None else v) for k, v in image_row(row, rec).items()})
    return buf.getvalue()


def image_row(row: Mapping[str, Any], rec: Mapping[str, Any]) -> dict[str, Any]:
    """A data-set row's columns (:data:`CSV_KEYS`) computed over one image's record ``rec``
    (``per_image``): PSNR of the float output, 8-bit PSNR, SSIM, its seconds and MP/s."""
    seconds = rec.get("seconds")
    return {
        **{k: row.get(k) for k in ("method", "kind", "task", "dataset", "noise_sigma", "params")},
        "images": 1, "psnr_dataset_mse": rec.get("psnr"), "psnr_mean": rec.get("psnr_8bit"),
        "ssim_mean": rec.get("ssim"), "seconds_per_image": seconds,
        "megapixels_per_second": rec["pixels"] / 1e6 / seconds if seconds else None,
        "skipped": None, "weights_path": (row.get("weights") or {}).get("path"),
        "weights_sha256": (row.get("weights") or {}).get("sha256"), "paper_psnr": None, "paper_ssim": None,
        "image": rec.get("file"),
    }


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def to_markdown(result: Mapping[str, Any]) -> str:
    """The rows as a Markdown table headed by the protocol's essentials (skipped rows say why)."""
    p = result["protocol"]
    sig = p["noise"]["sigma"]
    lines = [
        f"# Benchmark: {p['task']} on {p['dataset']} ({p['images']} images)",
        "",
        f"- observation: {p['observation']}",
        f"- scored on: {p['channel_space']}; {p['crop']}",
        f"- PSNR: {p['psnr_dataset_mse']}",
        f"- mean PSNR: {p['psnr_mean']}",
        f"- SSIM: {p['ssim']}",
        f"- noise sigma (/255): {sig}; seed {p['noise']['seed']}",
        f"- timing: {p['timing']}",
        f"- gsprestore {p['gsprestore_version']}, torch {p['torch_version']}, Python {p['python_version']}, "
        f"device {p['device']}, {p['date']}; checksums verified: {p['checksums_verified']}",
        "",
    ]
    has_paper = any(r.get("paper") for r in result["results"])
    if p.get("paper") and has_paper:
        lines.insert(-1, f"- paper: {p['paper']}")
    extra = " paper PSNR (dB) | paper SSIM |" if has_paper else ""
    lines += [f"| method | noise sigma | PSNR (dB) | mean PSNR (dB) | SSIM | s/image | MP/s | params |{extra}",
              "|---|---|---|---|---|---|---|---|" + ("---|---|" if has_paper else "")]
    for r in result["results"]:
        ref = r.get("paper") or {}
        tail = f" {_fmt(ref.get('psnr'), '.2f')} | {_fmt(ref.get('ssim'), '.4f')} |" if has_paper else ""
        if r.get("skipped"):
            lines.append(f"| {r['method']} | {r['noise_sigma']:g} | skipped: {r['skipped']} | | | | | |{tail}")
            continue
        lines.append(
            f"| {r['method']} | {r['noise_sigma']:g} | {_fmt(r['psnr_dataset_mse'], '.2f')} | "
            f"{_fmt(r['psnr_mean'], '.2f')} | {_fmt(r['ssim_mean'], '.4f')} | {_fmt(r['seconds_per_image'], '.3f')} | "
            f"{_fmt(r['megapixels_per_second'], '.2f')} | {_fmt(r['params'], ',')} |{tail}"
        )
    return "\n".join(lines) + "\n"


def write_csv(result: Mapping[str, Any], path: str | Path, *, overwrite: bool = False,
              per_image: bool = False) -> Path:
    """:func:`to_csv` written atomically; no overwrite without ``overwrite``."""
    return _write_text(to_csv(result, per_image=per_image), path, overwrite=overwrite)


def write_markdown(result: Mapping[str, Any], path: str | Path, *, overwrite: bool = False) -> Path:
    """:func:`to_markdown` written atomically; no overwrite without ``overwrite``."""
    return _write_text(to_markdown(result), path, overwrite=overwrite)


def write_json(result: Mapping[str, Any], path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``result`` as indented JSON, atomically (temp file + rename); an existing file is
    replaced only with ``overwrite``."""
    from ..core.jsontext import dumps

    return _write_text(dumps(result), path, overwrite=overwrite)


__all__ = [
    "CHANNEL_SPACE",
    "CSV_KEYS",
    "ROW_KEYS",
    "add_noise",
    "check_limit",
    "dataset_megapixels",
    "default_methods",
    "estimate_seconds",
    "load_ground_truth",
    "make_observation",
    "parse_methods",
    "parse_sigmas",
    "protocol",
    "run_benchmark",
    "to_csv",
    "to_markdown",
    "write_csv",
    "write_json",
    "write_markdown",
]
