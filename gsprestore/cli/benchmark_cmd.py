"""``gsprestore benchmark``: score methods on a data set under the paper's protocol.

Thin wrapper over :func:`gsprestore.benchmark.run_benchmark`; no torch import at module level."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from .app import app


def results_table(result: dict[str, Any]) -> "rich.table.Table":  # noqa: F821
    """A Rich table of the benchmark rows, titled with the protocol's essentials."""
    from rich.table import Table

    p = result["protocol"]
    space = "RGB" if p["task"] == "demosaic" else "Y (BT.601)"
    bits = [p["task"], f"{p['dataset']} ({p['images']} images)", space]
    if p["pattern"]:
        bits.append(p["pattern"])
    if p["noise"]["sigma"]:
        bits.append(f"noise sigma {p['noise']['sigma']:g}/255")
    bits.append(p["device"])
    table = Table(title=", ".join(bits), caption="PSNR (dB): 10 log10(1 / mean MSE) over the data set, float outputs "
                  "(the paper's). Mean PSNR (dB): mean of per-image PSNR, 8-bit outputs.")
    width = max([len("method")] + [len(r["method"]) for r in result["results"]])
    table.add_column("method", no_wrap=True, min_width=width)
    for col in ("PSNR", "mean PSNR", "SSIM", "s/image", "MP/s", "params"):
        table.add_column(col, justify="right")
    for r in result["results"]:
        table.add_row(
            r["method"],
            f"{r['psnr_dataset_mse']:.2f}",
            f"{r['psnr_mean']:.2f}",
            f"{r['ssim_mean']:.4f}",
            f"{r['seconds_per_image']:.3f}",
            f"{r['megapixels_per_second']:.2f}",
            f"{r['params']:,}",
        )
    return table


@app.command("benchmark")
def benchmark(
    task: Annotated[str, typer.Option("--task", help="demosaic or upscale2x.")],
    dataset: Annotated[str, typer.Option("--dataset", help="kodak, mcm or urban100.")],
    data_dir: Annotated[
        Optional[Path],
        typer.Option("--data-dir", help="The data-set folder or its parent (default: $GSPRESTORE_DATA_DIR, "
                     "then the user cache)."),
    ] = None,
    methods: Annotated[
        Optional[str],
        typer.Option("--methods", help="Comma-separated method names (default: every classical method of the task)."),
    ] = None,
    pattern: Annotated[str, typer.Option("--pattern", help="Bayer pattern: RGGB, BGGR, GRBG or GBRG.")] = "RGGB",
    noise_sigma: Annotated[
        float, typer.Option("--noise-sigma", help="Gaussian noise std (in 8-bit units, /255) added to the input.")
    ] = 0.0,
    json_out: Annotated[
        Optional[Path], typer.Option("--json", help="Also write the results and protocol to this JSON file.")
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --json file.")] = False,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:N or auto.")] = "cpu",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the input noise.")] = 0,
) -> None:
    """Score methods on a data set with the paper's protocol (PROTOCOL.md): both PSNRs, SSIM, speed."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..benchmark import parse_methods, run_benchmark, write_json
    from ..datasets import get_spec
    from ..errors import GspError
    from ..restorers import check_task
    from ..sampling import check_pattern

    # Argument errors first (exit 2), before any data is touched.
    check_task(task)
    get_spec(dataset)
    names = parse_methods(task, methods)
    pattern = check_pattern(pattern)
    if json_out is not None and json_out.exists() and not overwrite:
        raise GspError("output exists (pass --overwrite to replace it)", json_out)

    err = Console(stderr=True)
    run = dict(pattern=pattern, noise_sigma=noise_sigma, device=device, seed=seed)
    if not err.is_terminal:  # no progress bar in logs and pipes: stderr keeps only real messages
        result = run_benchmark(task, dataset, names, data_dir, **run)
    else:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err, transient=True) as bar:
            job = bar.add_task(f"{task} on {dataset}", total=None)

            def step(done: int, total: int, name: str) -> None:
                bar.update(job, completed=done, total=total, description=f"{task} on {dataset}: {name}")

            result = run_benchmark(task, dataset, names, data_dir, progress=step, **run)
    Console().print(results_table(result))
    if json_out is not None:
        write_json(result, json_out, overwrite=overwrite)
        err.print(f"wrote {json_out}")
