"""``gsprestore compare | explain | demo``: montages of methods side by side, pictures of what a
graph model uses on an image (library: :mod:`gsprestore.viz.drawing`, :mod:`gsprestore.viz.explain`),
and the bundled chart demosaicked by the best method beside the classical one. Nothing heavy is
imported at module level."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from ..physics.tasks import is_mosaic
from .registry import command

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


def _working(text: str):
    """Feedback on stderr while ``text`` runs: a spinner on a terminal; otherwise, once it has run
    :func:`gsprestore.core.heartbeat.progress_interval` seconds (30), the text with the elapsed time
    every such interval, so a log file or a pipe shows that a minutes-long ``explain`` or
    ``compare`` is still going (a quick one prints nothing)."""
    from rich.console import Console

    from ..core.heartbeat import Heartbeat, clock, progress_interval

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    if console.is_terminal:
        return console.status(text, spinner="dots")
    return Heartbeat(progress_interval(), lambda t: console.print(f"{text} ({clock(t)} elapsed)", markup=False))


def _read_input(image: str, task: str, pattern: str, no_reference: bool, notice) -> tuple:
    """``(float (H, W, C) array, Bayer pattern, reference?)`` of IMAGE. A camera RAW file (by its
    suffix, as ``demosaic`` takes it) is its white-balanced sensor mosaic in stored order, with the
    file's own Bayer pattern: an observation, never a ground truth, and for ``--task demosaic`` only."""
    from ..imageio.camera_raw import balanced_mosaic, is_raw_name, read_raw
    from ..core.errors import GspError
    from ..imageio.images import read_image

    if not is_raw_name(image):
        return read_image(image).array, pattern, not no_reference
    if not is_mosaic(task):
        raise GspError("a camera RAW file is a sensor mosaic: use --task demosaic (or develop it with `gsprestore "
                       "demosaic` first)", image)
    frame = read_raw(image)
    if pattern.upper() != frame.pattern and pattern.upper() != "RGGB":  # RGGB is the option's default
        notice(f"{image}: --pattern {pattern} ignored, the file's colour filter is {frame.pattern}")
    if not no_reference:
        notice(f"{image}: a camera RAW file has no ground truth; its sensor mosaic (camera white balance, camera "
               "RGB, stored order) is the input and there are no scores")
    return balanced_mosaic(frame, "camera", notice)[:, :, None], frame.pattern, False


def _weights_map(values: list[str] | None, methods: list[str]) -> dict[str, str]:
    """``--weights PATH`` (one learned method) or ``--weights METHOD=PATH`` (repeatable)."""
    from ..core.errors import UsageError
    from ..methods.registry import METHODS

    out: dict[str, str] = {}
    learned = [m for m in methods if METHODS[m].kind == "learned"]
    for v in values or []:
        if "=" in v and v.split("=", 1)[0].lower() in METHODS:
            name, path = v.split("=", 1)
            out[name.lower()] = path
        elif len(learned) == 1:
            out[learned[0]] = v
        else:
            raise UsageError("with several learned methods, give --weights METHOD=PATH for each")
    return out


def _compare_default(task: str) -> list[str]:
    """What ``compare`` shows by default: the task's first classical method in the registry (the
    simplest), its classical default, and the shipped networks that beat the best classical method
    on both sets, best first (:func:`gsprestore.methods.defaults.best_by_quality`'s ranking, from the
    manifest; an ensemble of them is left out: its members are there)."""
    from ..methods.defaults import CLASSICAL_DEFAULT, best_by_quality
    from ..methods.registry import METHODS, methods_for

    classical = [m for m in methods_for(task) if METHODS[m].kind == "classical"]
    ranked = [m for m in best_by_quality(task).ranked if m in METHODS and METHODS[m].kind == "learned"]
    return list(dict.fromkeys(classical[:1] + [CLASSICAL_DEFAULT[task]] + ranked))


