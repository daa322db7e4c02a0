"""``gsprestore benchmark``: score methods on a data set under the paper's protocol.

Thin wrapper over :func:`gsprestore.evaluation.benchmark.run_benchmark`; no torch import at module level."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..physics.tasks import score_space
from .registry import command


def results_table(result: dict[str, Any]) -> "rich.table.Table":  # noqa: F821
    """A Rich table of the benchmark rows, titled with the protocol's essentials; a noise column
    when several levels were run, and the reason for each skipped method."""
    from rich.table import Table

    p = result["protocol"]
    space = {"rgb": "RGB", "y": "Y (BT.601)"}[score_space(p["task"])]
    bits = [p["task"], f"{p['dataset']} ({p['images']} images)", space]
    if p["pattern"]:
        bits.append(p["pattern"])
    sig = p["noise"]["sigma"]
    several = isinstance(sig, list)
    if not several and sig:
        bits.append(f"noise sigma {sig:g}/255")
    bits.append(p["device"])
    has_paper = any(r.get("paper") for r in result["results"])
    caption = ("PSNR (dB): 10 log10(1 / mean MSE) over the data set, float outputs (the paper's). Mean PSNR (dB): "
               "mean of per-image PSNR, 8-bit outputs.")
    if has_paper:
        caption += f" Paper: {p.get('paper') or 'the paper'}."
    if p.get("limit") and p["images"] < p.get("dataset_images", p["images"]):
        bits[1] = f"{p['dataset']} (first {p['images']} of {p['dataset_images']} images)"
    table = Table(title=", ".join(bits), caption=caption)
    width = max([len("method")] + [len(r["method"]) for r in result["results"]])
    table.add_column("method", no_wrap=True, min_width=width)
    cols = (["sigma"] if several else []) + ["PSNR", "mean PSNR", "SSIM", "s/image", "MP/s", "params"]
    cols += ["paper PSNR", "paper SSIM"] if has_paper else []
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True)
    for r in result["results"]:
        lead = [r["method"]] + ([f"{r['noise_sigma']:g}"] if several else [])
        ref = r.get("paper") or {}
        tail = ["-" if ref.get("psnr") is None else f"{ref['psnr']:.2f}",
                "-" if ref.get("ssim") is None else f"{ref['ssim']:.4f}"] if has_paper else []
        if r.get("skipped"):
            table.add_row(*lead, f"skipped: {r['skipped']}", *[""] * 5, *tail)
            continue
        table.add_row(
            *lead,
            f"{r['psnr_dataset_mse']:.2f}",
            f"{r['psnr_mean']:.2f}",
            f"{r['ssim_mean']:.4f}",
            f"{r['seconds_per_image']:.3f}",
            "-" if r["megapixels_per_second"] is None else f"{r['megapixels_per_second']:.2f}",
            f"{r['params']:,}",
            *tail,
        )
    return table


def estimate_line(estimates: list[tuple[str, dict[str, Any]]], images: int) -> str:
    """One line saying about how long the run should take, from recorded speeds:
    ``about 41 min in all (demosaic 23 min: ugtv 11 min, ...; upscale2x ...)``."""

    def dur(s: float) -> str:
        return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"

    total = sum(e["seconds"] for _t, e in estimates)
    parts, unrecorded = [], []
    for t, e in estimates:
        slow = sorted(((v, m) for m, v in e["per_method"].items() if v is not None), reverse=True)
        parts.append(f"{t} {dur(e['seconds'])}: " + ", ".join(f"{m} {dur(v)}" for v, m in slow))
        unrecorded += [m for m in e["unrecorded"] if m not in unrecorded]
    mp = estimates[0][1]["megapixels"] if estimates else 0.0
    line = (f"estimate: about {dur(total)} in all for {images} images ({mp:.3g} MP per method and level), from the "
            f"recorded speeds on {estimates[0][1]['device'] if estimates else 'cpu'} (gsprestore models): "
            + "; ".join(parts))
    if unrecorded:
        line += f"; not counted (no recorded speed): {', '.join(unrecorded)}"
    return line


def _weights_options(items: list[str], names: list[str]) -> dict[str, dict[str, Any]]:
    """``["ugtv=run/model.pt", ...]`` -> ``{"ugtv": {"weights": "run/model.pt"}}`` (usage errors exit 2;
    a file that is missing or cannot be read as weights, exit 1, before the first image). The
    ensemble, when benchmarked, takes its members' files: ``{"ensemble": {"weights": {"ugtv": ...}}}``."""
    from pathlib import Path

    from ..methods.ensemble import MEMBERS, NAME
    from ..core.errors import GspError, UsageError
    from ..methods.registry import METHODS
    from ..methods.weights import file_method

    options: dict[str, dict[str, Any]] = {}
    for item in items:
        method, sep, path = item.partition("=")
        method = method.strip().lower()
        if not sep or not method or not path:
            raise UsageError(f"--weights takes METHOD=PATH, got {item!r}")
        if method not in METHODS or METHODS[method].kind != "learned":
            why = " (give its members' files: --weights ugtv=PATH --weights uglr=PATH)" if method == NAME else ""
            raise UsageError(f"--weights is for learned methods (uglr, ugtv), not {method!r}{why}")
        if method not in names and not (NAME in names and method in MEMBERS):
            raise UsageError(f"--weights {method}=...: {method} is not among the benchmarked methods")
        if not Path(path).exists():
            raise GspError("weights file not found", path)
        file_method(path)  # and readable, before the first image: a damaged file is an error too
        options[method] = {"weights": path}
    if NAME in names:
        members = {m: options[m]["weights"] for m in MEMBERS if m in options}
        if members:
            options[NAME] = {"weights": members}
        for m in set(options) - set(names):  # given for the ensemble's sake only
            del options[m]
    return options


