"""``docs/results.md``: the paper's Tables 1-3 beside our numbers, and the runs behind them.

For each task (demosaic, upscale2x) and data set (McM, Kodak, and Urban100 when the data folder
holds it) :func:`run_all` runs :func:`gsprestore.evaluation.benchmark.run_benchmark` over every
method of the task (learned ones without weights become "no weights" rows), plus the
noise-robustness run (demosaicking on McM, sigma 10/20/30/50), and keeps the raw results as
``<task>-<dataset>.json`` (``reuse`` takes existing ones instead of rerunning); :func:`merge_rows`
folds a separate ``gsprestore benchmark --json`` run into them; :func:`write_markdown` writes the
page. :func:`regenerate` does all of it. The command line, which also draws the page's two plots,
is ``benchmarks/make_results.py``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from gsprestore.evaluation.paper import NOISE_SIGMAS, PAPER_TABLE2, PAPER_TABLES

DATASETS = ("mcm", "kodak", "urban100")
TITLE = {"mcm": "McM", "kodak": "Kodak", "urban100": "Urban100"}
TASKS = ("demosaic", "upscale2x")
COMMAND = "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/make_results.py --data-dir ~/datasets"

# The paper's numbers: one source, gsprestore/evaluation/paper.py (also behind `gsprestore benchmark`'s paper columns).
SIGMAS = NOISE_SIGMAS


def run_all(json_dir: str | Path, datasets: Iterable[str] = DATASETS, data_dir: str | Path | None = None, *,
            methods: str | None = None, device: str = "cpu", noise: bool = True,
            reuse: bool = False) -> tuple[dict, dict | None, list[str]]:
    """Run (or, with ``reuse``, load) every benchmark, keeping each result in ``json_dir``:
    ``methods`` (comma-separated; default: every method of each task) on each of ``datasets``
    found under ``data_dir``, and the noise run when ``noise``. Returns ``{(task, dataset): result}``,
    the noise result (or None) and notes on what is missing."""
    from gsprestore.core.errors import DatasetError
    from gsprestore.methods import registry as restorers
    from gsprestore.evaluation import benchmark
    from gsprestore.evaluation import datasets as sets

    json_dir = Path(json_dir)
    json_dir.mkdir(parents=True, exist_ok=True)
    datasets = list(datasets)
    results, notes = {}, []

    def one(name: str, task: str, ds: str, **kw) -> dict:
        path = json_dir / f"{name}.json"
        if reuse and path.is_file():
            print(f"reusing {path}", file=sys.stderr)
            return json.loads(path.read_text())
        print(f"running {name} ...", file=sys.stderr)
        chosen = None
        if methods:  # the asked-for methods that do this task
            chosen = [m for m in methods.split(",") if m.strip().lower() in restorers.methods_for(task)]
        res = benchmark.run_benchmark(task, ds, chosen, data_dir, device=device, **kw)
        benchmark.write_json(res, path, overwrite=True)
        return res

    for ds in datasets:
        try:
            sets.find_dataset(ds, data_dir, checksums=False)
        except DatasetError:
            notes.append(f"{TITLE[ds]}: not found under `--data-dir` (the project's copy has only its checksums), "
                         f"so its columns are left out; `gsprestore benchmark --dataset {ds} --download` fetches it.")
            continue
        for task in TASKS:
            results[(task, ds)] = one(f"{task}-{ds}", task, ds)
    noise_result = None
    if noise and "mcm" in datasets and ("demosaic", "mcm") in results:
        noise_result = one("demosaic-mcm-noise", "demosaic", "mcm", noise_sigma=list(SIGMAS))
    return results, noise_result, notes


def _shipped_sha(method: str, task: str) -> str | None:
    from gsprestore.methods.weights import manifest_entry

    entry = manifest_entry(method, task)
    return entry.get("sha256") if entry else None


def _shipped_now(method: str, task: str, weights: dict) -> bool:
    """Whether a row's weights record (:func:`gsprestore.evaluation.benchmark.weights_record`) names the files
    shipped now: the method's own, or for an ensemble every member's."""
    members = weights.get("members")
    if members:
        return all(r and r.get("sha256") and r["sha256"] == _shipped_sha(m, task) for m, r in members.items())
    return bool(weights.get("sha256")) and weights["sha256"] == _shipped_sha(method, task)


def _as_shipped(weights: dict) -> dict:
    """The record of :func:`_shipped_now` weights, marked shipped (an ensemble's members too)."""
    if weights.get("members"):
        members = {m: dict(r, shipped=True) for m, r in weights["members"].items()}
        return dict(weights, members=members, shipped=True, path=None)
    return dict(weights, shipped=True)


def merge_rows(src: Path, json_dir: Path) -> Path:
    """Fold the rows of one ``gsprestore benchmark --json`` file into the stored result of its task
    and data set (``<task>-<dataset>.json``, or ``demosaic-mcm-noise.json`` for a run over several
    noise levels): a row replaces the stored one with the same method and noise level, others are
    appended; the stored protocol is kept and the merged file's protocol recorded beside it. A
    row scored with ``--weights M=FILE`` (labelled ``M@FILE``) whose file has the SHA-256 of the
    weights shipped now is a row of the shipped method ``M``, and is merged as one; so is an
    ensemble's row (``ensemble@ugtv=FILE``) whose every member's file is the one shipped now."""
    new = json.loads(src.read_text())
    proto = new["protocol"]
    for row in new["results"]:
        method, at, _ = str(row["method"]).partition("@")
        weights = row.get("weights") or {}
        if at and _shipped_now(method, proto["task"], weights):
            row["method"], row["weights"] = method, _as_shipped(weights)
    sigma = proto["noise"]["sigma"]
    name = f"{proto['task']}-{proto['dataset']}" + ("-noise" if isinstance(sigma, list) else "")
    target = json_dir / f"{name}.json"
    if target.is_file():
        old = json.loads(target.read_text())
    else:
        old = {"protocol": proto, "results": []}
    keys = {(r["method"], r["noise_sigma"]) for r in new["results"]}
    old["results"] = [r for r in old["results"] if (r["method"], r["noise_sigma"]) not in keys] + new["results"]
    merged = old.setdefault("merged", [])
    merged.append({"file": src.name, "methods": sorted({r["method"] for r in new["results"]}), "protocol": proto})
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(old, indent=2) + "\n")
    return target