@command()
def compare(
    image: ImageArg,
    output: Annotated[str, typer.Option("--output", "-o", help="Montage PNG to write.")] = "compare.png",
    task: Task = "demosaic",
    methods: Annotated[Optional[str], typer.Option("--method", "-m", "--methods", help="Comma-separated methods (see "
                       "`gsprestore models`; METHOD+se: its self-ensemble); default: the simplest and the default "
                       "classical method and every shipped network that beats them, best first (today "
                       f"{','.join(_compare_default('demosaic'))} for demosaic, "
                       f"{','.join(_compare_default('upscale2x'))} for 2x).")]
    = None,
    crop: Crop = None,
    pattern: Pattern = "RGGB",
    no_reference: NoReference = False,
    weights: Annotated[Optional[list[str]], typer.Option("--weights", help="Weights for a learned method: PATH, "
                                                          "or METHOD=PATH (repeatable).")] = None,
    skip_unavailable: Annotated[bool, typer.Option("--skip-unavailable", help="Leave out methods that cannot run "
                                                   "(e.g. no weights) with a notice instead of failing.")] = False,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    tile: Annotated[int, typer.Option("--tile", help="Tile size in input pixels (0 = automatic).")] = 0,
    overwrite: Overwrite = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the scores and window as JSON.")] = False,
) -> None:
    """Ground truth and each method's result side by side, zoomed into the hardest window, with
    PSNR/SSIM and per-method error maps on one colour scale.

    Example: gsprestore compare photo.png --task demosaic --methods bilinear,menon,igtv -o compare.png
    """
    import json
    from pathlib import Path

    from ..core.errors import GspError
    from ..viz.explain import parse_box
    from ..imageio.images import check_writable
    from ..methods.registry import check_task, method_spec
    from ..methods.self_ensemble import split_label
    from ..viz.drawing import compare as run_compare
    from ..viz.drawing import save_png

    check_task(task)
    if methods is None:
        methods = ",".join(_compare_default(task))
    names = [m.strip().lower() for m in methods.split(",") if m.strip()]
    bases = list(dict.fromkeys(split_label(m)[0] for m in names))  # ugtv and ugtv+se share their weights
    for m in bases:
        method_spec(m, task)
    box = parse_box(crop)
    from ..runtime.tiling import check_tiling
    from ..core.errors import UsageError
    from ..core.fileid import same_file

    check_tiling(tile, None, tile_name="--tile", strict=True)
    if same_file(output, image):  # by identity: a link or a bind mount reaches the input too
        raise UsageError(f"-o {output} is the input {image}; choose another -o")
    if Path(output).exists() and not overwrite:
        raise GspError("output exists (pass --overwrite to replace it)", output)
    check_writable(output, overwrite=overwrite)
    notices: list[str] = []

    def notice(msg: str) -> None:
        typer.echo(f"note: {msg}", err=True)
        notices.append(msg)

    array, pattern, has_reference = _read_input(image, task, pattern, no_reference, notice)
    with _working(f"compare: running {', '.join(names)} on {image}..."):
        montage, info = run_compare(array, task, names, pattern=pattern, reference=has_reference, crop=box,
                                    weights=_weights_map(weights, bases), skip_unavailable=skip_unavailable,
                                    notice=notice, device=device, tile=tile)
    path = save_png(montage, output, overwrite=overwrite)
    if json_out:
        info = dict(info, output=str(path), input=str(image))
        typer.echo(json.dumps(info, indent=2))
    else:
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
    from pathlib import Path

    from ..core.errors import GspError
    from ..viz.explain import explain as run_explain
    from ..viz.explain import parse_box, parse_point, write_explanation
    from ..methods.registry import check_task

    check_task(task)
    box, point = parse_box(crop), parse_point(pixel)
    out = Path(output)
    from ..core.fileid import file_id

    if overwrite and file_id(out) is not None and file_id(out) == file_id(Path(image).parent):
        from ..core.errors import UsageError

        raise UsageError(f"-o {output} is the folder of the input {image}: --overwrite would replace files "
                         "there; choose another -o")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise GspError("output folder exists and is not empty (pass --overwrite to replace its files)", out)
    if out.exists() and not out.is_dir():
        raise GspError("output exists and is not a folder", out)
    array, pattern, has_reference = _read_input(image, task, pattern, no_reference,
                                                lambda msg: typer.echo(f"note: {msg}", err=True))
    with _working(f"explain: running {method} on {image} and drawing its graphs..."):
        ex = run_explain(array, method, task, pattern=pattern, crop=box, pixel=point, weights=weights,
                         reference=has_reference)
        files = write_explanation(ex, out, overwrite=overwrite)
    typer.echo(f"wrote {len(files)} files to {out} (see {out / 'index.md'})")