def plan_tasks(task: str | None, methods: str | None) -> list[tuple[str, str | None]]:
    """``[(task, methods)]`` to run: the given ``--task``, else the tasks the ``--methods`` imply
    (each task with the named methods that do it), else both tasks with all their methods."""
    from ..methods.registry import TASKS, check_task, method_spec

    if task is not None:
        return [(check_task(task), methods)]
    if methods is None:
        return [(t, None) for t in TASKS]
    names = [method_spec(n.strip()).name for n in methods.split(",") if n.strip()]
    plan = [(t, ",".join(n for n in names if t in method_spec(n).tasks)) for t in TASKS]
    return [(t, m) for t, m in plan if m] or [(t, None) for t in TASKS]


#: An up-front estimate is printed when the run should take at least this long (seconds).
ESTIMATE_NOTE_SECONDS = 30.0


def _per_task(path: Path | None, task: str, several: bool) -> Path | None:
    """The report path of ``task``: ``OUT`` itself for one task, ``OUT-<task>.ext`` for several."""
    if path is None or not several:
        return path
    return path.with_name(f"{path.stem}-{task}{path.suffix}")


@command("benchmark")
def benchmark(
    task: Annotated[
        Optional[str],
        typer.Option("--task", help="demosaic or upscale2x (default: the tasks the --methods do, else both; with "
                     "both, report files get a -demosaic / -upscale2x suffix)."),
    ] = None,
    dataset: Annotated[
        Optional[str],
        typer.Option("--dataset", help="kodak, mcm, urban100, or custom (any folder of PNG/TIFF/JPEG/WebP images given by "
                     "--data-dir; the default when --dataset is omitted)."),
    ] = None,
    data_dir: Annotated[
        Optional[Path],
        typer.Option("--data-dir", help="The data-set folder or its parent (default: $GSPRESTORE_DATA_DIR, "
                     "then the user cache); for a custom data set, the folder of images."),
    ] = None,
    download: Annotated[
        bool, typer.Option("--download", help="Download the data set (into --data-dir, else $GSPRESTORE_DATA_DIR, "
                           "else the user cache) from its public source, verifying every file's SHA-256; files "
                           "already there are kept.")
    ] = False,
    methods: Annotated[
        Optional[str],
        typer.Option("--method", "-m", "--methods", help="Comma-separated method names (default: every method of "
                     "the task but the "
                     "ensemble; learned ones without weights are listed as skipped)."),
    ] = None,
    pattern: Annotated[str, typer.Option("--pattern", help="Bayer pattern: RGGB, BGGR, GRBG or GBRG.")] = "RGGB",
    noise_sigma: Annotated[
        str, typer.Option("--noise-sigma", help="Gaussian noise std (8-bit units, /255) added to the input; a list "
                          "such as 10,20,30,50 gives one row per method and level.")
    ] = "0",
    json_out: Annotated[
        Optional[Path], typer.Option("--json", help="Also write the results and protocol to this JSON file.")
    ] = None,
    csv_out: Annotated[
        Optional[Path], typer.Option("--csv", help="Also write the rows as CSV (protocol in # lines).")
    ] = None,
    md_out: Annotated[
        Optional[Path], typer.Option("--markdown", help="Also write the protocol and a Markdown table.")
    ] = None,
    weights: Annotated[
        Optional[list[str]],
        typer.Option("--weights", help="METHOD=PATH: score a learned method (uglr / ugtv) with this weights file "
                     "instead of the shipped one (repeatable)."),
    ] = None,
    per_image: Annotated[
        bool, typer.Option("--per-image", help="Also one CSV row per method and image (the JSON always has every "
                           "image's scores in per_image).")
    ] = False,
    save_outputs: Annotated[
        Optional[Path],
        typer.Option("--save-outputs", help="Write every method's output images into this folder, as "
                     "DIR/<task>/<method>/<image>.png (noisy runs: a sigma-<s> folder below the method's), 8-bit "
                     "PNG, what mean PSNR scores."),
    ] = None,
    limit: Annotated[
        Optional[int], typer.Option("--limit", help="Score only the first N images of the (sorted) data set.")
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace existing output files.")] = False,
    device: Annotated[str, typer.Option("--device", help="auto (CUDA when available), cpu, cuda or cuda:N.")] = "auto",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the input noise.")] = 0,
    self_ensemble: Annotated[bool, typer.Option("--self-ensemble", help="Run every method as its self-ensemble (the "
                                                "mean of its outputs on the image and its transpose; rows labelled "
                                                "METHOD+se; twice the time).")] = False,
) -> None:
    """Score methods on a data set with the paper's protocol (docs/protocol.md): both PSNRs, SSIM, speed.

    Example: gsprestore benchmark --dataset kodak  (both tasks, every method; data from the cache,
    --data-dir or $GSPRESTORE_DATA_DIR; --download fetches it)
    """
    from rich.console import Console

    from ..evaluation.benchmark import (
        check_limit, check_output_paths, check_report_path, dataset_megapixels, estimate_seconds,
        limit_dataset, parse_methods, parse_sigmas, row_label, run_benchmark, weights_record, write_csv,
        write_json, write_markdown,
    )
    from ..evaluation.datasets import find_dataset, get_spec
    from ..core.errors import GspError, UsageError
    from ..physics.sampling import check_pattern
    from ..methods.self_ensemble import PASSES

    # Argument errors first (exit 2), before any data is touched.
    plan = plan_tasks(task, methods)
    several = len(plan) > 1
    if dataset is None or dataset.lower() == "custom":
        dataset = "custom"
        if data_dir is None:
            raise UsageError("pass --dataset kodak|mcm|urban100, or --data-dir with a folder of images")
        if download:
            raise UsageError("--download needs a registered --dataset (kodak, mcm or urban100)")
    else:
        get_spec(dataset)
    plan = [(t, parse_methods(t, m)) for t, m in plan]
    pattern = check_pattern(pattern)
    sigmas = parse_sigmas(noise_sigma)
    limit = check_limit(limit)
    if not 0 <= seed < 2**63:
        raise UsageError(f"--seed must be 0 to 2**63 - 1, got {seed}")
    outputs = [(o, w) for o, w in ((json_out, write_json), (csv_out, write_csv), (md_out, write_markdown))
               if o is not None]
    targets = [_per_task(out, t, several) for out, _ in outputs for t, _names in plan]
    for target in targets:  # every report path is checked before the first image
        check_report_path(target, overwrite=overwrite)
    from ..core.fileid import path_key

    if len({path_key(t) for t in targets}) < len(targets):  # by identity: a link reaches the same file
        raise UsageError("--json, --csv and --markdown name the same file")

    all_names = [n for _t, names in plan for n in names]
    restorer_options = _weights_options(weights or [], all_names)
    from ..runtime.tiling import resolve_device

    dev = resolve_device(device)

    err = Console(stderr=True)
    # the data set once (downloaded and verified first with --download), limited, for every task
    whole = find_dataset(dataset, data_dir, download_missing=download)
    ds = limit_dataset(whole, limit)
    images = {path_key(f) for f in whole.files}
    for target in targets:  # a report never replaces an image of the data set (--overwrite or not)
        if path_key(target) in images:
            raise UsageError(f"{target} is an image of the data set; write the report elsewhere")
    if save_outputs is not None:  # every image path, before the first image
        for t, names in plan:
            labels = [row_label(n, weights_record(n, t, restorer_options.get(n, {})),
                                given=n in restorer_options, self_ensemble=self_ensemble) for n in names]
            check_output_paths(save_outputs, t, labels, sigmas, ds.files, overwrite=overwrite)
    megapixels, _unread = dataset_megapixels(ds.files)
    estimates = [(t, estimate_seconds(t, names, megapixels, dev.type, levels=len(sigmas), images=len(ds),
                                      passes=PASSES if self_ensemble else 1))
                 for t, names in plan]
    if sum(e["seconds"] for _t, e in estimates) >= ESTIMATE_NOTE_SECONDS:
        err.print(estimate_line(estimates, len(ds)), markup=False, highlight=False, soft_wrap=True)
    run = dict(pattern=pattern, noise_sigma=sigmas, device=device, seed=seed, per_image=True,
               save_outputs=save_outputs, overwrite=overwrite, limit=limit, self_ensemble=self_ensemble)
    for t, names in plan:
        options = {n: o for n, o in restorer_options.items() if n in names}
        with BenchmarkProgress(err, f"{t} on {dataset}") as step:
            result = run_benchmark(t, whole, names, data_dir, progress=step, restorer_options=options, **run)
        print_table(results_table(result))
        if save_outputs is not None:
            err.print(f"wrote the outputs under {save_outputs / t}", markup=False, highlight=False)
        failed = []
        for out, writer in outputs:
            target = _per_task(out, t, several)
            try:
                if writer is write_csv:
                    writer(result, target, overwrite=overwrite, per_image=per_image)
                else:
                    writer(result, target, overwrite=overwrite)
            except GspError as exc:  # the rows are computed: never lose them
                failed.append(exc)
                continue
            err.print(f"wrote {target}")
        if failed:
            import json

            typer.echo(json.dumps(result, indent=2))  # everything the reports would have held, on stdout
            for exc in failed[:-1]:
                err.print(f"error: {exc}", markup=False, highlight=False)
            raise GspError(f"{failed[-1].reason}; the results are printed on stdout", failed[-1].path)


def print_table(table: Any, file: Any = None) -> None:
    """Print a Rich table on stdout (or ``file``): on a terminal at its width; elsewhere (a pipe, a
    log, a file) at the table's own width, so no column is cut to ``s/ima…`` at Rich's default of
    80 columns."""
    from rich.console import Console

    console = Console(file=file)
    if not console.is_terminal:
        natural = Console(file=file, width=10_000).measure(table).maximum
        console = Console(file=file, width=max(80, natural))
    console.print(table)


class BenchmarkProgress:
    """Images done / total with the elapsed time and an ETA: a Rich bar on a terminal, one line per
    image otherwise (logs and pipes). Used as ``with BenchmarkProgress(console, title) as step``;
    ``step(done, total, name)`` is :func:`run_benchmark`'s progress callback."""

    def __init__(self, console: Any, title: str):
        self.console, self.title, self.bar, self.job, self.t0 = console, title, None, None, 0.0

    def __enter__(self) -> Any:
        import time

        self.t0 = time.perf_counter()
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            from ..core.heartbeat import eta_column

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("images"),
                                TimeElapsedColumn(), eta_column(), console=self.console, transient=True)
            self.bar.start()
            self.job = self.bar.add_task(self.title, total=None)
        return self.step

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()

    def step(self, done: int, total: int, name: str) -> None:
        import time

        if self.bar is not None:
            self.bar.update(self.job, completed=done, total=total,
                            description=f"{self.title}" + (f": {name}" if name else ""))
            return
        if done == 0:
            return
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / done * (total - done)
        self.console.print(f"{self.title}: {done}/{total} images ({name}), {elapsed:.0f} s elapsed, eta {eta:.0f} s",
                           markup=False, highlight=False)
