"""``gsprestore compare | explain | demo``: montages of methods side by side, pictures of what a
graph model uses on an image (:mod:`gsprestore.viz.drawing`, :mod:`gsprestore.viz.explain`, inputs
checked by :mod:`gsprestore.viz.inputs`), and the bundled chart demosaicked by the best method beside
the classical one (:func:`gsprestore.runtime.chart_demo.run_demo`). Nothing heavy is imported at module level."""

from typing import Annotated, Optional

import typer

from ..runtime.chart_demo import DEMO_OUTPUT
from ..viz.inputs import compare_default
from .shared_options import AnyDevice
from .command_table import command

ImageArg = Annotated[str, typer.Argument(help="PNG, TIFF, JPEG or WebP: the ground truth (RGB), or a 1-channel mosaic / "
                                         "the low-resolution input with --no-reference; or a camera RAW file (DNG, "
                                         "CR2, NEF, ...), whose sensor mosaic is the input (demosaic, no reference).",
                                         show_default=False)]
Task = Annotated[str, typer.Option("--task", "-t", help="demosaic or upscale2x.")]
Pattern = Annotated[str, typer.Option("--pattern", "-p", help="Bayer pattern: RGGB, BGGR, GRBG or GBRG.")]
Crop = Annotated[Optional[str], typer.Option("--crop", help="Window x,y,w,h in output pixels.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace an existing output.")]
NoReference = Annotated[bool, typer.Option("--no-reference", help="IMAGE is the observation itself, not a ground "
                                           "truth: the 1-channel mosaic (demosaic) or the low-resolution input "
                                           "(upscale2x); no scores.")]


def _note(message: str) -> None:
    typer.echo(f"note: {message}", err=True)


@command()
def compare(
    image: ImageArg,
    output: Annotated[str, typer.Option("--output", "-o", help="Montage PNG to write.")] = "compare.png",
    task: Task = "demosaic",
    methods: Annotated[Optional[str], typer.Option("--method", "-m", "--methods", help="Comma-separated methods (see "
                       "`gsprestore models`; METHOD+se: its self-ensemble); default: the simplest and the default "
                       "classical method and every shipped network that beats them, best first (today "
                       f"{','.join(compare_default('demosaic'))} for demosaic, "
                       f"{','.join(compare_default('upscale2x'))} for 2x).")]
    = None,
    crop: Crop = None,
    pattern: Pattern = "RGGB",
    no_reference: NoReference = False,
    weights: Annotated[Optional[list[str]], typer.Option("--weights", help="Weights for a learned method: PATH, "
                                                          "or METHOD=PATH (repeatable).")] = None,
    skip_unavailable: Annotated[bool, typer.Option("--skip-unavailable", help="Leave out methods that cannot run "
                                                   "(e.g. no weights) with a notice instead of failing.")] = False,
    device: AnyDevice = "auto",
    tile: Annotated[int, typer.Option("--tile", help="Tile size in input pixels (0 = automatic).")] = 0,
    overwrite: Overwrite = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the scores and window as JSON.")] = False,
) -> None:
    """Ground truth and each method's result side by side, zoomed into the hardest window, with
    PSNR/SSIM and per-method error maps on one colour scale.

    Example: gsprestore compare photo.png --task demosaic --methods bilinear,menon,igtv -o compare.png
    """
    import json

    from ..methods.registry import check_task, method_spec
    from ..methods.self_ensemble import split_label
    from ..runtime.progress import working
    from ..runtime.tiling import check_tiling
    from ..viz.drawing import compare as run_compare
    from ..viz.drawing import save_png
    from ..viz.explain import parse_box
    from ..viz.inputs import check_montage_output, read_input, weights_map

    check_task(task)
    names = [m.strip().lower() for m in (methods or ",".join(compare_default(task))).split(",") if m.strip()]
    bases = list(dict.fromkeys(split_label(m)[0] for m in names))  # ugtv and ugtv+se share their weights
    for m in bases:
        method_spec(m, task)
    box = parse_box(crop)
    check_tiling(tile, None, tile_name="--tile", strict=True)
    check_montage_output(output, image, overwrite)
    array, pattern, has_reference = read_input(image, task, pattern, no_reference, _note)
    with working(f"compare: running {', '.join(names)} on {image}..."):
        montage, info = run_compare(array, task, names, pattern=pattern, reference=has_reference, crop=box,
                                    weights=weights_map(weights, bases), skip_unavailable=skip_unavailable,
                                    notice=_note, device=device, tile=tile)
    path = save_png(montage, output, overwrite=overwrite)
    if json_out:
        typer.echo(json.dumps(dict(info, output=str(path), input=str(image)), indent=2))
        return
    for m, sc in info["scores"].items():
        typer.echo(f"{m:>18}  PSNR {sc['psnr']:.2f} dB" + (f"  SSIM {sc['ssim']:.4f}" if "ssim" in sc else
                                                             "  (no SSIM: the image is under 11x11)"))
    typer.echo(f"wrote {path} (window x,y,w,h = {','.join(map(str, info['window']))})")


