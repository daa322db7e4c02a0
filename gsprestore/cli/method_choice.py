"""Which method ``gsprestore demosaic`` / ``upscale2x`` run and what it will cost: ``--method``, the
``--weights`` file's network, or the task's default on the device (``--fast`` / ``--best``;
:mod:`gsprestore.methods.defaults`), the one line on stderr that says how long the whole job will take
when that is long (from the method's recorded speed), and the line on how to get the best result
when this run is not it. No torch import at module level."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from ..physics.tasks import task_scale

if TYPE_CHECKING:  # pragma: no cover
    from .batch_progress import Reporter

#: A job expected to take longer than this (seconds, by the method's recorded speed) gets a note.
LONG_FILE_S = 10.0


def fast_or_best(fast: bool, best: bool, method: str | None, weights: str | None) -> str | None:
    """``--fast`` / ``--best`` as ``choose_default``'s ``prefer``, refused beside a named method."""
    from ..core.errors import UsageError

    if fast and best:
        raise UsageError("--fast and --best exclude each other")
    flag = "--fast" if fast else "--best" if best else None
    if flag and (method is not None or weights is not None):
        raise UsageError(f"{flag} chooses the method: leave out --method / --prior / --weights")
    return "fast" if fast else "best" if best else None


def plan_job(reporter: "Reporter", method: str, task: str, device: str, how: str, passes: int = 1,
             *, estimate: bool = True) -> None:
    """Before the batch starts: the whole job's megapixels (from the files' headers) and expected
    time (the method's recorded speed on this kind of device, times ``passes``: 2 with
    ``--self-ensemble``) set the reporter's :class:`JobClock` (the ETA of every long run); a job
    expected to take longer than :data:`LONG_FILE_S` gets one line saying which method runs, how
    it was chosen (``how``: ``--method``, ``--prior gtv``, ``--best``...), about how long all the
    files take and what is faster (``estimate`` False: no such line, e.g. with ``--weights``). The
    line on how to get the best result, when this is not it, goes to ``reporter.closing``
    (:func:`best_hint`)."""
    from ..methods.defaults import CLASSICAL_DEFAULT, expected_seconds, speed_conditions
    from ..core.heartbeat import about, clock
    from ..runtime.file_restore import header_pixels
    from .batch_progress import JobClock

    scale = task_scale(task) ** 2  # megapixels of output, as the speeds are recorded
    pixels = [header_pixels(job.input) for job in reporter.jobs]
    pixels = [p * scale if p else None for p in pixels]
    known = [p for p in pixels if p]
    megapixels = (sum(known) / len(known) * len(pixels) if known else 0.0) / 1e6
    seconds = expected_seconds(method, task, device, megapixels) if megapixels else None
    seconds = None if seconds is None else seconds * passes
    reporter.clock = JobClock(pixels, seconds)
    if estimate and seconds is not None and seconds >= LONG_FILE_S:
        fast = CLASSICAL_DEFAULT[task]
        where = speed_conditions(device)
        fast_s = expected_seconds(fast, task, device, megapixels)
        files = reporter.jobs[0].input.name if len(reporter.jobs) == 1 else f"{len(reporter.jobs)} files"
        reporter.notice(f"{task} with {method} ({how}) on {device}: about {clock(seconds)} for {files} "
                        f"({megapixels:.2g} MP at {seconds / megapixels:.0f} s/MP, its recorded speed"
                        + (f" on {where.split(':')[0]}" if where else "")
                        + (f", {n} passes" if (n := network_passes(method, task, passes > 1)) > 1 else "") + ")"
                        + ("" if method == fast else f"; --fast ({fast}) takes about "
                           + about(fast_s or 0.0)))
    hint = best_hint(task, method, passes > 1, device, megapixels, how=how)
    if hint:
        reporter.closing.append(hint)


