"""``gsprestore mosaic | demosaic | upscale2x | demo``: files and folders through the tiled engine.

Thin commands over :mod:`gsprestore.batch` (inputs, outputs, skip/overwrite, exit codes),
:mod:`gsprestore.engine` (tiles, devices, precision), :mod:`gsprestore.io` (PNG/TIFF/JPEG/WebP) and
:mod:`gsprestore.camera_raw` (camera RAW in for ``demosaic``, DNG out for ``mosaic``). Nothing
heavy is imported at module level (``gsprestore --help`` stays fast and torch-free).

Exit codes: 0 all done, 1 failure (the batch stops at the first one; files already written stay
valid), 2 usage, 3 some files failed under ``--continue-on-error``.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

from .registry import command

if TYPE_CHECKING:  # pragma: no cover
    from ..batch import Job, Result

# ----------------------------------------------------------------------------------------------
# Options shared by the commands
# ----------------------------------------------------------------------------------------------

Inputs = Annotated[list[str], typer.Argument(help="Image files, folders or globs (PNG, TIFF, JPEG or WebP).",
                                             show_default=False)]
RawInputs = Annotated[list[str], typer.Argument(help="Bayer mosaics (PNG or TIFF, single channel) or camera RAW "
                                                "files (DNG, CR2, NEF, ARW, RAF, ...): files, folders or globs.",
                                                show_default=False)]
Output = Annotated[Optional[str], typer.Option("--output", "-o", help="Output file (one input) or folder "
                                                "(mirrors the input tree). Default: next to each input.")]
Suffix = Annotated[Optional[str], typer.Option("--suffix", help="Added to output names (default: none with -o "
                                                "FOLDER, else -demosaic / -2x / -mosaic).")]
Ext = Annotated[str, typer.Option("--ext", help="Output format: png, tiff, jpg, webp or same (as the input; PNG for "
                                   "camera RAW inputs).")]
MosaicExt = Annotated[str, typer.Option("--ext", help="Output format: png, tiff, dng (a camera RAW file) or same.")]
Quality = Annotated[Optional[int], typer.Option("--quality", help="JPEG / WebP quality, 1-100 (default 95).")]
WhiteBalance = Annotated[str, typer.Option("--wb", help="Camera RAW only: white balance, camera (as shot), daylight "
                                           "or none.")]
OutputSpace = Annotated[str, typer.Option("--output-space", help="Camera RAW only: srgb (the camera-to-sRGB matrix "
                                          "and the sRGB curve), linear (linear sRGB) or camera (white-balanced "
                                          "camera RGB, linear).")]
BitDepth = Annotated[Optional[int], typer.Option("--bit-depth", help="8 or 16 (default: the input file's depth).")]
Recursive = Annotated[bool, typer.Option("--recursive", "-r", help="Descend into sub-folders of folder inputs.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace existing outputs (default: refuse).")]
SkipExisting = Annotated[bool, typer.Option("--skip-existing", help="Leave existing outputs alone and go on.")]
ContinueOnError = Annotated[bool, typer.Option("--continue-on-error", help="Do every good file even if some fail "
                                                "(exit code 3 if any failed).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress or notices on stderr (errors only).")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print a JSON summary of every file on stdout.")]
Pattern = Annotated[str, typer.Option("--pattern", "-p", help="Bayer pattern, named by its top-left 2x2 block: "
                                       "RGGB, BGGR, GRBG or GBRG.")]
RawPattern = Annotated[Optional[str], typer.Option("--pattern", "-p", help="Bayer pattern of PNG/TIFF mosaics, named by "
                                                   "its top-left 2x2 block: RGGB (default), BGGR, GRBG or GBRG. "
                                                   "Camera RAW files carry their own.")]
Method = Annotated[Optional[str], typer.Option("--method", "-m", help="Method name (see `gsprestore models`); "
                                                "default: the best one by the recorded scores (`gsprestore models` "
                                                "says which and why).")]
Weights = Annotated[Optional[str], typer.Option("--weights", help="Weights file for a learned method "
                                                 "(default: the shipped ones).")]
Tile = Annotated[int, typer.Option("--tile", help="Tile size in input pixels; 0 = choose from available memory.")]
Overlap = Annotated[Optional[int], typer.Option("--overlap", help="Context pixels around each tile "
                                                 "(default: max(32, the method's halo)).")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N (a missing device is an error).")]
Precision = Annotated[str, typer.Option("--precision", help="fp32, or bf16 / fp16 on CUDA.")]


class Reporter:
    """Progress and messages on stderr: a Rich progress display (files, and tiles of the current
    image) on a terminal, one line per file otherwise; ``quiet`` keeps only errors."""

    def __init__(self, quiet: bool, total: int, verb: str):
        from rich.console import Console

        self.quiet = quiet
        self.total = total
        self.verb = verb
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.progress = None
        self._tiles_task = None
        if not quiet and self.console.is_terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                     console=self.console, transient=True)
            self._files_task = self.progress.add_task("files", total=total)

    def __enter__(self) -> "Reporter":
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.stop()

    def notice(self, message: str) -> None:
        if not self.quiet:
            self.console.print(f"note: {message}", markup=False)

    def error(self, message: str) -> None:
        self.console.print(f"error: {message}", markup=False)

    def start(self, k: int, job: "Job") -> None:
        if self.progress is not None:
            self.progress.update(self._files_task, description=f"{self.verb} {job.input.name}")

    def tiles(self, done: int, total: int) -> None:
        if self.progress is None or total <= 1:
            return
        if self._tiles_task is None:
            self._tiles_task = self.progress.add_task("  tiles", total=total)
        self.progress.update(self._tiles_task, completed=done, total=total)

    def result(self, k: int, res: "Result") -> None:
        if self.progress is not None:
            self.progress.advance(self._files_task)
            if self._tiles_task is not None:
                self.progress.remove_task(self._tiles_task)
                self._tiles_task = None
        if res.status == "failed":
            self.error(res.error or "failed")
        elif not self.quiet and self.progress is None:
            what = f"skipped ({res.info.get('reason', 'exists')})" if res.status == "skipped" else f"{res.seconds:.2f} s"
            self.console.print(f"[{k + 1}/{self.total}] {res.input} -> {res.output}  {what}", markup=False)


def _check_common(ext: str, bit_depth: int | None, overwrite: bool, skip_existing: bool,
                  quality: int | None = None, *, dng: bool = False) -> None:
    from ..errors import UsageError

    formats = ("png", "tiff", "tif", "jpg", "jpeg", "webp", "same") + (("dng",) if dng else ())
    e = ext.lower().lstrip(".")
    if e not in formats:
        names = "png, tiff, jpg, webp" + (", dng" if dng else "") + " or same"
        raise UsageError(f"unknown --ext {ext!r}; expected {names}")
    if bit_depth is not None and bit_depth not in (8, 16):
        raise UsageError(f"--bit-depth must be 8 or 16, got {bit_depth}")
    if bit_depth == 16 and e in ("jpg", "jpeg", "webp"):
        raise UsageError(f"--ext {e} is 8-bit only; use --ext png or tiff for 16 bits")
    if quality is not None and not 1 <= quality <= 100:
        raise UsageError(f"--quality must be 1-100, got {quality}")
    if overwrite and skip_existing:
        raise UsageError("--overwrite and --skip-existing exclude each other")


def _run_batch(
    *,
    command: str,
    verb: str,
    inputs: list[str],
    output: str | None,
    suffix: str | None,
    default_suffix: str,
    ext: str,
    recursive: bool,
    overwrite: bool,
    skip_existing: bool,
    continue_on_error: bool,
    quiet: bool,
    as_json: bool,
    setup: Callable[["Reporter"], Callable[["Job", int], dict | None]],
    meta: dict,
    extra_suffixes: tuple[str, ...] = (),
) -> None:
    """Discover inputs, plan outputs, build the worker (``setup``, e.g. loading a model), run."""
    from ..batch import Result, discover, drop_own_outputs, plan_jobs, run_jobs
    from ..errors import GspError
    from ..io import TOOL_TAG

    found = discover(inputs, recursive=recursive, output=output, tag=TOOL_TAG.format(command=command),
                     extra_suffixes=extra_suffixes)
    failures = [Result(m, None, "failed", error=f"{m}: no such file or folder") for m in found.missing]
    if not found.sources:
        if len(found.missing) == 1:
            raise GspError("no such file or folder", found.missing[0])
        if found.missing:
            raise GspError(f"no such files or folders: {', '.join(found.missing)}")
        kinds = "PNG, TIFF, JPEG or WebP" + (" or camera RAW" if extra_suffixes else "")
        raise GspError(f"no {kinds} files found in {', '.join(inputs)}")
    jobs = plan_jobs(found.sources, output, suffix=default_suffix if (suffix is None and output is None)
                     else (suffix or ""), ext=ext)
    jobs, own = drop_own_outputs(jobs)
    reporter = Reporter(quiet, len(jobs), verb)
    own_files = found.skipped_own + [str(j.input) for j in own]
    for what, items in (("hidden", found.skipped_hidden), ("non-image", found.skipped_other),
                        (f"`gsprestore {command}` output", own_files)):
        if items:
            examples = ", ".join(items[:3]) + (", ..." if len(items) > 3 else "")
            reporter.notice(f"skipped {len(items)} {what} file(s): {examples}")
    for link in found.skipped_links:
        reporter.notice(f"skipped {link}: a folder already visited (each real folder is read once)")
    if found.skipped_folders:
        reporter.notice(f"skipped {len(found.skipped_folders)} sub-folder(s) (use --recursive): "
                        + ", ".join(found.skipped_folders[:3]) + (", ..." if len(found.skipped_folders) > 3 else ""))
    for f in failures:
        reporter.error(f.error or "")
    if failures and not continue_on_error:
        summary = run_jobs([], lambda j, k: None, failures=failures)
    else:
        worker = setup(reporter)
        with reporter:
            summary = run_jobs(jobs, worker, skip_existing=skip_existing, overwrite=overwrite,
                               continue_on_error=continue_on_error, on_start=reporter.start,
                               on_result=reporter.result, failures=failures)
    if as_json:
        typer.echo(json.dumps({"command": command, **meta, **summary.to_dict()}, indent=2))
    if not quiet:
        reporter.console.print(
            f"{summary.count('written')} written{_where(summary)}, {summary.count('skipped')} skipped, "
            f"{summary.count('failed')} failed ({summary.seconds:.1f} s)"
            + ("; stopped at the first failure (use --continue-on-error to go on)"
               if summary.stopped and len(summary.results) < len(jobs) + len(failures) else ""),
            markup=False,
        )
    if summary.exit_code:
        raise typer.Exit(summary.exit_code)


def _page_notice(reporter: "Reporter", job: "Job", img: Any) -> None:
    pages = img.meta.get("pages", 1)
    if pages > 1:
        reporter.notice(f"{job.input}: multi-page TIFF ({pages} pages); only page one is read")


def _where(summary: Any) -> str:
    """`` to FILE`` / `` to FOLDER/`` / `` next to their inputs``: where the written outputs went."""
    import os
    from pathlib import Path

    outs = [Path(r.output) for r in summary.results if r.status == "written" and r.output]
    if not outs:
        return ""
    if len(outs) == 1:
        return f" to {outs[0]}"
    if all(Path(r.output).parent == Path(r.input).parent for r in summary.results if r.status == "written"):
        return f" next to their inputs (e.g. {outs[0]})"
    try:
        return f" to {os.path.join(os.path.commonpath([str(o.parent) for o in outs]), '')}"
    except ValueError:  # different drives
        return f" (e.g. {outs[0]})"


def _rgb_icc(icc: bytes | None) -> bytes | None:
    """An ICC profile only if it describes RGB data (a gray profile cannot go on an RGB image)."""
    return icc if icc and len(icc) >= 20 and icc[16:20] == b"RGB " else None


def _tensor(array: Any) -> Any:
    import torch

    return torch.from_numpy(array).permute(2, 0, 1)


# ----------------------------------------------------------------------------------------------
# mosaic
# ----------------------------------------------------------------------------------------------


@command("mosaic")
def mosaic_cmd(
    inputs: Inputs,
    output: Output = None,
    pattern: Pattern = "RGGB",
    suffix: Suffix = None,
    ext: MosaicExt = "same",
    bit_depth: BitDepth = None,
    recursive: Recursive = False,
    overwrite: Overwrite = False,
    skip_existing: SkipExisting = False,
    continue_on_error: ContinueOnError = False,
    quiet: Quiet = False,
    as_json: JsonOut = False,
) -> None:
    """Make the single-channel Bayer mosaic of RGB images (same bit depth), to test demosaicking.
    A .dng output is a camera RAW file (the sRGB image linearised, 14-bit, black level 512) that
    `gsprestore demosaic` and any raw developer open.

    Example: gsprestore mosaic photo.png -o raw_bayer.png --pattern RGGB
    """
    from ..sampling import check_pattern

    pattern = check_pattern(pattern)
    _check_common(ext, bit_depth, overwrite, skip_existing, dng=True)

    def setup(reporter: Reporter) -> Callable[["Job", int], dict]:
        from .. import sampling
        from ..errors import GspError
        from ..io import TOOL_TAG, apply_orientation, read_image, write_image

        def work(job: "Job", k: int) -> dict:
            img = read_image(job.input)
            _page_notice(reporter, job, img)
            if img.channels != 3:
                raise GspError(f"has {img.channels} colour channel(s); mosaic needs an RGB image", job.input)
            if img.alpha is not None:
                reporter.notice(f"{job.input}: alpha channel not kept in the mosaic")
            # the mosaic of the upright picture: its sensor order is the display order
            upright = apply_orientation(img.array, img.meta.get("orientation", 1))
            if job.output.suffix.lower() == ".dng":
                from ..camera_raw import mosaic_for_dng, srgb_decode, write_dng

                write_dng(job.output, mosaic_for_dng(srgb_decode(upright), pattern), pattern, overwrite=overwrite)
                return {"width": upright.shape[1], "height": upright.shape[0], "bit_depth": 14, "pattern": pattern}
            raw = sampling.mosaic(_tensor(upright), pattern)[0].numpy()
            depth = bit_depth or img.bit_depth
            write_image(job.output, raw, depth, overwrite=overwrite, software=TOOL_TAG.format(command="mosaic"))
            return {"width": img.width, "height": img.height, "bit_depth": min(depth, 16) if
                    job.output.suffix.lower() == ".png" else depth, "pattern": pattern}

        return work

    _run_batch(command="mosaic", verb="mosaic", inputs=inputs, output=output, suffix=suffix,
               default_suffix="-mosaic", ext=ext, recursive=recursive, overwrite=overwrite,
               skip_existing=skip_existing, continue_on_error=continue_on_error, quiet=quiet, as_json=as_json,
               setup=setup, meta={"pattern": pattern})


# ----------------------------------------------------------------------------------------------
# demosaic / upscale2x
# ----------------------------------------------------------------------------------------------


def _restore_batch(
    task: str,
    *,
    inputs: list[str],
    output: str | None,
    method: str,
    pattern: str,
    weights: str | None,
    tile: int,
    overlap: int | None,
    device: str,
    precision: str,
    suffix: str | None,
    ext: str,
    bit_depth: int | None,
    recursive: bool,
    overwrite: bool,
    skip_existing: bool,
    continue_on_error: bool,
    quiet: bool,
    as_json: bool,
    method_given: bool = True,
    quality: int | None = None,
    wb: str = "camera",
    output_space: str = "srgb",
    pattern_given: bool = False,
) -> None:
    from ..camera_raw import OUTPUT_SPACES, RAW_SUFFIXES, WHITE_BALANCES, check_choice
    from ..engine import MIN_MANUAL_TILE, check_precision, resolve_device
    from ..errors import UsageError
    from ..restorers import method_spec

    # argument errors first (exit 2), then the environment (device), before touching files
    _check_common(ext, bit_depth, overwrite, skip_existing, quality)
    wb = check_choice(wb, WHITE_BALANCES, "--wb")
    output_space = check_choice(output_space, OUTPUT_SPACES, "--output-space")
    if output is not None and output.lower().endswith(".dng"):
        raise UsageError(f"-o {output}: {task} writes images (PNG, TIFF, JPEG, WebP); only `gsprestore mosaic` "
                         "writes DNG")
    spec = method_spec(method, task)
    if tile < 0 or 0 < tile < MIN_MANUAL_TILE:
        raise UsageError(f"--tile must be 0 (automatic) or at least {MIN_MANUAL_TILE}, got {tile}")
    if overlap is not None and overlap < 0:
        raise UsageError(f"--overlap must be >= 0, got {overlap}")
    if weights is not None and spec.kind != "learned":
        raise UsageError(f"--weights applies to learned methods only, not {spec.name}")
    dev = resolve_device(device)
    check_precision(precision, dev)

    def setup(reporter: Reporter) -> Callable[["Job", int], dict]:
        from ..engine import restore
        from ..errors import GspError
        from ..io import TOOL_TAG, apply_orientation, read_image, write_image
        from ..restorers import get_restorer

        from ..errors import WeightsError

        options = {"weights": weights} if weights is not None else {}
        try:
            restorer = get_restorer(spec.name, task, **options)
        except WeightsError as exc:
            if method_given:
                raise
            fallback = "menon" if task == "demosaic" else "bicubic"
            raise WeightsError(f"{exc.reason} (or choose another method, e.g. --method {fallback})", exc.path) from None
        alpha_restorer = get_restorer("bicubic", "upscale2x") if task == "upscale2x" else None
        run = dict(tile=tile, overlap=overlap, device=dev, precision=precision, notice=reporter.notice)

        def work_raw(job: "Job") -> dict:
            import torch

            from ..camera_raw import develop, read_raw

            frame = read_raw(job.input)
            if pattern_given and pattern != frame.pattern:
                reporter.notice(f"{job.input}: --pattern {pattern} ignored, the file's colour filter is {frame.pattern}")

            def demosaic(mosaic: Any, bayer: str) -> Any:
                return restore(restorer, torch.from_numpy(mosaic)[None], bayer, progress=reporter.tiles, **run).numpy()

            out = develop(frame, demosaic, wb=wb, output_space=output_space,
                          notice=lambda message: reporter.notice(f"{job.input}: {message}"))
            depth = bit_depth or 16
            written = write_image(job.output, out, depth, overwrite=overwrite, quality=quality,
                                  software=TOOL_TAG.format(command=task))
            return {"width": out.shape[1], "height": out.shape[0], "bit_depth": _depth(written, depth),
                    "pattern": frame.pattern, "wb": wb, "output_space": output_space}

        def work(job: "Job", k: int) -> dict:
            if task == "demosaic" and job.input.suffix.lower() in RAW_SUFFIXES:
                return work_raw(job)
            img = read_image(job.input)
            _page_notice(reporter, job, img)
            if task == "demosaic" and img.channels != 1:
                raise GspError(f"has {img.channels} colour channels but demosaic needs a single-channel Bayer "
                               "mosaic (use `gsprestore mosaic` first or give a single-channel mosaic)", job.input)
            if task == "demosaic" and (img.width % 2 or img.height % 2):
                reporter.notice(f"{job.input}: odd size {img.width}x{img.height}, mirrored by one pixel to even "
                                "and cropped back")
            out = restore(restorer, _tensor(img.array), pattern, progress=reporter.tiles, **run)
            alpha = img.alpha
            if alpha is not None and alpha_restorer is not None:
                alpha = restore(alpha_restorer, _tensor(alpha[:, :, None]), **run)[:, :, 0].numpy()
            depth = bit_depth or img.bit_depth
            icc = _rgb_icc(img.icc_profile) if task == "demosaic" else img.icc_profile
            # restored in stored (sensor) order; the file's Orientation is applied to the result
            orientation = img.meta.get("orientation", 1)
            result = apply_orientation(out.numpy(), orientation)
            if alpha is not None:
                alpha = apply_orientation(alpha, orientation)
            written = write_image(job.output, result, depth, alpha=alpha, icc_profile=icc, overwrite=overwrite,
                                  software=TOOL_TAG.format(command=task), quality=quality)
            info = {"width": result.shape[1], "height": result.shape[0], "bit_depth": _depth(written, depth)}
            return info | ({"orientation": orientation} if orientation != 1 else {})

        return work

    _run_batch(command=task, verb=task, inputs=inputs, output=output, suffix=suffix,
               default_suffix="-demosaic" if task == "demosaic" else "-2x", ext=ext, recursive=recursive,
               overwrite=overwrite, skip_existing=skip_existing, continue_on_error=continue_on_error, quiet=quiet,
               as_json=as_json, setup=setup, extra_suffixes=RAW_SUFFIXES if task == "demosaic" else (),
               meta={"method": spec.name, "task": task, "device": str(dev), "precision": precision, "tile": tile,
                     **({"pattern": pattern} if task == "demosaic" else {})})


def _chosen_method(method: str | None, weights: str | None, task: str) -> str:
    """``--method``, else the method of the ``--weights`` file, else the task's default."""
    from ..restorers import default_method
    from ..weights import file_method

    if method is not None:
        return method
    return file_method(weights) if weights is not None else default_method(task)


