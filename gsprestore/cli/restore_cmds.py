"""``gsprestore mosaic | demosaic | upscale2x``: files and folders through the tiled engine.

Thin commands: they parse and check options, run :mod:`gsprestore.runtime.folders` (inputs, outputs,
skip/overwrite, exit codes) with the per-file work of :mod:`gsprestore.runtime.file_restore` (read,
orientation, alpha, ICC, checks, restore, write; camera RAW development), and print (``demo``:
:mod:`.visual_cmds`).
Nothing heavy is imported at module level (``gsprestore --help`` stays fast and torch-free).

Exit codes: 0 all done, 1 failure (the batch stops at the first one; files already written stay
valid), 2 usage, 3 some files failed under ``--continue-on-error``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

from ..physics.tasks import get_task, is_mosaic
from ..core.errors import one_line
from ..methods.self_ensemble import PASSES
from .batch_progress import Reporter
from .method_choice import best_help, fast_or_best, plan_job, self_ensemble_help
from .registry import command

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime.folders import Job

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


def _suffix(default: str) -> Any:
    """``--suffix`` of a command whose outputs are named NAME{default}.EXT by default."""
    return Annotated[Optional[str], typer.Option("--suffix", help=f"Added to output names (default: {default} "
                                                 "next to the input, none with -o FOLDER).")]


MosaicSuffix, DemosaicSuffix, UpscaleSuffix = _suffix("-mosaic"), _suffix("-demosaic"), _suffix("-2x")
Ext = Annotated[str, typer.Option("--ext", help="Output format: png, tiff, jpg, webp or same (as the input; PNG for "
                                   "camera RAW inputs).")]
MosaicExt = Annotated[str, typer.Option("--ext", help="Output format: png, tiff, dng (a camera RAW file) or same.")]
Quality = Annotated[Optional[int], typer.Option("--quality", help="JPEG / WebP quality, 1-100 (default 95).")]
WhiteBalance = Annotated[str, typer.Option("--wb", help="Camera RAW only: white balance, camera (as shot), daylight "
                                           "or none.")]
OutputSpace = Annotated[str, typer.Option("--output-space", help="Camera RAW only: srgb (the camera-to-sRGB matrix "
                                          "and the sRGB curve), linear (linear sRGB) or camera (white-balanced "
                                          "camera RGB, linear).")]
Bright = Annotated[str, typer.Option("--bright", help="Camera RAW only: auto (as LibRaw / dcraw by default: the "
                                     "brightest channel's 99th percentile to white), none (the sensor's clipping "
                                     "point is white) or a FACTOR on linear values. Highlights above white are "
                                     "clipped, as LibRaw's default highlight mode.")]
BitDepth = Annotated[Optional[int], typer.Option("--bit-depth", help="8 or 16 (default: the input file's depth).")]
Recursive = Annotated[bool, typer.Option("--recursive", "-r", help="Descend into sub-folders of folder inputs.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace existing outputs (default: refuse).")]
SkipExisting = Annotated[bool, typer.Option("--skip-existing", help="Leave existing outputs alone and go on.")]
ContinueOnError = Annotated[bool, typer.Option("--continue-on-error", help="Do every good file even if some fail "
                                                "(exit code 3 if any failed).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", "--no-progress", help="No progress or notices on stderr "
                                     "(errors only).")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print a JSON summary of every file on stdout.")]
Pattern = Annotated[str, typer.Option("--pattern", "-p", help="Bayer pattern, named by its top-left 2x2 block: "
                                       "RGGB, BGGR, GRBG or GBRG.")]
RawPattern = Annotated[Optional[str], typer.Option("--pattern", "-p", help="Bayer pattern of PNG/TIFF mosaics, named by "
                                                   "its top-left 2x2 block: RGGB (default), BGGR, GRBG or GBRG. "
                                                   "Camera RAW files carry their own.")]
Method = Annotated[Optional[str], typer.Option("--method", "-m", help="Method name (see `gsprestore models`); "
                                                "default: the best by recorded quality that is fast enough on this "
                                                "kind of device (`gsprestore models` says which and why).")]
Prior = Annotated[Optional[str], typer.Option("--prior", help="glr or gtv: the learned network of that prior, "
                                             "shorthand for --method uglr / ugtv.")]
Fast = Annotated[bool, typer.Option("--fast", help="Run the classical method (menon / bicubic; no learned network).")]
BestDemosaic = Annotated[bool, typer.Option("--best", help=best_help("demosaic"))]
BestUpscale = Annotated[bool, typer.Option("--best", help=best_help("upscale2x"))]
SelfEnsemble = Annotated[bool, typer.Option("--self-ensemble", help=self_ensemble_help())]
Weights = Annotated[Optional[str], typer.Option("--weights", help="Weights file for a learned method "
                                                 "(default: the shipped ones).")]
Tile = Annotated[int, typer.Option("--tile", help="Tile size in input pixels; 0 = choose from available memory.")]
Overlap = Annotated[Optional[int], typer.Option("--overlap", help="Context pixels around each tile "
                                                 "(default: max(32, the method's halo)).")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N (a missing device is an error).")]
Precision = Annotated[str, typer.Option("--precision", help="fp32, or bf16 / fp16 on CUDA.")]
Shard = Annotated[Optional[str], typer.Option("--shard", metavar="K/N", help="Do share K of N of the files "
                                              "(0 <= K < N, dealt round-robin after the sorted walk): one array "
                                              "job of a batch scheduler, e.g. --shard $SLURM_ARRAY_TASK_ID/8. "
                                              "Under torchrun the ranks share the files by themselves.")]


def _check_common(ext: str, bit_depth: int | None, overwrite: bool, skip_existing: bool,
                  quality: int | None = None, *, dng: bool = False) -> None:
    from ..core.errors import UsageError

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
    lossless: bool = False,
    shard: str | None = None,
    ranks: Any = None,
    method: str | None = None,
) -> None:
    """Discover inputs, plan outputs, build the worker (``setup``, e.g. loading a model), run.
    ``lossless``: an output that ``--ext same`` would make JPEG / WebP is written as PNG (a note
    says so). ``shard`` (``--shard K/N``) and the ranks of torchrun (``ranks``,
    :class:`gsprestore.runtime.distributed.Ranks`) each take their share of the planned jobs
    (:func:`gsprestore.runtime.folders.shard_jobs`); with several ranks, rank 0 alone shows progress and
    the summary of all of them, and every rank exits with the job's exit code (the highest).
    ``method``: what the per-file and summary lines name (``menon (the default)``); ``setup`` may
    read ``reporter.jobs`` (their time estimate) and add to ``reporter.closing``, lines printed
    after the summary."""
    from ..runtime import distributed as D
    from ..runtime.folders import Result, discover, drop_own_outputs, plan_jobs, run_jobs, shard_jobs
    from ..core.errors import GspError
    from ..imageio.images import TOOL_TAG

    share = D.parse_shard(shard)
    if ranks is None and (ranks := D.ranks_from_env()).active:
        quiet_rank = quiet or not ranks.main  # one progress display: rank 0's
        D.start(ranks, "gloo")  # a few small agreements: gloo on CPU and GPU alike
        try:
            return _run_batch(command=command, verb=verb, inputs=inputs, output=output, suffix=suffix,
                              default_suffix=default_suffix, ext=ext, recursive=recursive, overwrite=overwrite,
                              skip_existing=skip_existing, continue_on_error=continue_on_error,
                              quiet=quiet_rank, as_json=as_json and ranks.main, setup=setup, meta=meta,
                              extra_suffixes=extra_suffixes, lossless=lossless, shard=shard,
                              ranks=_Joined(ranks, quiet), method=method)
        finally:
            D.finish(ranks)

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
    if share is not None:
        jobs = shard_jobs(jobs, *share)
    group = ranks if isinstance(ranks, _Joined) else None
    planned = jobs  # every rank's jobs (of this --shard)
    if group is not None:  # after the same sorted walk on every rank: each file in one rank's share
        jobs = shard_jobs(jobs, group.ranks.rank, group.ranks.world)
    reporter = Reporter(quiet, len(jobs), verb, method=method.split(" (")[0] if method else None)
    if lossless:
        from ..runtime.folders import Job

        lossy = [j for j in jobs if j.output.suffix.lower() in (".jpg", ".jpeg", ".webp")]
        if lossy:
            jobs = [Job(j.input, j.output.with_suffix(".png")) if j in lossy else j for j in jobs]
            reporter.notice(f"{len(lossy)} JPEG / WebP input(s) give PNG mosaics (a Bayer mosaic must be "
                            f"lossless), e.g. {lossy[0].output.with_suffix('.png')}")
    own_files = found.skipped_own + [str(j.input) for j in own]
    for what, items in (("hidden", found.skipped_hidden), ("non-image", found.skipped_other),
                        (f"`gsprestore {command}` output", own_files), (found.RAW_ONLY, found.skipped_beside_raw)):
        if items:
            examples = ", ".join(items[:3]) + (", ..." if len(items) > 3 else "")
            reporter.notice(f"skipped {len(items)} {what} file(s): {examples}")
    for link in found.skipped_links:
        reporter.notice(f"skipped {link}: a folder already visited (each real folder is read once)")
    if found.skipped_folders:
        reporter.notice(f"skipped {len(found.skipped_folders)} sub-folder(s) (use --recursive): "
                        + ", ".join(found.skipped_folders[:3]) + (", ..." if len(found.skipped_folders) > 3 else ""))
    if group is not None and not group.ranks.main:
        failures_here = []  # a missing input is counted (and said) once, by rank 0
    else:
        failures_here = failures
        for f in failures:
            reporter.error(f.error or "")
    # what killed runs left in the output folders is swept by one process before the others write:
    # rank 0 under torchrun; not by an array task (--shard), whose siblings may be writing there
    # from other machines, where their pids mean nothing here
    sweep = share is None
    if group is not None:
        if group.ranks.main and sweep:
            from ..core.claims import sweep_stale

            sweep_stale({folder for folder in {j.output.parent for j in planned} if folder.is_dir()})
        D.barrier(group.ranks, "the start of the batch")
        sweep = False
    if failures and not continue_on_error:
        summary = run_jobs([], lambda j, k: None, failures=failures_here)
        summary.stopped = True
    else:
        reporter.jobs = jobs
        worker = setup(reporter)
        with reporter:
            summary = run_jobs(jobs, worker, sweep=sweep, skip_existing=skip_existing, overwrite=overwrite,
                               continue_on_error=continue_on_error, on_start=reporter.start,
                               on_result=reporter.result, failures=failures_here)
    if group is not None:
        _finish_ranks(group, summary, command=command, meta=meta, as_json=as_json, n_jobs=len(jobs))
        return
    if as_json:
        typer.echo(json.dumps({"command": command, **meta, **summary.to_dict()}, indent=2))
    if not quiet:
        reporter.console.print(one_line(
            (f"{verb} with {method}: " if method else "")
            + f"{summary.count('written')} written{_where(summary)}, {summary.count('skipped')} skipped, "
            f"{summary.count('failed')} failed ({summary.seconds:.1f} s)"
            + ("; stopped at the first failure (use --continue-on-error to go on)"
               if summary.stopped and len(summary.results) < len(jobs) + len(failures) else "")),
            markup=False,
        )
        for line in reporter.closing if summary.count("written") else []:  # advice on a run that made something
            reporter.notice(line)
    if summary.exit_code:
        raise typer.Exit(summary.exit_code)


class _Joined:
    """The ranks of a batch under torchrun, once joined (``quiet``: the user's ``--quiet``)."""

    def __init__(self, ranks: Any, quiet: bool):
        self.ranks, self.quiet = ranks, quiet


def _finish_ranks(group: _Joined, summary: Any, *, command: str, meta: dict, as_json: bool, n_jobs: int) -> None:
    """The end of a batch under torchrun: rank 0 gathers every rank's results and prints the
    job's summary (and ``--json``); every rank exits with the job's exit code, the highest of the
    ranks' (so any rank's failure is the job's)."""
    from ..runtime import distributed as D
    from ..runtime.folders import Summary

    ranks = group.ranks
    code = int(D.all_max(ranks, [summary.exit_code], what="the exit codes")[0])
    parts = D.gather_to_rank0(ranks, summary)
    if ranks.main:
        total = Summary([r for part in parts for r in part.results], stopped=any(p.stopped for p in parts),
                        seconds=max(p.seconds for p in parts))
        if as_json:
            typer.echo(json.dumps({"command": command, **meta, **total.to_dict(), "exit_code": code,
                                   "ranks": ranks.world}, indent=2))
        if not group.quiet:
            from rich.console import Console

            Console(stderr=True, highlight=False, soft_wrap=True).print(one_line(
                f"{total.count('written')} written{_where(total)}, {total.count('skipped')} skipped, "
                f"{total.count('failed')} failed ({total.seconds:.1f} s, {ranks.world} ranks)"
                + ("; a rank stopped at its first failure (use --continue-on-error to go on)"
                   if any(p.stopped for p in parts) else "")), markup=False)
    if code:
        raise typer.Exit(code)


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


# ----------------------------------------------------------------------------------------------
# mosaic
# ----------------------------------------------------------------------------------------------


@command("mosaic")
def mosaic_cmd(
    inputs: Inputs,
    output: Output = None,
    pattern: Pattern = "RGGB",
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
    from ..physics.sampling import check_pattern

    from ..core.errors import UsageError

    pattern = check_pattern(pattern)
    _check_common(ext, bit_depth, overwrite, skip_existing, dng=True)
    lossy = (".jpg", ".jpeg", ".webp")
    if ext.lower().lstrip(".") in ("jpg", "jpeg", "webp") or (output is not None and output.lower().endswith(lossy)):
        raise UsageError("a Bayer mosaic must be lossless (JPEG / WebP would smear the colour samples: 36.5 vs "
                         "37.3 dB after demosaicking); write .png, .tif or .dng")

    def setup(reporter: Reporter) -> Callable[["Job", int], dict]:
        from ..runtime.file_restore import mosaic_file

        def work(job: "Job", k: int) -> dict:
            return mosaic_file(job.input, job.output, pattern, bit_depth=bit_depth, overwrite=overwrite,
                               notice=reporter.notice)

        return work

    _run_batch(command="mosaic", verb="mosaic", inputs=inputs, output=output, suffix=suffix,
               default_suffix="-mosaic", ext=ext, recursive=recursive, overwrite=overwrite, lossless=True,
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
    quality: int | None = None,
    wb: str = "camera",
    output_space: str = "srgb",
    bright: str = "auto",
    pattern_given: bool = False,
    prefer: str | None = None,
    shard: str | None = None,
    self_ensemble: bool = False,
    how: str | None = None,
) -> None:
    """``method`` None: the method of the ``weights`` file, else the task's default on the resolved
    device (``prefer``: ``"fast"`` / ``"best"`` from ``--fast`` / ``--best``; ``--best`` also
    turns on ``self_ensemble``, :mod:`gsprestore.methods.self_ensemble`). ``how``: how the user named the
    method when not by ``--method`` (``--prior gtv``)."""
    from ..imageio.camera_raw import OUTPUT_SPACES, RAW_SUFFIXES, WHITE_BALANCES, check_choice, parse_bright
    from ..runtime.tiling import check_precision, check_tiling, resolve_device
    from ..core.errors import UsageError
    from ..methods.defaults import choose_method
    from ..methods.registry import method_spec

    # argument errors first (exit 2), then the environment (device), before touching files
    _check_common(ext, bit_depth, overwrite, skip_existing, quality)
    wb = check_choice(wb, WHITE_BALANCES, "--wb")
    output_space = check_choice(output_space, OUTPUT_SPACES, "--output-space")
    bright = parse_bright(bright)
    if output is not None and output.lower().endswith(".dng"):
        raise UsageError(f"-o {output}: {task} writes images (PNG, TIFF, JPEG, WebP); only `gsprestore mosaic` "
                         "writes DNG")
    if bit_depth == 16 and output is not None and output.lower().endswith((".jpg", ".jpeg", ".webp")):
        raise UsageError(f"-o {output}: JPEG and WebP are 8-bit; use .png or .tif for --bit-depth 16")
    method_given = method is not None
    how = how or "--method" if method_given else ("--weights" if weights is not None else
                                           {"fast": "--fast", "best": "--best"}.get(prefer or "", "the default"))
    self_ensemble = self_ensemble or prefer == "best"
    if self_ensemble:
        how += ", self-ensemble"
    if method_given:
        method_spec(method, task)
    check_tiling(tile, overlap, tile_name="--tile", overlap_name="--overlap", strict=True)
    from ..runtime.distributed import parse_shard, rank_device, ranks_from_env

    parse_shard(shard)  # a bad --shard is a usage error before anything else runs
    dev = resolve_device(rank_device(device, ranks_from_env()))  # under torchrun: cuda:LOCAL_RANK
    check_precision(precision, dev)
    spec = method_spec(choose_method(method, weights, task, dev.type, prefer), task)
    if weights is not None and spec.kind != "learned":
        why = " (it averages the shipped uGTV and uGLR weights)" if spec.kind == "ensemble" else ""
        raise UsageError(f"--weights applies to learned methods only, not {spec.name}{why}")

    def setup(reporter: Reporter) -> Callable[["Job", int], dict]:
        from ..runtime.file_restore import load_restorer, restore_file
        from ..methods.registry import get_restorer

        restorer = load_restorer(spec.name, task, weights=weights, method_given=method_given or prefer == "best",
                                 self_ensemble=self_ensemble)
        alpha_restorer = get_restorer("bicubic", "upscale2x") if not is_mosaic(task) else None
        plan_job(reporter, restorer.name, task, dev.type, how, passes=PASSES if self_ensemble else 1,
                 estimate=weights is None)

        def work(job: "Job", k: int) -> dict:
            return restore_file(restorer, job.input, job.output, pattern=pattern, pattern_given=pattern_given,
                                tile=tile, overlap=overlap, device=dev, precision=precision, bit_depth=bit_depth,
                                quality=quality, overwrite=overwrite, wb=wb, output_space=output_space,
                                bright=bright, alpha_restorer=alpha_restorer, notice=reporter.notice,
                                progress=reporter.tiles)

        return work

    _run_batch(command=task, verb=task, inputs=inputs, output=output, suffix=suffix,
               default_suffix=get_task(task).suffix, ext=ext, recursive=recursive,
               overwrite=overwrite, skip_existing=skip_existing, continue_on_error=continue_on_error, quiet=quiet,
               as_json=as_json, setup=setup, extra_suffixes=RAW_SUFFIXES if is_mosaic(task) else (), shard=shard,
               method=f"{spec.name}{'+se' if self_ensemble else ''} ({how})",
               meta={"method": spec.name, "task": task, "device": str(dev), "precision": precision, "tile": tile,
                     "self_ensemble": self_ensemble, **({"pattern": pattern} if is_mosaic(task) else {})})


def _prior_method(prior: str | None, method: str | None) -> str | None:
    """``--prior glr|gtv``: the learned network of that prior (``--method uglr`` / ``ugtv``)."""
    from ..core.errors import UsageError

    if prior is None:
        return method
    p = prior.lower()
    if p not in ("glr", "gtv"):
        raise UsageError(f"unknown --prior {prior!r}; expected glr or gtv (the learned uGLR / uGTV network)")
    if method is not None and method.lower() != "u" + p:
        raise UsageError(f"--prior {p} means --method u{p}, but --method {method} was given")
    return "u" + p


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
    from ..physics.sampling import check_pattern

    method = _prior_method(prior, method)
    _restore_batch("demosaic", inputs=inputs, output=output, method=method,
                   how=f"--prior {prior.lower()}" if prior is not None else None,
                   prefer=fast_or_best(fast, best, method, weights), pattern_given=pattern is not None,
                   pattern=check_pattern(pattern or "RGGB"), weights=weights, tile=tile, overlap=overlap,
                   device=device, precision=precision, suffix=suffix, ext=ext, bit_depth=bit_depth, recursive=recursive,
                   overwrite=overwrite, skip_existing=skip_existing, continue_on_error=continue_on_error,
                   quiet=quiet, as_json=as_json, quality=quality, wb=wb, output_space=output_space, bright=bright,
                   shard=shard, self_ensemble=self_ensemble)


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
    method = _prior_method(prior, method)
    _restore_batch("upscale2x", inputs=inputs, output=output, method=method,
                   how=f"--prior {prior.lower()}" if prior is not None else None,
                   prefer=fast_or_best(fast, best, method, weights), pattern="RGGB", weights=weights, tile=tile,
                   overlap=overlap, device=device,
                   precision=precision, suffix=suffix, ext=ext, bit_depth=bit_depth, recursive=recursive,
                   overwrite=overwrite, skip_existing=skip_existing, continue_on_error=continue_on_error,
                   quiet=quiet, as_json=as_json, quality=quality, shard=shard, self_ensemble=self_ensemble)