def _rows(result: dict | None) -> dict:
    return {} if result is None else {(r["method"], r["noise_sigma"]): r for r in result["results"]}


def _cell(row: dict | None, ssim: bool = True) -> str:
    if row is None:
        return "not run"
    if row.get("skipped"):
        return "no weights" if "weights" in row["skipped"] else "skipped"
    return f"{row['psnr_dataset_mse']:.2f} / {row['ssim_mean']:.4f}" if ssim else f"{row['psnr_dataset_mse']:.2f}"


def _paper_cell(v) -> str:
    if v is None:
        return "-"
    return f"{v[0]:.2f} / {v[1]:.4f}" if v[1] is not None else f"{v[0]:.2f}"


def _params(n) -> str:
    return "-" if not n else f"{n:,}"


def comparison_table(task: str, results: dict, shown: list[str]) -> list[str]:
    """Markdown lines: the paper's table for ``task`` with our measurement beside each number,
    then our methods the paper does not list."""
    head = "| method | params (paper) | " + " | ".join(f"{TITLE[d]} paper | {TITLE[d]} ours" for d in shown) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(shown))]
    ours = {d: _rows(results.get((task, d))) for d in shown}
    listed = set()
    for label, method, params, vals in PAPER_TABLES[task]:
        listed.add(method)
        cells = []
        for d in shown:
            cells.append(_paper_cell(vals.get(d)))
            cells.append(_cell(ours[d].get((method, 0.0))) if method else "not in gsprestore")
        lines.append(f"| {label} | {_params(params)} | " + " | ".join(cells) + " |")
    extra = list(dict.fromkeys(m for d in shown for (m, s) in ours[d] if m not in listed))
    for m in extra:
        cells = []
        for d in shown:
            row = ours[d].get((m, 0.0))
            cells += ["-", _cell(row)]
        p = next((ours[d][(m, 0.0)].get("params") for d in shown if (m, 0.0) in ours[d]), None)
        lines.append(f"| {m} (gsprestore only) | {_params(p)} | " + " | ".join(cells) + " |")
    return lines