def _depth(path: Any, depth: int) -> int:
    """The bit depth actually written (JPEG and WebP are 8-bit)."""
    return 8 if str(path).lower().endswith((".jpg", ".jpeg", ".webp")) else depth


@command("demosaic")
def demosaic_cmd(
    inputs: RawInputs,
    output: Output = None,
    method: Method = None,
    pattern: RawPattern = None,
    wb: WhiteBalance = "camera",
    output_space: OutputSpace = "srgb",
    weights: Weights = None,
    tile: Tile = 0,
    overlap: Overlap = None,
    device: Device = "auto",
    precision: Precision = "fp32",
    suffix: Suffix = None,
    ext: Ext = "same",
    bit_depth: BitDepth = None,
    quality: Quality = None,
    recursive: Recursive = False,
    overwrite: Overwrite = False,
    skip_existing: SkipExisting = False,
    continue_on_error: ContinueOnError = False,
    quiet: Quiet = False,
    as_json: JsonOut = False,
) -> None:
    """Demosaic single-channel Bayer mosaics or camera RAW files (files, folders, globs) to RGB.

    A camera RAW file (DNG, CR2, NEF, ARW, RAF, ... read by LibRaw) is developed: its own Bayer
    phase, black and white levels and visible area, white balance (--wb), the demosaicker,
    the camera-to-sRGB matrix and curve (--output-space), its orientation; 16-bit PNG by default.

    Examples: gsprestore demosaic IMG_0042.dng ; gsprestore demosaic raw_bayer.png -o out.png --pattern RGGB
    """
    from ..sampling import check_pattern

    _restore_batch("demosaic", inputs=inputs, output=output, method=_chosen_method(method, weights, "demosaic"),
                   method_given=method is not None, pattern_given=pattern is not None,
                   pattern=check_pattern(pattern or "RGGB"), weights=weights, tile=tile, overlap=overlap,
                   device=device, precision=precision, suffix=suffix, ext=ext, bit_depth=bit_depth, recursive=recursive,
                   overwrite=overwrite, skip_existing=skip_existing, continue_on_error=continue_on_error,
                   quiet=quiet, as_json=as_json, quality=quality, wb=wb, output_space=output_space)


