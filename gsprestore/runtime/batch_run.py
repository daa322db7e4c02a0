"""One batch of files end to end, as ``gsprestore mosaic | demosaic | upscale2x`` run it: the inputs
found (:func:`gsprestore.runtime.folders.discover`), the outputs planned, this process's share taken
(``--shard K/N``, and the ranks of torchrun: :mod:`gsprestore.runtime.distributed`), what killed runs
left in the output folders swept, the per-file worker built and run
(:func:`gsprestore.runtime.folders.run_jobs`) with progress on stderr
(:class:`gsprestore.runtime.progress.Reporter`), and the summary: one line on stderr and a
JSON-able record, with the exit code (0 all done, 1 failure, 3 some files failed under
``continue_on_error``). What each command does to one file comes in :class:`BatchWork`
(:mod:`gsprestore.runtime.restore_batch`); where the files come from and go, in :class:`BatchOptions`.
No torch import at module level (``mosaic`` runs without it)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from ..core.errors import one_line
from ..core.heartbeat import took

if TYPE_CHECKING:  # pragma: no cover
    from .folders import Job, Summary
    from .progress import Reporter


@dataclass
class BatchOptions:
    """Where a batch's files come from and go, and what to do on the way (the options every batch
    command shares). ``output``: a file (one input) or a folder mirroring the input tree, None next
    to each input; ``suffix``: added to output names (None: the command's default next to the
    input, none with an output folder); ``ext``: the output format or ``same``; ``shard``: ``K/N``,
    this process's share of the files; ``quiet``: errors only on stderr."""

    output: str | None = None
    suffix: str | None = None
    ext: str = "same"
    recursive: bool = False
    overwrite: bool = False
    skip_existing: bool = False
    continue_on_error: bool = False
    quiet: bool = False
    shard: str | None = None


@dataclass
class BatchWork:
    """What one command does to the files of a batch. ``command``: its name (the record's
    ``command``, the tag of its outputs, which are never taken as inputs); ``setup(reporter)``
    builds the per-file worker ``work(job, index) -> info`` once the jobs are known (it may read
    ``reporter.jobs``, set ``reporter.clock`` and add to ``reporter.closing``, lines said after the
    summary); ``meta``: the record's other fields (method, device, ...); ``extra_suffixes``: more
    input kinds than images (camera RAW); ``lossless``: an output that ``ext`` same would make JPEG
    / WebP is written as PNG (a note says so); ``method``: what the per-file and summary lines name
    (``menon (the default)``)."""

    command: str
    default_suffix: str
    setup: Callable[["Reporter"], Callable[["Job", int], dict | None]]
    meta: dict = field(default_factory=dict)
    extra_suffixes: tuple[str, ...] = ()
    lossless: bool = False
    method: str | None = None


@dataclass
class BatchOutcome:
    """How a batch ended: ``exit_code`` (the job's: under torchrun the highest of the ranks') and
    ``record``, the JSON summary (``command``, the work's meta, counts, every file), None on the
    ranks that do not report (all but rank 0)."""

    exit_code: int
    record: dict | None


class _Joined:
    """The ranks of a batch under torchrun, once joined (``quiet``: the caller's own)."""

    def __init__(self, ranks: Any, quiet: bool):
        self.ranks, self.quiet = ranks, quiet


def run_batch(work: BatchWork, inputs: list[str], options: BatchOptions, *,
              on_record: Callable[[dict], None] | None = None) -> BatchOutcome:
    """Discover ``inputs``, plan the outputs, build the worker (``work.setup``, e.g. loading a
    model), run, summarise. ``on_record`` is given the JSON summary as soon as it is made (before
    the summary line on stderr), on the rank that reports. ``options.shard`` and the ranks of
    torchrun each take their share of the planned jobs (:func:`gsprestore.runtime.folders.shard_jobs`);
    with several ranks, rank 0 alone shows progress and the summary of all of them, and every rank
    ends with the job's exit code (the highest)."""
    from . import distributed as D

    share = D.parse_shard(options.shard)
    ranks = D.ranks_from_env()
    if not ranks.active:
        return _run(work, inputs, options, share, on_record, None)
    D.start(ranks, "gloo")  # a few small agreements: gloo on CPU and GPU alike
    try:  # one progress display: rank 0's
        return _run(work, inputs, replace(options, quiet=options.quiet or not ranks.main), share,
                    on_record if ranks.main else None, _Joined(ranks, options.quiet))
    finally:
        D.finish(ranks)