def best_help(task: str) -> str:
    """``--best``'s help for ``task``: what it runs today and its time per megapixel on a CPU, from
    the manifest's recorded speed (two passes: it runs the self-ensemble), with a 24-MP photo's."""
    from ..methods.defaults import best_by_quality, recorded_speed, speed_conditions
    from ..core.heartbeat import clock
    from ..methods.self_ensemble import PASSES
    from ..methods.weights import read_manifest

    text = "Run the best method by recorded quality whatever its time, with --self-ensemble"
    try:
        manifest = read_manifest()
    except Exception:  # noqa: BLE001 - an unreadable manifest: the help without figures
        return text + "."
    best = best_by_quality(task, manifest).method
    speed = recorded_speed(best, task, "cpu", manifest)
    if not speed:
        return text + f" (today {best})."
    per_mp = PASSES / speed
    where = (speed_conditions("cpu", manifest) or "").split(":")[0] or "a CPU"
    return (text + f" (today {best}): about {per_mp:.0f} s per megapixel of output on {where} by its recorded "
            f"speed, {clock(24 * per_mp)} for a 24-MP photo; a GPU is much faster.")


def self_ensemble_help() -> str:
    """``--self-ensemble``'s help, its gain from the manifest's recorded self-ensemble scores."""
    from ..methods.defaults import self_ensemble_gains

    gains = self_ensemble_gains()
    figure = f", {gains[0]:+.2f} to {gains[1]:+.2f} dB for the learned models on McM / Kodak (recorded)" if gains else ""
    return f"Average the method's output with its output on the transposed image: twice the time{figure}."


def best_hint(task: str, method: str, self_ensemble: bool, device: str, megapixels: float, *,
              how: str = "the default", manifest: dict[str, Any] | None = None) -> str | None:
    """One line on how to get the best result by recorded quality when ``method`` (with or
    without ``self_ensemble``) is not it: ``--best`` (the best by quality,
    :func:`gsprestore.methods.defaults.best_by_quality`, with its self-ensemble), the recorded scores of
    both, and about how long ``megapixels`` of
    output take that way on ``device`` (its recorded speed, two passes). None when this run is
    the best. ``how``: how this run's method was chosen (``--method``, ``--prior gtv``, ``--fast``,
    ``--weights``, ``the default``), which ``--best`` replaces. Generic over the methods: everything
    comes from the manifest."""
    from ..methods.defaults import best_by_quality, recorded_speed
    from ..core.errors import WeightsError
    from ..core.heartbeat import about
    from ..methods.self_ensemble import PASSES
    from ..methods.weights import read_manifest

    if manifest is None:
        try:
            manifest = read_manifest()
        except WeightsError:
            return None
    best = best_by_quality(task, manifest)
    if method == best.method and self_ensemble:
        return None
    scores = {**best.classical, **best.learned}

    def kodak(name: str) -> str:
        return f"{scores[name]['kodak']:.2f}" if "kodak" in scores.get(name, {}) else "?"

    option = how.split(",")[0]
    flag = ("--self-ensemble" if method == best.method else
            "--best" + (f" instead of {option}" if option.startswith("--") else ""))
    what = (f"{method} as its self-ensemble" if method == best.method else
            f"{best.method}, self-ensembled; recorded Kodak {kodak(best.method)} dB vs {kodak(method)} for {method}")
    speed = recorded_speed(best.method, task, device, manifest)
    passes = f"{network_passes(best.method, task, True, manifest)} passes"
    if not speed:
        when = f"its speed on {device} is not recorded"
    elif megapixels:
        when = (f"about {about(megapixels / speed * PASSES)} for this job on {device} at its recorded "
                f"{1 / speed:.0f} s/MP, {passes}")
    else:  # no file's size could be read
        when = f"{PASSES / speed:.0f} s per megapixel on {device} by its recorded speed, {passes}"
    return f"for the best quality add {flag} ({what}): {when}"


def network_passes(method: str, task: str, self_ensemble: bool, manifest: dict[str, Any] | None = None) -> int:
    """How many network passes a run of ``method`` makes per tile: one per member of an ensemble
    (its manifest record's ``members``), times two with the self-ensemble."""
    from ..methods.defaults import current_ensembles
    from ..core.errors import WeightsError
    from ..methods.self_ensemble import PASSES
    from ..methods.weights import read_manifest

    if manifest is None:
        try:
            manifest = read_manifest()
        except WeightsError:
            manifest = {}
    members = (current_ensembles(task, manifest).get(method) or {}).get("members")
    return (len(members) if isinstance(members, dict) and members else 1) * (PASSES if self_ensemble else 1)