@command("upscale2x")
def upscale2x_cmd(
    inputs: Inputs,
    output: Output = None,
    method: Method = None,
    prior: Annotated[Optional[str], typer.Option("--prior", help="glr or gtv: shorthand for --method uglr / ugtv.")]
    = None,
    weights: Weights = None,
    tile: Tile = 0,
    overlap: Overlap = None,
    device: Device = "auto",
    precision: Precision = "fp32",
    suffix: Suffix = None,
    ext: Ext = "same",
    bit_depth: BitDepth = None,
    quality: Quality = None,
    recursive: Recursive = False,
    overwrite: Overwrite = False,
    skip_existing: SkipExisting = False,
    continue_on_error: ContinueOnError = False,
    quiet: Quiet = False,
    as_json: JsonOut = False,
) -> None:
    """Upscale images 2x (input pixels kept on the even grid); alpha is upscaled by bicubic.

    Example: gsprestore upscale2x photos/ -o big/ --prior gtv
    """
    from ..errors import UsageError

    if prior is not None:
        p = prior.lower()
        if p not in ("glr", "gtv"):
            raise UsageError(f"unknown --prior {prior!r}; expected glr or gtv")
        if method is not None and method.lower() != "u" + p:
            raise UsageError(f"--prior {p} means --method u{p}, but --method {method} was given")
        method = "u" + p
    _restore_batch("upscale2x", inputs=inputs, output=output, method=_chosen_method(method, weights, "upscale2x"),
                   method_given=method is not None,
                   pattern="RGGB", weights=weights, tile=tile, overlap=overlap, device=device,
                   precision=precision, suffix=suffix, ext=ext, bit_depth=bit_depth, recursive=recursive,
                   overwrite=overwrite, skip_existing=skip_existing, continue_on_error=continue_on_error,
                   quiet=quiet, as_json=as_json, quality=quality)


