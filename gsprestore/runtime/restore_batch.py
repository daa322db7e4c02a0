"""Files and folders through a method, as ``gsprestore mosaic | demosaic | upscale2x`` do it:
:func:`mosaic_paths` and :func:`restore_paths` check their options (usage errors, exit code 2,
before any file is touched; then the environment: the device), choose the method
(:func:`gsprestore.methods.defaults.choose_method`), and run the batch
(:func:`gsprestore.runtime.batch_run.run_batch`) with the per-file work of
:mod:`gsprestore.runtime.file_restore` (read, orientation, alpha, ICC, checks, restore, write;
camera RAW development). :func:`plan_job` sets the job's time estimate before it starts. The public
entry is :func:`gsprestore.api.restore_paths` / :func:`gsprestore.api.mosaic_paths`. No torch import
at module level (``mosaic`` runs without it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..physics.tasks import get_task, is_mosaic, task_scale
from .batch_run import BatchOptions, BatchOutcome, BatchWork, run_batch

if TYPE_CHECKING:  # pragma: no cover
    from .file_restore import RawPrefetch
    from .folders import Job
    from .progress import Reporter


@dataclass
class RestoreOptions:
    """How each file of a ``demosaic`` / ``upscale2x`` batch is restored. The method: ``method``
    (a name), else the ``weights`` file's network, else the task's default on the resolved device
    (``prefer``: ``"fast"`` / ``"best"``; ``"best"`` also turns on ``self_ensemble``,
    :mod:`gsprestore.methods.self_ensemble`); ``how``: how the user named the method when not by
    ``--method`` (``--prior gtv``). ``pattern``: the Bayer pattern of PNG / TIFF mosaics (None:
    RGGB, and a camera RAW file's own); the engine: ``tile``, ``overlap``, ``device``,
    ``precision``; the output: ``bit_depth`` (None: the input's), ``quality`` (JPEG / WebP); camera
    RAW development: ``wb``, ``output_space``, ``bright``, ``denoise``."""

    method: str | None = None
    weights: str | None = None
    prefer: str | None = None
    self_ensemble: bool = False
    how: str | None = None
    pattern: str | None = None
    tile: int = 0
    overlap: int | None = None
    device: str = "auto"
    precision: str = "fp32"
    bit_depth: int | None = None
    quality: int | None = None
    wb: str = "camera"
    output_space: str = "srgb"
    bright: str = "auto"
    denoise: str = "auto"


def check_formats(ext: str, bit_depth: int | None, overwrite: bool, skip_existing: bool,
                  quality: int | None = None, *, dng: bool = False) -> None:
    """``--ext``, ``--bit-depth``, ``--quality`` and ``--overwrite`` / ``--skip-existing`` as usage
    errors (``dng``: the command writes camera RAW files too)."""
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


def mosaic_paths(inputs: list[str], pattern: str = "RGGB", bit_depth: int | None = None,
                 options: BatchOptions | None = None, *,
                 on_record: Callable[[dict], None] | None = None) -> BatchOutcome:
    """The single-channel Bayer mosaic of every RGB image of ``inputs`` (files, folders, globs),
    same bit depth; a ``.dng`` output is a camera RAW file. A mosaic must be lossless: JPEG / WebP
    outputs are refused, and JPEG / WebP inputs give PNG mosaics."""
    from ..core.errors import UsageError
    from ..physics.sampling import check_pattern

    o = options or BatchOptions()
    pattern = check_pattern(pattern)
    check_formats(o.ext, bit_depth, o.overwrite, o.skip_existing, dng=True)
    lossy = (".jpg", ".jpeg", ".webp")
    if o.ext.lower().lstrip(".") in ("jpg", "jpeg", "webp") or (o.output is not None and o.output.lower().endswith(lossy)):
        raise UsageError("a Bayer mosaic must be lossless (JPEG / WebP would smear the colour samples: 36.5 vs "
                         "37.3 dB after demosaicking); write .png, .tif or .dng")

    def setup(reporter: "Reporter") -> Callable[["Job", int], dict]:
        from .file_restore import mosaic_file

        def work(job: "Job", k: int) -> dict:
            return mosaic_file(job.input, job.output, pattern, bit_depth=bit_depth, overwrite=o.overwrite,
                               notice=reporter.notice)

        return work

    return run_batch(BatchWork("mosaic", "-mosaic", setup, meta={"pattern": pattern}, lossless=True), inputs, o,
                     on_record=on_record)


def restore_paths(task: str, inputs: list[str], restore: RestoreOptions | None = None,
                  options: BatchOptions | None = None, *,
                  on_record: Callable[[dict], None] | None = None) -> BatchOutcome:
    """Restore every image of ``inputs`` (files, folders, globs; camera RAW files too for
    ``demosaic``) with the method ``restore`` names or the default, writing where ``options`` say."""
    from ..core.errors import UsageError
    from ..imageio.camera_raw import RAW_SUFFIXES
    from ..imageio.raw_develop import OUTPUT_SPACES, WHITE_BALANCES, check_choice, parse_bright, parse_denoise
    from ..methods.defaults import choose_method
    from ..methods.registry import method_spec
    from ..methods.self_ensemble import PASSES
    from ..physics.sampling import check_pattern
    from .distributed import parse_shard, rank_device, ranks_from_env
    from .tiling import check_precision, check_tiling, resolve_device

    r, o = restore or RestoreOptions(), options or BatchOptions()
    pattern_given, pattern = r.pattern is not None, check_pattern(r.pattern or "RGGB")
    # argument errors first (exit 2), then the environment (device), before touching files
    check_formats(o.ext, r.bit_depth, o.overwrite, o.skip_existing, r.quality)
    wb = check_choice(r.wb, WHITE_BALANCES, "--wb")
    output_space = check_choice(r.output_space, OUTPUT_SPACES, "--output-space")
    bright = parse_bright(r.bright)
    denoise = parse_denoise(r.denoise)
    if o.output is not None and o.output.lower().endswith(".dng") and not is_mosaic(task):
        raise UsageError(f"-o {o.output}: {task} writes images (PNG, TIFF, JPEG, WebP); DNG is written by "
                         "`gsprestore mosaic` (a mosaic) and by `gsprestore demosaic` of a camera RAW (linear DNG)")
    if r.bit_depth == 16 and o.output is not None and o.output.lower().endswith((".jpg", ".jpeg", ".webp")):
        raise UsageError(f"-o {o.output}: JPEG and WebP are 8-bit; use .png or .tif for --bit-depth 16")
    method_given = r.method is not None
    how = r.how or "--method" if method_given else ("--weights" if r.weights is not None else
                                                    {"fast": "--fast", "best": "--best"}.get(r.prefer or "",
                                                                                           "the default"))
    self_ensemble = r.self_ensemble or r.prefer == "best"
    if self_ensemble:
        how += ", self-ensemble"
    if method_given:
        method_spec(r.method, task)
    check_tiling(r.tile, r.overlap, tile_name="--tile", overlap_name="--overlap", strict=True)
    parse_shard(o.shard)  # a bad --shard is a usage error before anything else runs
    prefetch = raw_prefetch(task, inputs)
    try:  # torch loads (resolve_device) while the first camera RAW file decodes
        dev = resolve_device(rank_device(r.device, ranks_from_env()))  # under torchrun: cuda:LOCAL_RANK
        check_precision(r.precision, dev)
        spec = method_spec(choose_method(r.method, r.weights, task, dev.type, r.prefer), task)
    finally:
        if prefetch is not None:
            prefetch.wait()  # stderr is the process's own again before anything is printed
    if r.weights is not None and spec.kind != "learned":
        why = " (it averages the shipped uGTV and uGLR weights)" if spec.kind == "ensemble" else ""
        raise UsageError(f"--weights applies to learned methods only, not {spec.name}{why}")

    def setup(reporter: "Reporter") -> Callable[["Job", int], dict]:
        from ..methods.registry import get_restorer
        from .file_restore import load_restorer, restore_file

        restorer = load_restorer(spec.name, task, weights=r.weights, method_given=method_given or r.prefer == "best",
                                 self_ensemble=self_ensemble)
        alpha_restorer = get_restorer("bicubic", "upscale2x") if not is_mosaic(task) else None
        plan_job(reporter, restorer.name, task, dev.type, how, passes=PASSES if self_ensemble else 1,
                 estimate=r.weights is None, restorer=restorer)

        def work(job: "Job", k: int) -> dict:
            return restore_file(restorer, job.input, job.output, pattern=pattern, pattern_given=pattern_given,
                                tile=r.tile, overlap=r.overlap, device=dev, precision=r.precision,
                                bit_depth=r.bit_depth, quality=r.quality, overwrite=o.overwrite, wb=wb,
                                output_space=output_space, bright=bright, denoise=denoise,
                                alpha_restorer=alpha_restorer, prefetch=prefetch,
                                notice=reporter.notice, progress=reporter.tiles)

        return work

    work = BatchWork(task, get_task(task).suffix, setup, extra_suffixes=RAW_SUFFIXES if is_mosaic(task) else (),
                     method=f"{spec.name}{'+se' if self_ensemble else ''} ({how})",
                     meta={"method": spec.name, "task": task, "device": str(dev), "precision": r.precision,
                           "tile": r.tile, "self_ensemble": self_ensemble,
                           **({"pattern": pattern} if is_mosaic(task) else {})})
    return run_batch(work, inputs, o, on_record=on_record)


def raw_prefetch(task: str, inputs: list[str]) -> "RawPrefetch | None":
    """For ``demosaic`` whose first input names a camera RAW file, that file's decode started on a
    thread (:class:`gsprestore.runtime.file_restore.RawPrefetch`); otherwise None. Only where the
    process has two CPUs or more: on one, the decode would only slow the start-up it hides."""
    from pathlib import Path

    from ..core.process import usable_cpus
    from ..imageio.camera_raw import is_camera_raw
    from .file_restore import RawPrefetch

    if not is_mosaic(task) or not inputs or usable_cpus() < 2:
        return None
    first = Path(inputs[0])
    return RawPrefetch(first) if first.is_file() and is_camera_raw(first) else None


#: A job its method's recorded speed puts at this many seconds or more (or whose speed is not
#: recorded) has its pace measured on this machine before it starts (:func:`measure_pace`): a
#: recorded speed is the reference machine's, and a busy or slower machine can be several times slower.
MEASURE_ABOVE_S = 10.0
#: The largest side of the synthetic output :func:`measure_pace` times (about half a second of a
#: ``-lite`` network on two threads); a slower method times a smaller square (:func:`pace_side`).
PACE_SIDE = 768
#: The smallest side :func:`measure_pace` times (fixed costs per pixel grow below it).
PACE_MIN_SIDE = 192
#: About how long the timed square of :func:`measure_pace` should take at the method's recorded
#: speed: the probe (warm-up and timed square) costs ~1.25x this, however slow the method.
PACE_SECONDS = 1.0


def pace_side(seconds_per_mp: float | None) -> int:
    """The side of the square :func:`measure_pace` times: :data:`PACE_SIDE` for a fast method or one
    without a recorded speed; for a slow one (``seconds_per_mp``: its recorded time a megapixel of
    output, passes included) the square that takes about :data:`PACE_SECONDS`, at least
    :data:`PACE_MIN_SIDE`, a multiple of 16 (so that the probe of a paper-size network costs about a
    second, not a quarter of a minute, before a job it is meant to announce)."""
    if not seconds_per_mp or seconds_per_mp <= 0:
        return PACE_SIDE
    side = int((PACE_SECONDS / seconds_per_mp * 1e6) ** 0.5) // 16 * 16
    return max(PACE_MIN_SIDE, min(PACE_SIDE, side))


def measure_pace(restorer: Any, task: str, device: str, seconds_per_mp: float | None = None) -> float:
    """Seconds per megapixel of output that ``restorer`` takes on this machine now: a warm-up on a
    square of noise of half the side, then one of :func:`pace_side` (``seconds_per_mp``: the
    recorded speed, which sizes it) timed (the work does not depend on the content; smaller squares
    pay fixed costs per pixel that a photo spreads, so a fast method is timed on the largest).
    Used for estimates only, never to choose a method (that stays a pure function of the
    manifest)."""
    import time

    import torch

    from .tiling import restore

    full = pace_side(seconds_per_mp)
    g = torch.Generator().manual_seed(0)
    seconds = 0.0
    for out_side in (full // 2, full):  # the first: a warm-up (first calls, allocations)
        side = out_side // task_scale(task)
        obs = torch.rand((1, side, side) if is_mosaic(task) else (3, side, side), generator=g)
        t0 = time.perf_counter()
        restore(restorer, obs, "RGGB", device=device)
        seconds = time.perf_counter() - t0
    return seconds / (full * full / 1e6)


def plan_job(reporter: "Reporter", method: str, task: str, device: str, how: str, passes: int = 1,
             *, estimate: bool = True, restorer: Any = None) -> None:
    """Before the batch starts: the whole job's megapixels (from the files' headers) and expected
    time (the method's recorded speed on this kind of device, or when that says a few seconds or
    more, its pace measured here and now with ``restorer``, :func:`measure_pace`; times ``passes``:
    2 with ``--self-ensemble``) set the reporter's :class:`gsprestore.runtime.progress.JobClock` (the ETA
    of every long run); a long job gets one line saying which method runs, how it was chosen and
    about how long it takes (:func:`gsprestore.methods.advice.job_estimate`; ``estimate`` False: no
    such line, e.g. with ``--weights``). The line on how to get the best result, when this is not
    it, goes to ``reporter.closing`` (:func:`gsprestore.methods.advice.best_hint`)."""
    from ..methods.advice import best_hint, job_estimate
    from ..methods.defaults import expected_seconds
    from .file_restore import header_pixels
    from .progress import JobClock

    scale = task_scale(task) ** 2  # megapixels of output, as the speeds are recorded
    pixels = [header_pixels(job.input) for job in reporter.jobs]
    pixels = [p * scale if p else None for p in pixels]
    known = [p for p in pixels if p]
    megapixels = (sum(known) / len(known) * len(pixels) if known else 0.0) / 1e6
    seconds = expected_seconds(method, task, device, megapixels) if megapixels else None
    seconds = None if seconds is None else seconds * passes
    pace = None  # seconds per megapixel of output, measured here and now, when the job is long enough to ask
    if restorer is not None and megapixels and (seconds is None or seconds >= MEASURE_ABOVE_S):
        # the restorer runs its passes (self-ensemble) itself; the recorded pace sizes the probe
        pace = measure_pace(restorer, task, device, seconds / megapixels if seconds else None)
        seconds = megapixels * pace
    reporter.clock = JobClock(pixels, seconds)
    files = reporter.jobs[0].input.name if len(reporter.jobs) == 1 else f"{len(reporter.jobs)} files"
    line = (job_estimate(method, task, device, how, megapixels, seconds, files, passes, measured=pace is not None)
            if estimate else None)
    if line:
        reporter.notice(line)
    hint = best_hint(task, method, passes > 1, device, megapixels, how=how, seconds_per_mp=pace)
    if hint:
        reporter.closing.append(hint)
