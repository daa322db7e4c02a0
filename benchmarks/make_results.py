"""Regenerate ``docs/results.md`` and its two plots: the paper's Tables 1-3 beside our numbers.

Usage (from the repository root; one thread, since the CPU is shared)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/make_results.py --data-dir ~/datasets

For each task (demosaic, upscale2x) and data set (McM, Kodak, and Urban100 when ``--data-dir``
holds it) it runs :func:`gsprestore.evaluation.benchmark.run_benchmark` over every method of the task
(learned ones without weights become "no weights" rows), plus the noise-robustness run
(demosaicking on McM, sigma 10/20/30/50). The raw results go to ``docs/results/*.json``
(``--reuse`` takes existing ones instead of rerunning); then it writes ``docs/results.md``,
``docs/results-psnr-vs-params.png`` and ``docs/results-psnr-vs-time.png`` (drawn by matplotlib:
the ``plots`` extra, ``pip install -e ".[plots]"``).

The runs, the merge and the page are :mod:`gsprestore_lab.results_page`; this script is its
command line and draws the two plots (:mod:`gsprestore.viz.charts`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gsprestore.viz.charts import PAPER, Panel, Point, scatter_png

from gsprestore.evaluation.paper import PAPER_TABLES
from gsprestore_lab.results_page import DATASETS, TASKS, TITLE, regenerate

ROOT = Path(__file__).resolve().parents[1]


def plots(results: dict, shown: list[str], out_dir: Path) -> tuple[Path, Path]:
    """PSNR vs parameters (paper models and ours) and PSNR vs seconds per megapixel (ours)."""
    pp, pt = [], []
    for task in TASKS:
        for d in shown[:2]:
            if (task, d) not in results:
                continue
            name = f"{'Demosaicking' if task == 'demosaic' else '2x interpolation'}, {TITLE[d]}"
            ours = [r for r in results[(task, d)]["results"] if not r.get("skipped") and r["noise_sigma"] == 0]
            pts = [Point(r["params"] or 0, r["psnr_dataset_mse"], r["method"]) for r in ours]
            pts += [Point(params, vals[d][0], label.split(" (")[0], PAPER)
                    for label, _m, params, vals in PAPER_TABLES[task] if params and d in vals]
            pp.append(Panel(name, pts, "parameters (log scale; 0 = not learned)", xlog=True, zero_at=1.0))
            tp = [Point(1.0 / r["megapixels_per_second"], r["psnr_dataset_mse"], r["method"]) for r in ours
                  if r["megapixels_per_second"]]
            pt.append(Panel(name, tp, "seconds per megapixel (log scale, this CPU, 1 thread)", xlog=True))
    a = scatter_png(pp, out_dir / "results-psnr-vs-params.png", columns=2,
                    title="PSNR (dataset-MSE, dB) vs number of parameters")
    b = scatter_png(pt, out_dir / "results-psnr-vs-time.png", columns=2,
                    title="PSNR (dataset-MSE, dB) vs time per megapixel (measured here)")
    return a, b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("GSPRESTORE_DATA_DIR"),
                    help="parent folder of kodak24/, mcm/ (and urban100/ if you have it)")
    ap.add_argument("--out-dir", default=str(ROOT / "docs"), help="where results.md and the PNGs go")
    ap.add_argument("--json-dir", default=None, help="raw results (default: OUT_DIR/results)")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--methods", default=None, help="comma-separated (default: every method of each task)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-noise", dest="noise", action="store_false", help="skip the robustness run")
    ap.add_argument("--reuse", action="store_true", help="reuse existing JSON results instead of rerunning")
    ap.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                    help="`gsprestore benchmark --json` files whose rows replace (same method and noise level) "
                         "or join the stored results of their task and data set before the page is rebuilt")
    args = ap.parse_args(argv)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    page = regenerate(args.out_dir, data_dir=args.data_dir, json_dir=args.json_dir, datasets=datasets,
                      methods=args.methods, device=args.device, noise=args.noise, reuse=args.reuse,
                      merge=args.merge, plot=plots)
    if page is None:
        print("error: no data set found; pass --data-dir", file=sys.stderr)
        return 1
    print(f"wrote {page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
