"""Which method a run asks for and what it will cost, from the weights manifest: ``--prior`` and
``--fast`` / ``--best`` as a method or a preference (the method itself is then chosen by
:func:`gsprestore.methods.defaults.choose_method`), the line that says how long a long job will take
and what is faster (:func:`job_estimate`), the line on how to get the best result when a run is not
it (:func:`best_hint`), and the help texts whose figures come from the manifest. No torch import
at module level."""

from __future__ import annotations

from typing import Any

#: A job expected to take longer than this (seconds, by the method's recorded speed) gets a note.
LONG_FILE_S = 10.0


def prior_method(prior: str | None, method: str | None) -> str | None:
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


def fast_or_best(fast: bool, best: bool, method: str | None, weights: str | None) -> str | None:
    """``--fast`` / ``--best`` as ``choose_default``'s ``prefer``, refused beside a named method."""
    from ..core.errors import UsageError

    if fast and best:
        raise UsageError("--fast and --best exclude each other")
    flag = "--fast" if fast else "--best" if best else None
    if flag and (method is not None or weights is not None):
        raise UsageError(f"{flag} chooses the method: leave out --method / --prior / --weights")
    return "fast" if fast else "best" if best else None


def job_estimate(method: str, task: str, device: str, how: str, megapixels: float, seconds: float | None,
                 files: str, passes: int = 1) -> str | None:
    """The line said before a job expected to take longer than :data:`LONG_FILE_S` (``seconds``, from
    :func:`gsprestore.methods.defaults.expected_seconds` times ``passes``): which method runs, how it
    was chosen (``how``: ``--method``, ``--prior gtv``, ``--best``...), about how long ``files`` (a
    name, or ``N files``: ``megapixels`` of output in all) take and what is faster. None for a
    shorter job."""
    from ..core.heartbeat import about, clock
    from .defaults import CLASSICAL_DEFAULT, expected_seconds, speed_conditions

    if seconds is None or seconds < LONG_FILE_S:
        return None
    fast = CLASSICAL_DEFAULT[task]
    where = speed_conditions(device)
    fast_s = expected_seconds(fast, task, device, megapixels)
    return (f"{task} with {method} ({how}) on {device}: about {clock(seconds)} for {files} "
            f"({megapixels:.2g} MP at {seconds / megapixels:.0f} s/MP, its recorded speed"
            + (f" on {where.split(':')[0]}" if where else "")
            + (f", {n} passes" if (n := network_passes(method, task, passes > 1)) > 1 else "") + ")"
            + ("" if method == fast else f"; --fast ({fast}) takes about " + about(fast_s or 0.0)))


def best_help(task: str) -> str:
    """``--best``'s help for ``task``: what it runs today and its time per megapixel on a CPU, from
    the manifest's recorded speed (two passes: it runs the self-ensemble), with a 24-MP photo's."""
    from .defaults import best_by_quality, recorded_speed, speed_conditions
    from ..core.heartbeat import clock
    from .self_ensemble import PASSES
    from .weights import read_manifest

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
    from .defaults import self_ensemble_gains

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
    from .defaults import best_by_quality, recorded_speed
    from ..core.errors import WeightsError
    from ..core.heartbeat import about
    from .self_ensemble import PASSES
    from .weights import read_manifest

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
    from .defaults import current_ensembles
    from ..core.errors import WeightsError
    from .self_ensemble import PASSES
    from .weights import read_manifest

    if manifest is None:
        try:
            manifest = read_manifest()
        except WeightsError:
            manifest = {}
    members = (current_ensembles(task, manifest).get(method) or {}).get("members")
    return (len(members) if isinstance(members, dict) and members else 1) * (PASSES if self_ensemble else 1)
