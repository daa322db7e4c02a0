"""One ``gsprestore benchmark`` run, settled and checked before its first image: the tasks (from
``--task``, else from the methods named), the data set (found, downloaded and verified with
``--download``, limited), the weights per method, every report and output path, and the time
estimate from recorded speeds (:func:`plan_benchmark`, a :class:`BenchmarkPlan`); then each task's
run (:func:`gsprestore.evaluation.benchmark.run_benchmark`), its results as a Rich table
(:func:`results_table`) and its reports (:meth:`BenchmarkPlan.write_reports`). No torch import at
module level."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..physics.tasks import score_space

#: An up-front estimate is printed when the run should take at least this long (seconds).
ESTIMATE_NOTE_SECONDS = 30.0


@dataclass
class BenchmarkOptions:
    """What ``gsprestore benchmark`` was asked (its options, by name; docs/protocol.md)."""

    task: str | None = None
    dataset: str | None = None
    data_dir: Path | None = None
    download: bool = False
    methods: str | None = None
    pattern: str = "RGGB"
    noise_sigma: str = "0"
    json_out: Path | None = None
    csv_out: Path | None = None
    md_out: Path | None = None
    weights: list[str] | None = None
    per_image: bool = False
    save_outputs: Path | None = None
    limit: int | None = None
    overwrite: bool = False
    device: str = "auto"
    seed: int = 0
    self_ensemble: bool = False


@dataclass
class BenchmarkPlan:
    """A checked run: ``tasks`` ``[(task, method names)]``, the data set (``whole``, and ``ds``
    limited), ``sigmas``, the ``restorer_options`` per method (``--weights``), the ``reports``
    ``[(path, writer)]`` and the ``estimates`` per task."""

    options: BenchmarkOptions
    tasks: list[tuple[str, list[str]]]
    dataset: str
    whole: Any
    ds: Any
    pattern: str
    sigmas: list[float]
    limit: int | None
    restorer_options: dict[str, dict[str, Any]]
    reports: list[tuple[Path, Callable[..., Any]]] = field(default_factory=list)
    estimates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def report_path(self, path: Path | None, task: str) -> Path | None:
        """The report path of ``task``: ``OUT`` itself for one task, ``OUT-<task>.ext`` for several."""
        if path is None or len(self.tasks) < 2:
            return path
        return path.with_name(f"{path.stem}-{task}{path.suffix}")

    def estimate_line(self) -> str | None:
        """The up-front line on how long the run takes, when that is at least
        :data:`ESTIMATE_NOTE_SECONDS`."""
        if sum(e["seconds"] for _t, e in self.estimates) < ESTIMATE_NOTE_SECONDS:
            return None
        return estimate_line(self.estimates, len(self.ds))

    def run(self, task: str, names: list[str], progress: Callable[[int, int, str], None] | None = None) -> dict:
        """The benchmark of ``names`` on ``task`` (:func:`gsprestore.evaluation.benchmark.run_benchmark`)."""
        from .benchmark import run_benchmark

        o = self.options
        options = {n: v for n, v in self.restorer_options.items() if n in names}
        return run_benchmark(task, self.whole, names, o.data_dir, progress=progress, restorer_options=options,
                             pattern=self.pattern, noise_sigma=self.sigmas, device=o.device, seed=o.seed,
                             per_image=True, save_outputs=o.save_outputs, overwrite=o.overwrite, limit=self.limit,
                             self_ensemble=o.self_ensemble)

    def write_reports(self, task: str, result: dict) -> list[tuple[Path, Exception | None]]:
        """Write ``result`` to every report of ``task``: ``[(path, None or the GspError it failed
        with)]`` (a failed report never loses the rows: the caller prints them)."""
        from ..core.errors import GspError
        from .benchmark import write_csv

        done: list[tuple[Path, Exception | None]] = []
        for out, writer in self.reports:
            target = self.report_path(out, task)
            try:
                if writer is write_csv:
                    writer(result, target, overwrite=self.options.overwrite, per_image=self.options.per_image)
                else:
                    writer(result, target, overwrite=self.options.overwrite)
            except GspError as exc:  # the rows are computed: never lose them
                done.append((target, exc))
                continue
            done.append((target, None))
        return done


def plan_benchmark(o: BenchmarkOptions) -> BenchmarkPlan:
    """Check ``o`` (usage errors first, exit 2, before any data is touched), then find the data
    set, check every path against it and estimate the time."""
    from .benchmark import (
        check_limit, check_output_paths, check_report_path, dataset_megapixels, estimate_seconds,
        limit_dataset, parse_methods, parse_sigmas, row_label, weights_record, write_csv,
        write_json, write_markdown,
    )
    from .datasets import find_dataset, get_spec
    from ..core.errors import UsageError
    from ..core.fileid import path_key
    from ..methods.self_ensemble import PASSES
    from ..physics.sampling import check_pattern
    from ..runtime.tiling import resolve_device

    tasks = plan_tasks(o.task, o.methods)
    dataset = o.dataset
    if dataset is None or dataset.lower() == "custom":
        dataset = "custom"
        if o.data_dir is None:
            raise UsageError("pass --dataset kodak|mcm|urban100, or --data-dir with a folder of images")
        if o.download:
            raise UsageError("--download needs a registered --dataset (kodak, mcm or urban100)")
    else:
        get_spec(dataset)
    tasks = [(t, parse_methods(t, m)) for t, m in tasks]
    pattern = check_pattern(o.pattern)
    sigmas = parse_sigmas(o.noise_sigma)
    limit = check_limit(o.limit)
    if not 0 <= o.seed < 2**63:
        raise UsageError(f"--seed must be 0 to 2**63 - 1, got {o.seed}")
    reports = [(p, w) for p, w in ((o.json_out, write_json), (o.csv_out, write_csv), (o.md_out, write_markdown))
               if p is not None]
    plan = BenchmarkPlan(o, tasks, dataset, None, None, pattern, sigmas, limit, {}, reports)
    targets = [plan.report_path(out, t) for out, _ in reports for t, _names in tasks]
    for target in targets:  # every report path is checked before the first image
        check_report_path(target, overwrite=o.overwrite)
    if len({path_key(t) for t in targets}) < len(targets):  # by identity: a link reaches the same file
        raise UsageError("--json, --csv and --markdown name the same file")
    plan.restorer_options = weights_options(o.weights or [], [n for _t, names in tasks for n in names])
    dev = resolve_device(o.device)
    # the data set once (downloaded and verified first with --download), limited, for every task
    plan.whole = find_dataset(dataset, o.data_dir, download_missing=o.download)
    plan.ds = limit_dataset(plan.whole, limit)
    images = {path_key(f) for f in plan.whole.files}
    for target in targets:  # a report never replaces an image of the data set (--overwrite or not)
        if path_key(target) in images:
            raise UsageError(f"{target} is an image of the data set; write the report elsewhere")
    if o.save_outputs is not None:  # every image path, before the first image
        for t, names in tasks:
            labels = [row_label(n, weights_record(n, t, plan.restorer_options.get(n, {})),
                                given=n in plan.restorer_options, self_ensemble=o.self_ensemble) for n in names]
            check_output_paths(o.save_outputs, t, labels, sigmas, plan.ds.files, overwrite=o.overwrite)
    megapixels, _unread = dataset_megapixels(plan.ds.files)
    plan.estimates = [(t, estimate_seconds(t, names, megapixels, dev.type, levels=len(sigmas), images=len(plan.ds),
                                           passes=PASSES if o.self_ensemble else 1))
                      for t, names in tasks]
    return plan


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


def weights_options(items: list[str], names: list[str]) -> dict[str, dict[str, Any]]:
    """``["ugtv=run/model.pt", ...]`` -> ``{"ugtv": {"weights": "run/model.pt"}}`` (usage errors exit 2;
    a file that is missing or cannot be read as weights, exit 1, before the first image). The
    ensemble, when benchmarked, takes its members' files: ``{"ensemble": {"weights": {"ugtv": ...}}}``."""
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


def results_table(result: dict[str, Any]) -> Any:
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
