"""``gsprestore benchmark``: score methods on a data set under the paper's protocol.

Thin command: the options, checked and planned by :func:`gsprestore.evaluation.benchmark_run.plan_benchmark`
(data set, methods, weights, report paths, time estimate), each task run with progress on stderr,
its table on stdout and its reports written. No torch import at module level."""

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from .command_table import command


@command("benchmark")
def benchmark(
    ctx: typer.Context,
    task: Annotated[Optional[str], typer.Option("--task", help="demosaic or upscale2x (default: the tasks the --methods "
                    "do, else both; with both, report files get a -demosaic / -upscale2x suffix).")] = None,
    dataset: Annotated[Optional[str], typer.Option("--dataset", help="kodak, mcm, urban100, or custom (any folder of "
                       "PNG/TIFF/JPEG/WebP images given by --data-dir; the default when --dataset is omitted).")] = None,
    data_dir: Annotated[Optional[Path], typer.Option("--data-dir", help="The data-set folder or its parent (default: "
                        "$GSPRESTORE_DATA_DIR, then the user cache); for a custom data set, the folder of images.")]
    = None,
    download: Annotated[bool, typer.Option("--download", help="Download the data set (into --data-dir, else "
                        "$GSPRESTORE_DATA_DIR, else the user cache) from its public source, verifying every file's "
                        "SHA-256; files already there are kept.")] = False,
    methods: Annotated[Optional[str], typer.Option("--method", "-m", "--methods", help="Comma-separated method names "
                       "(default: every method of the task but the ensemble; learned ones without weights are listed "
                       "as skipped).")] = None,
    pattern: Annotated[str, typer.Option("--pattern", help="Bayer pattern: RGGB, BGGR, GRBG or GBRG.")] = "RGGB",
    noise_sigma: Annotated[str, typer.Option("--noise-sigma", help="Gaussian noise std (8-bit units, /255) added to the "
                           "input; a list such as 10,20,30,50 gives one row per method and level.")] = "0",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the results and protocol to this JSON "
                        "file.")] = None,
    csv_out: Annotated[Optional[Path], typer.Option("--csv", help="Also write the rows as CSV (protocol in # lines).")]
    = None,
    md_out: Annotated[Optional[Path], typer.Option("--markdown", help="Also write the protocol and a Markdown table.")]
    = None,
    weights: Annotated[Optional[list[str]], typer.Option("--weights", help="METHOD=PATH: score a learned method (uglr "
                       "/ ugtv) with this weights file instead of the shipped one (repeatable).")] = None,
    per_image: Annotated[bool, typer.Option("--per-image", help="Also one CSV row per method and image (the JSON always "
                         "has every image's scores in per_image).")] = False,
    save_outputs: Annotated[Optional[Path], typer.Option("--save-outputs", help="Write every method's output images into "
                            "this folder, as DIR/<task>/<method>/<image>.png (noisy runs: a sigma-<s> folder below the "
                            "method's), 8-bit PNG, what mean PSNR scores.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Score only the first N images of the (sorted) data "
                     "set.")] = None,
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
    import json

    from rich.console import Console

    from ..core.errors import GspError
    from ..evaluation.benchmark_run import BenchmarkOptions, plan_benchmark
    from ..evaluation.benchmark_run import results_table
    from ..runtime.progress import CountProgress

    plan = plan_benchmark(BenchmarkOptions(**ctx.params))  # argument errors first (exit 2), then the data
    err = Console(stderr=True)
    if (line := plan.estimate_line()) is not None:
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    for t, names in plan.tasks:
        with CountProgress(err, f"{t} on {plan.dataset}") as step:
            result = plan.run(t, names, progress=step)
        print_table(results_table(result))
        if save_outputs is not None:
            err.print(f"wrote the outputs under {save_outputs / t}", markup=False, highlight=False)
        failed = []
        for target, exc in plan.write_reports(t, result):
            if exc is None:
                err.print(f"wrote {target}")
            else:
                failed.append(exc)
        if failed:
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