@command()
def explain(
    image: ImageArg,
    output: Annotated[str, typer.Option("--output", "-o", help="Folder for the PNGs and index.md.")] = "explain",
    method: Annotated[str, typer.Option("--method", "-m", help="igtv, iglr, ugtv or uglr.")] = "ugtv",
    task: Task = "demosaic",
    pattern: Pattern = "RGGB",
    crop: Annotated[Optional[str], typer.Option("--crop", help="Region x,y,w,h (default: a centred 128x128; "
                                                "keep it small, every head is drawn).")] = None,
    pixel: Annotated[Optional[str], typer.Option("--pixel", help="Pixel x,y (image coordinates, inside the crop) "
                                                 "whose 5x5 attention is shown (default: crop centre).")] = None,
    weights: Annotated[Optional[str], typer.Option("--weights", help="Weights file for uglr/ugtv.")] = None,
    no_reference: NoReference = False,
    overwrite: Overwrite = False,
) -> None:
    """Pictures of what a graph model uses on IMAGE: per block and head the edge weights to the
    four nearest neighbours, the 5x5 attention of one pixel, the metric matrix M, and the solver
    residuals per iteration, tied together by index.md.

    Example: gsprestore explain chart.png --method igtv -o explain/
    """
    from ..methods.registry import check_task
    from ..runtime.progress import working
    from ..viz.explain import explain as run_explain
    from ..viz.explain import parse_box, parse_point, write_explanation
    from ..viz.inputs import check_explain_folder, read_input

    check_task(task)
    box, point = parse_box(crop), parse_point(pixel)
    out = check_explain_folder(output, image, overwrite)
    array, pattern, has_reference = read_input(image, task, pattern, no_reference, _note)
    with working(f"explain: running {method} on {image} and drawing its graphs..."):
        ex = run_explain(array, method, task, pattern=pattern, crop=box, pixel=point, weights=weights,
                         reference=has_reference)
        files = write_explanation(ex, out, overwrite=overwrite)
    typer.echo(f"wrote {len(files)} files to {out} (see {out / 'index.md'})")


@command("demo")
def demo_cmd(
    output: Annotated[str, typer.Option("--output", "-o", help="Where to write the demosaicked chart.")] = DEMO_OUTPUT,
    method: Annotated[Optional[str], typer.Option("--method", "-m", help="Method name (see `gsprestore models`); "
                                                  "default: the best by recorded quality.")] = None,
    pattern: Pattern = "RGGB",
    device: AnyDevice = "auto",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the output even if it is not an earlier "
                                            "demo output.")] = False,
) -> None:
    """Demosaic the bundled test chart's mosaic with the best method by recorded quality (a learned
    model when its weights beat the classical methods), write the PNG and print its PSNR and time
    beside the classical method's on the same mosaic.

    --method picks another; menon (with a note) when the learned weights are not available.
    """
    from ..runtime.chart_demo import run_demo
    from ..imageio.sample_chart import chart_path

    d = run_demo(output, method, pattern, device=device, overwrite=overwrite)
    typer.echo(f"demosaicked the bundled {d.width}x{d.height} test chart ({chart_path().name}, Bayer {d.pattern}) "
               f"with {d.method} on {d.device}: PSNR {d.score:.2f} dB (8-bit output vs chart) in {d.seconds:.1f} s "
               f"-> {d.written}")
    reference = d.reference()  # the classical reference on the same mosaic, so the figure can be read
    if reference is not None:
        name, score, seconds = reference
        typer.echo(f"for reference, {name} on the same mosaic: PSNR {score:.2f} dB in {seconds:.1f} s "
                   f"({d.score - score:+.2f} dB for {d.method})")