# ----------------------------------------------------------------------------------------------
# demo
# ----------------------------------------------------------------------------------------------

DEMO_OUTPUT = "gsprestore-demo.png"
DEMO_TAG = "gsprestore demo"
FALLBACK_METHOD = "menon"


@command("demo")
def demo_cmd(
    output: Annotated[str, typer.Option("--output", "-o", help="Where to write the demosaicked chart.")] = DEMO_OUTPUT,
    method: Method = None,
    pattern: Pattern = "RGGB",
    device: Device = "auto",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the output even if it is not an earlier "
                                            "demo output.")] = False,
) -> None:
    """Demosaic the bundled test chart's mosaic, write the PNG and print its PSNR.

    Uses the default method, or menon (with a note) when its weights are not available.
    """
    from pathlib import Path

    from ..errors import GspError, WeightsError
    from ..restorers import default_method, get_restorer, method_spec
    from ..sampling import check_pattern

    pattern = check_pattern(pattern)
    name = method_spec(method, "demosaic").name if method else default_method("demosaic")
    dev_name = device
    out_path = Path(output)
    replace = overwrite
    if out_path.exists() and not overwrite:
        from ..io import read_image

        try:
            ours = read_image(out_path).meta.get("text", {}).get("Software") == DEMO_TAG
        except GspError:
            ours = False
        if not ours:
            raise GspError("exists and is not an earlier demo output (pass --overwrite or -o another file)", out_path)
        replace = True

    import torch

    from ..chart import chart_path, load_chart
    from ..engine import resolve_device, restore
    from ..io import write_image
    from ..metrics import psnr, quantize
    from ..sampling import mosaic

    console_err = sys.stderr
    dev = resolve_device(dev_name)
    try:
        restorer = get_restorer(name, "demosaic")
    except WeightsError as exc:
        if method:  # asked for explicitly: no fallback
            raise
        print(f"note: {name} weights are not available ({exc.reason}); using {FALLBACK_METHOD} instead",
              file=console_err)
        name = FALLBACK_METHOD
        restorer = get_restorer(name, "demosaic")
    chart = load_chart()
    gt = torch.from_numpy(chart).permute(2, 0, 1)
    raw = mosaic(gt, pattern)
    out = restore(restorer, raw, pattern, device=dev)
    written = write_image(out_path, out.numpy(), 8, overwrite=replace,
                          text={"Software": DEMO_TAG, "Description": f"{name}, {pattern}"})
    score = float(psnr(quantize(out.permute(2, 0, 1)[None], 8), gt[None])[0])
    h, w = chart.shape[:2]
    typer.echo(f"demosaicked the bundled {w}x{h} test chart ({chart_path().name}, Bayer {pattern}) with {name} "
               f"on {dev}: PSNR {score:.2f} dB (8-bit output vs chart) -> {written}")
    if name != FALLBACK_METHOD:  # the classical reference on the same mosaic, so the figure can be read
        ref = restore(get_restorer(FALLBACK_METHOD, "demosaic"), raw, pattern, device=dev)
        ref_score = float(psnr(quantize(ref.permute(2, 0, 1)[None], 8), gt[None])[0])
        typer.echo(f"for reference, {FALLBACK_METHOD} on the same mosaic: PSNR {ref_score:.2f} dB")