# ----------------------------------------------------------------------------------------------
# demo
# ----------------------------------------------------------------------------------------------

DEMO_OUTPUT = "gsprestore-demo.png"
DEMO_TAG = "gsprestore demo"


@command("demo")
def demo_cmd(
    output: Annotated[str, typer.Option("--output", "-o", help="Where to write the demosaicked chart.")] = DEMO_OUTPUT,
    method: Annotated[Optional[str], typer.Option("--method", "-m", help="Method name (see `gsprestore models`); "
                                                  "default: the best by recorded quality.")] = None,
    pattern: Pattern = "RGGB",
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the output even if it is not an earlier "
                                            "demo output.")] = False,
) -> None:
    """Demosaic the bundled test chart's mosaic with the best method by recorded quality (a learned
    model when its weights beat the classical methods), write the PNG and print its PSNR and time
    beside the classical method's on the same mosaic.

    --method picks another; menon (with a note) when the learned weights are not available.
    """
    import time
    from pathlib import Path

    from ..methods.defaults import best_by_quality
    from ..core.errors import GspError, WeightsError
    from ..methods.defaults import CLASSICAL_DEFAULT
    from ..methods.registry import get_restorer, method_spec
    from ..physics.sampling import check_pattern

    from ..runtime.tiling import resolve_device

    pattern = check_pattern(pattern)
    dev = resolve_device(device)
    try:
        name = method_spec(method, "demosaic").name if method else best_by_quality("demosaic").method
    except WeightsError as exc:  # an unreadable manifest: said, not silent
        name = CLASSICAL_DEFAULT["demosaic"]
        print(f"note: {exc}; using {name}", file=sys.stderr)
    out_path = Path(output)
    from ..imageio.sample_chart import chart_path
    from ..core.errors import UsageError
    from ..core.fileid import same_file

    if same_file(out_path, chart_path()):  # by identity, whatever the path
        raise UsageError(f"-o {output} is the bundled test chart itself; choose another -o")
    replace = overwrite
    if out_path.exists() and not overwrite:
        from ..imageio.images import read_image

        try:
            ours = read_image(out_path).meta.get("text", {}).get("Software") == DEMO_TAG
        except GspError:
            ours = False
        if not ours:
            raise GspError("exists and is not an earlier demo output (pass --overwrite or -o another file)", out_path)
        replace = True

    from ..imageio.sample_chart import chart_path
    from ..imageio.images import write_image
    from ..runtime.file_restore import chart_psnr, load_restorer, restore_chart

    restorer = load_restorer(name, "demosaic", method_given=bool(method),
                             fall_back=lambda message: print(f"note: {message}", file=sys.stderr))
    name = restorer.name
    t0 = time.perf_counter()
    out, score, raw = restore_chart(restorer, pattern, device=dev)
    took = time.perf_counter() - t0
    written = write_image(out_path, out.numpy(), 8, overwrite=replace,
                          text={"Software": DEMO_TAG, "Description": f"{name}, {pattern}"})
    h, w = out.shape[:2]
    typer.echo(f"demosaicked the bundled {w}x{h} test chart ({chart_path().name}, Bayer {pattern}) with {name} "
               f"on {dev}: PSNR {score:.2f} dB (8-bit output vs chart) in {took:.1f} s -> {written}")
    reference = CLASSICAL_DEFAULT["demosaic"]
    if name != reference:  # the classical reference on the same mosaic, so the figure can be read
        t0 = time.perf_counter()
        _, ref_score = chart_psnr(get_restorer(reference, "demosaic"), raw, pattern, device=dev)
        typer.echo(f"for reference, {reference} on the same mosaic: PSNR {ref_score:.2f} dB in "
                   f"{time.perf_counter() - t0:.1f} s ({score - ref_score:+.2f} dB for {name})")