def _run(work: BatchWork, inputs: list[str], options: BatchOptions, share: tuple[int, int] | None,
         on_record: Callable[[dict], None] | None, group: _Joined | None) -> BatchOutcome:
    from . import distributed as D
    from .folders import Job, Result, discover, drop_own_outputs, plan_jobs, run_jobs, shard_jobs
    from .progress import Reporter
    from ..core.errors import GspError, UsageError
    from ..core.process import Terminated
    from ..imageio.images import TOOL_TAG

    o, command = options, work.command
    found = discover(inputs, recursive=o.recursive, output=o.output, tag=TOOL_TAG.format(command=command),
                     extra_suffixes=work.extra_suffixes)
    failures = [Result(m, None, "failed", error=f"{m}: no such file or folder") for m in found.missing]
    if not work.extra_suffixes:  # a command that takes no camera RAW file: say what to do instead
        from ..imageio.camera_raw import is_camera_raw

        named = [str(s.path) for s in found.sources if is_camera_raw(s.path)]
        if named or (found.skipped_raw and not found.sources):
            first = (named or found.skipped_raw)[0]
            raise UsageError(f"a camera RAW file: `gsprestore {command}` takes developed images (PNG, TIFF, JPEG or "
                             f"WebP); develop it first with `gsprestore demosaic {first}`", first)
    if not found.sources:
        if len(found.missing) == 1:
            raise GspError("no such file or folder", found.missing[0])
        if found.missing:
            raise GspError(f"no such files or folders: {', '.join(found.missing)}")
        kinds = "PNG, TIFF, JPEG or WebP" + (" or camera RAW" if work.extra_suffixes else "")
        raise GspError(f"no {kinds} files found in {', '.join(inputs)}")
    jobs = plan_jobs(found.sources, o.output, suffix=work.default_suffix if (o.suffix is None and o.output is None)
                     else (o.suffix or ""), ext=o.ext)
    jobs, own = drop_own_outputs(jobs)
    if share is not None:
        jobs = shard_jobs(jobs, *share)
    planned = jobs  # every rank's jobs (of this --shard)
    if group is not None:  # after the same sorted walk on every rank: each file in one rank's share
        jobs = shard_jobs(jobs, group.ranks.rank, group.ranks.world)
    reporter = Reporter(o.quiet, len(jobs), command, method=work.method.split(" (")[0] if work.method else None)
    if work.lossless:
        lossy = [j for j in jobs if j.output.suffix.lower() in (".jpg", ".jpeg", ".webp")]
        if lossy:
            jobs = [Job(j.input, j.output.with_suffix(".png")) if j in lossy else j for j in jobs]
            reporter.notice(f"{len(lossy)} JPEG / WebP input(s) give PNG mosaics (a Bayer mosaic must be "
                            f"lossless), e.g. {lossy[0].output.with_suffix('.png')}")
    own_files = found.skipped_own + [str(j.input) for j in own]
    if found.skipped_raw:
        items = found.skipped_raw
        reporter.notice(f"skipped {len(items)} camera RAW file(s) ({', '.join(items[:3])}"
                        f"{', ...' if len(items) > 3 else ''}): `gsprestore {command}` takes developed images; "
                        f"develop them first with `gsprestore demosaic`")
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
    if failures and not o.continue_on_error:
        summary = run_jobs([], lambda j, k: None, failures=failures_here)
        summary.stopped = True
    else:
        reporter.jobs = jobs
        worker = work.setup(reporter)
        done: list[str] = []

        def on_result(k: int, res: Any) -> None:
            if res.status in ("written", "skipped"):
                done.append(res.status)
            reporter.result(k, res)

        try:
            with reporter:
                summary = run_jobs(jobs, worker, sweep=sweep, skip_existing=o.skip_existing, overwrite=o.overwrite,
                                   continue_on_error=o.continue_on_error, on_start=reporter.start,
                                   on_result=on_result, failures=failures_here)
        except (KeyboardInterrupt, Terminated):  # Ctrl-C / SIGTERM: what is kept, and how to go on
            left = len(jobs) - len(done)
            if left and len(jobs) > 1:
                reporter.console.print(
                    f"stopped with {len(done)} of {len(jobs)} file(s) done ({done.count('written')} written; "
                    f"finished outputs are kept, the one in progress removed); to do the other {left}, run the "
                    f"same command again with --skip-existing", markup=False, highlight=False)
            raise
    if group is not None:
        return _finish_ranks(group, summary, work, on_record)
    record = {"command": command, **work.meta, **summary.to_dict()}
    if on_record is not None:
        on_record(record)
    if not o.quiet:
        reporter.console.print(one_line(
            (f"{command} with {work.method}: " if work.method else "")
            + f"{summary.count('written')} written{where(summary)}, {summary.count('skipped')} skipped, "
            f"{summary.count('failed')} failed ({took(summary.seconds)})"
            + ("; stopped at the first failure (use --continue-on-error to go on)"
               if summary.stopped and len(summary.results) < len(jobs) + len(failures) else "")),
            markup=False,
        )
        for line in reporter.closing if summary.count("written") else []:  # advice on a run that made something
            reporter.notice(line)
    return BatchOutcome(summary.exit_code, record)


def _finish_ranks(group: _Joined, summary: "Summary", work: BatchWork,
                  on_record: Callable[[dict], None] | None) -> BatchOutcome:
    """The end of a batch under torchrun: rank 0 gathers every rank's results and makes the job's
    summary (line and record); every rank ends with the job's exit code, the highest of the
    ranks' (so any rank's failure is the job's)."""
    from . import distributed as D
    from .folders import Summary

    ranks = group.ranks
    code = int(D.all_max(ranks, [summary.exit_code], what="the exit codes")[0])
    parts = D.gather_to_rank0(ranks, summary)
    record = None
    if ranks.main:
        total = Summary([r for part in parts for r in part.results], stopped=any(p.stopped for p in parts),
                        seconds=max(p.seconds for p in parts))
        record = {"command": work.command, **work.meta, **total.to_dict(), "exit_code": code, "ranks": ranks.world}
        if on_record is not None:
            on_record(record)
        if not group.quiet:
            from rich.console import Console

            Console(stderr=True, highlight=False, soft_wrap=True).print(one_line(
                f"{total.count('written')} written{where(total)}, {total.count('skipped')} skipped, "
                f"{total.count('failed')} failed ({took(total.seconds)}, {ranks.world} ranks)"
                + ("; a rank stopped at its first failure (use --continue-on-error to go on)"
                   if any(p.stopped for p in parts) else "")), markup=False)
    return BatchOutcome(code, record)


def where(summary: "Summary") -> str:
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