def noise_table(noise: dict | None) -> list[str]:
    head = "| method | " + " | ".join(f"sigma {s:g} paper | sigma {s:g} ours" for s in SIGMAS) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(SIGMAS))]
    rows = _rows(noise)
    listed = set()
    for label, method, vals in PAPER_TABLE2:
        listed.add(method)
        cells = []
        for s, v in zip(SIGMAS, vals):
            cells += [f"{v:.2f}", _cell(rows.get((method, s)), ssim=False) if method else "not in gsprestore"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for m in dict.fromkeys(m for (m, s) in rows if m not in listed):
        cells = []
        for s in SIGMAS:
            cells += ["-", _cell(rows.get((m, s)), ssim=False)]
        lines.append(f"| {m} (gsprestore only) | " + " | ".join(cells) + " |")
    return lines


def speed_table(results: dict, shown: list[str]) -> list[str]:
    cols = [(t, d) for t in TASKS for d in shown if (t, d) in results]
    lines = ["| method | " + " | ".join(f"{t} {TITLE[d]}: s/image, MP/s" for t, d in cols) + " |",
             "|" + "---|" * (1 + len(cols))]
    methods = list(dict.fromkeys(r["method"] for c in cols for r in results[c]["results"]))
    for m in methods:
        cells = []
        for c in cols:
            r = _rows(results[c]).get((m, 0.0))
            if r is None:
                cells.append("(not for this task)")
            elif r.get("skipped"):
                cells.append("no weights")
            else:
                cells.append(f"{r['seconds_per_image']:.3f}, {r['megapixels_per_second']:.2f}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def differences(results: dict, shown: list[str]) -> list[str]:
    """One line per method that both the paper and we report: the range of (ours - paper) in dB."""
    diffs: dict[str, list[float]] = {}
    for task in TASKS:
        for _label, method, _p, vals in PAPER_TABLES[task]:
            for d in shown:
                row = _rows(results.get((task, d))).get((method, 0.0)) if method else None
                if row and not row.get("skipped") and d in vals:
                    diffs.setdefault(method, []).append(row["psnr_dataset_mse"] - vals[d][0])
    if not diffs:
        return []
    parts = [f"{m} {min(v):+.2f} to {max(v):+.2f}" for m, v in diffs.items()]
    return ["**Ours minus the paper (PSNR, dB, over both tasks and the data sets above):** " + "; ".join(parts) + ". "
            "The classical rows reproduce the paper's protocol to a few hundredths of a dB. iGLR and iGTV are not "
            "learned; their fixed settings (graph weights, regularisation strength, iterations; see "
            "[architecture.md](architecture.md)) are this implementation's choices, so their rows agree with the "
            "paper's only roughly."]


def write_markdown(results: dict, noise: dict | None, notes: list[str], out: Path, shown: list[str]) -> None:
    any_res = next(iter(results.values()))
    p = any_res["protocol"]
    skipped = sorted({r["method"] for res in results.values() for r in res["results"] if r.get("skipped")})
    lines = [
        "# Results",
        "",
        "<!-- generated by benchmarks/make_results.py; do not edit by hand -->",
        "",
        "Regenerate this page (tables, `docs/results/*.json` and both plots) with one command:",
        "",
        f"```\n{COMMAND}\n```",
        "",
        f"(`--reuse` rebuilds the page from the JSON files without rerunning.) Measured with gsprestore "
        f"{p['gsprestore_version']}, torch {p['torch_version']}, Python {p['python_version']}, on `{p['device']}` "
        f"(a shared 2-core CPU, `OMP_NUM_THREADS=1`), {p['date'][:10]}; data-set checksums verified: "
        f"{all(r['protocol']['checksums_verified'] for r in results.values())}. The protocol is in "
        "[benchmarks.md](benchmarks.md): PSNR here is the paper's dataset-MSE PSNR "
        "(`10 log10(1 / mean MSE)`, float outputs, not clipped), SSIM the mean per-image SSIM; each cell "
        "is `PSNR / SSIM`.",
        "",
    ]
    if skipped:
        lines += [f"**No weights:** {', '.join(skipped)} have no trained weights in this release "
                  "(`gsprestore/weights/manifest.json` lists none), so their rows say \"no weights\"; the paper's numbers "
                  "for them are shown for reference. Methods the paper compares against but gsprestore does not "
                  "implement (RST-B/S, MAIN, SwinIR) say \"not in gsprestore\".", ""]
    learned = sorted({r["method"] for res in results.values() for r in res["results"]
                      if r["kind"] == "learned" and r.get("skipped") is None})
    if learned:
        lines += [f"**Learned rows** ({', '.join(learned)}): the weights shipped in `gsprestore/weights/` (their recipe, "
                  "parameter counts and the commands that scored them are in `gsprestore/weights/manifest.json`). The "
                  "parameter column is the paper's; the shipped models were trained briefly on a CPU with "
                  "cheaper unrolling (see [training.md](training.md)), which is why they sit well below the "
                  "paper's rows.", ""]
    for n in notes:
        lines += [f"**Missing:** {n}", ""]
    lines += differences(results, shown) + [""]
    lines += ["## Demosaicking (paper Table 1)", "", "RGGB mosaic of the full image, scored on RGB, no noise.", ""]
    lines += comparison_table("demosaic", results, shown) + [""]
    lines += ["## Noise robustness (paper Table 2)", "",
              "Demosaicking on McM with Gaussian noise of std sigma/255 added to the mosaic "
              "(one draw per image, seed 0 + image index). PSNR only.", ""]
    lines += (noise_table(noise) if noise else ["Not run (needs McM)."]) + [""]
    lines += ["## 2x interpolation (paper Table 3)", "",
              "LR = HR[0::2, 0::2], scored on BT.601 luma Y. The paper's bicubic is OpenCV's `INTER_CUBIC` "
              "(misaligned by a quarter pixel with the sampling grid; our `bicubic-halfpixel`); our `bicubic` "
              "is aligned to the grid.", ""]
    lines += comparison_table("upscale2x", results, shown) + [""]
    lines += ["## Speed", "",
              "Seconds per image (restorer call only, after one warm-up) and megapixels per second, from the "
              "same runs; one thread on a CPU shared with other jobs, so treat them as rough.", ""]
    lines += speed_table(results, shown) + [""]
    lines += ["## Plots", "",
              "PSNR against parameter count: methods measured here (filled discs; the classical ones and "
              "iGLR/iGTV have no learned parameters and sit at 0) and the learned models as reported in the "
              "paper (hollow squares).", "", "![PSNR vs parameters](results-psnr-vs-params.png)", "",
              "PSNR against seconds per megapixel, methods measured here (the paper reports no timings).", "",
              "![PSNR vs time per megapixel](results-psnr-vs-time.png)", ""]
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    os.replace(tmp, out)


def regenerate(out_dir: str | Path, *, data_dir: str | Path | None = None, json_dir: str | Path | None = None,
               datasets: Iterable[str] = DATASETS, methods: str | None = None, device: str = "cpu",
               noise: bool = True, reuse: bool = False, merge: Iterable[str | Path] = (),
               plot: Callable[[dict, list[str], Path], object] | None = None) -> Path | None:
    """Rebuild ``out_dir/results.md``: fold the ``merge`` files into the stored results
    (:func:`merge_rows`), run or reuse every benchmark (:func:`run_all`; raw results in
    ``json_dir``, default ``out_dir/results``), call ``plot(results, shown data sets, out_dir)``
    when given (the page shows ``results-psnr-vs-params.png`` and ``results-psnr-vs-time.png``),
    then write the page. Returns its path, or None when no data set was found."""
    out_dir = Path(out_dir)
    json_dir = Path(json_dir) if json_dir else out_dir / "results"
    datasets = list(datasets)
    for f in merge:
        print(f"merged {merge_rows(Path(f), json_dir)}", file=sys.stderr)
    results, noise_result, notes = run_all(json_dir, datasets, data_dir, methods=methods, device=device,
                                           noise=noise, reuse=reuse)
    if not results:
        return None
    shown = [d for d in datasets if any((t, d) in results for t in TASKS)]
    if plot is not None:
        plot(results, shown, out_dir)
    page = out_dir / "results.md"
    write_markdown(results, noise_result, notes, page, shown)
    return page
