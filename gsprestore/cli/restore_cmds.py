"""``gsprestore mosaic | demosaic | upscale2x``: files and folders through the tiled engine.

Thin commands: the options become :class:`gsprestore.runtime.restore_batch.RestoreOptions` (how each
file is restored) and :class:`gsprestore.runtime.batch_run.BatchOptions` (where the files come from
and go), and :func:`gsprestore.runtime.restore_batch.restore_paths` / ``mosaic_paths`` do the rest
(:mod:`gsprestore.runtime.restore_batch`: checks, method, progress and summary on stderr); ``--json``
prints the summary record. Nothing heavy is imported at module level (``gsprestore --help`` stays
fast and torch-free).

Exit codes: 0 all done, 1 failure (the batch stops at the first one; files already written stay
valid), 2 usage, 3 some files failed under ``--continue-on-error``.
"""

import json
from typing import Annotated, Any

import typer

from ..methods.advice import best_help, fast_or_best, prior_method, self_ensemble_help
from .shared_options import (
    BayerPattern, BitDepth, Bright, ContinueOnError, Denoise, Device, Ext, Fast, Inputs, JsonOut, Method, MosaicExt, Output,
    OutputSpace, Overlap, Overwrite, Precision, Prior, Quality, Quiet, RawInputs, RawPattern, Recursive, Shard,
    SkipExisting, Tile, Weights, WhiteBalance, suffix_option,
)
from .command_table import command

MosaicSuffix, DemosaicSuffix, UpscaleSuffix = suffix_option("-mosaic"), suffix_option("-demosaic"), suffix_option("-2x")
BestDemosaic = Annotated[bool, typer.Option("--best", help=best_help("demosaic"))]
BestUpscale = Annotated[bool, typer.Option("--best", help=best_help("upscale2x"))]
SelfEnsemble = Annotated[bool, typer.Option("--self-ensemble", help=self_ensemble_help())]


def _finish(outcome: Any) -> None:
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


def _print_record(record: dict) -> None:
    typer.echo(json.dumps(record, indent=2))


@command("mosaic")
def mosaic_cmd(
    inputs: Inputs,
    output: Output = None,
    pattern: BayerPattern = "RGGB",
    suffix: MosaicSuffix = None,
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
    from ..runtime.batch_run import BatchOptions
    from ..runtime.restore_batch import mosaic_paths

    batch = BatchOptions(output=output, suffix=suffix, ext=ext, recursive=recursive, overwrite=overwrite,
                         skip_existing=skip_existing, continue_on_error=continue_on_error, quiet=quiet)
    _finish(mosaic_paths(inputs, pattern, bit_depth, batch, on_record=_print_record if as_json else None))


def _restore(task: str, inputs: list[str], batch: Any, as_json: bool, *, method: str | None, prior: str | None,
             fast: bool, best: bool, weights: str | None, **restore: Any) -> None:
    """``--prior`` and ``--fast`` / ``--best`` as the method or a preference, then the batch."""
    from ..runtime.restore_batch import RestoreOptions, restore_paths

    method = prior_method(prior, method)
    options = RestoreOptions(method=method, weights=weights, how=None if prior is None else f"--prior {prior.lower()}",
                             prefer=fast_or_best(fast, best, method, weights), **restore)
    _finish(restore_paths(task, inputs, options, batch, on_record=_print_record if as_json else None))


@command("demosaic")
def demosaic_cmd(
    inputs: RawInputs,
    output: Output = None,
    method: Method = None,
    prior: Prior = None,
    pattern: RawPattern = None,
    wb: WhiteBalance = "camera",
    output_space: OutputSpace = "srgb",
    bright: Bright = "auto",
    denoise: Denoise = "auto",
    weights: Weights = None,
    tile: Tile = 0,
    overlap: Overlap = None,
    device: Device = "auto",
    precision: Precision = "fp32",
    suffix: DemosaicSuffix = None,
    ext: Ext = "same",
    bit_depth: BitDepth = None,
    quality: Quality = None,
    recursive: Recursive = False,
    overwrite: Overwrite = False,
    skip_existing: SkipExisting = False,
    continue_on_error: ContinueOnError = False,
    quiet: Quiet = False,
    as_json: JsonOut = False,
    fast: Fast = False,
    best: BestDemosaic = False,
    self_ensemble: SelfEnsemble = False,
    shard: Shard = None,
) -> None:
    """Demosaic single-channel Bayer mosaics or camera RAW files (files, folders, globs) to RGB.

    A camera RAW file (DNG, CR2, NEF, ARW, RAF, ... read by LibRaw) is developed: its own Bayer
    phase, black and white levels and visible area, white balance (--wb), the demosaicker,
    the camera-to-sRGB matrix LibRaw uses for the camera, brightness (--bright) and the sRGB curve
    (--output-space), its orientation; 16-bit PNG by default.

    Examples: gsprestore demosaic IMG_0042.dng ; gsprestore demosaic raw_bayer.png -o out.png --pattern RGGB
    """
    from ..runtime.batch_run import BatchOptions

    batch = BatchOptions(output=output, suffix=suffix, ext=ext, recursive=recursive, overwrite=overwrite,
                         skip_existing=skip_existing, continue_on_error=continue_on_error, quiet=quiet, shard=shard)
    _restore("demosaic", inputs, batch, as_json, method=method, prior=prior, fast=fast, best=best, weights=weights,
             pattern=pattern, wb=wb, output_space=output_space, bright=bright, denoise=denoise, tile=tile, overlap=overlap,
             device=device, precision=precision, bit_depth=bit_depth, quality=quality, self_ensemble=self_ensemble)


@command("upscale2x")
def upscale2x_cmd(
    inputs: Inputs,
    output: Output = None,
    method: Method = None,
    prior: Prior = None,
    weights: Weights = None,
    tile: Tile = 0,
    overlap: Overlap = None,
    device: Device = "auto",
    precision: Precision = "fp32",
    suffix: UpscaleSuffix = None,
    ext: Ext = "same",
    bit_depth: BitDepth = None,
    quality: Quality = None,
    recursive: Recursive = False,
    overwrite: Overwrite = False,
    skip_existing: SkipExisting = False,
    continue_on_error: ContinueOnError = False,
    quiet: Quiet = False,
    as_json: JsonOut = False,
    fast: Fast = False,
    best: BestUpscale = False,
    self_ensemble: SelfEnsemble = False,
    shard: Shard = None,
) -> None:
    """Upscale images 2x (input pixels kept on the even grid); alpha is upscaled by bicubic.

    Example: gsprestore upscale2x photos/ -o big/ --prior gtv
    """
    from ..runtime.batch_run import BatchOptions

    batch = BatchOptions(output=output, suffix=suffix, ext=ext, recursive=recursive, overwrite=overwrite,
                         skip_existing=skip_existing, continue_on_error=continue_on_error, quiet=quiet, shard=shard)
    _restore("upscale2x", inputs, batch, as_json, method=method, prior=prior, fast=fast, best=best, weights=weights,
             tile=tile, overlap=overlap, device=device, precision=precision, bit_depth=bit_depth, quality=quality,
             self_ensemble=self_ensemble)
