"""Which method a run asks for and what it will cost, from the weights manifest: ``--prior`` and
``--fast`` / ``--best`` as a method or a preference (the method itself is then chosen by
:func:`gsprestore.methods.defaults.choose_method`), the line that says how long a long job will take
and what is faster (:func:`job_estimate`), the line on how to get the best result when a run is not
it (:func:`best_hint`), and the help texts whose figures come from the manifest. No torch import
at module level."""

from __future__ import annotations

from typing import Any

#: A job expected to take longer than this (seconds) says so before it starts.
LONG_FILE_S = 30.0
#: ``--best`` is suggested only when what it runs is recorded at least this much better (dB) than
#: this run on *both* McM and Kodak: a smaller gain is not worth several times the time.
BEST_MIN_GAIN_DB = 0.1


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
                 files: str, passes: int = 1, measured: bool = False) -> str | None:
    """The line said before a job expected to take longer than :data:`LONG_FILE_S` (``seconds``:
    ``megapixels`` at the method's speed, times ``passes``; ``measured``: that speed was measured
    on this machine just before the job, else it is the recorded one): which method runs, how it
    was chosen (``how``: ``--method``, ``--prior gtv``, ``--best``...), about how long ``files`` (a
    name, or ``N files``) take and what is faster. None for a shorter job."""
    from ..core.heartbeat import about
    from .defaults import CLASSICAL_DEFAULT, expected_seconds, speed_conditions

    if seconds is None or seconds < LONG_FILE_S:
        return None
    fast = CLASSICAL_DEFAULT[task]
    where = speed_conditions(device)
    fast_s = expected_seconds(fast, task, device, megapixels)
    basis = ("measured on this machine just now" if measured else
             "its recorded speed" + (f" on {where.split(':')[0]}" if where else ""))
    return (f"{task} with {method} ({how}) on {device}: about {about(seconds)} for {files} "
            f"({megapixels:.2g} MP at {seconds / megapixels:.2g} s/MP, {basis}"
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
              how: str = "the default", manifest: dict[str, Any] | None = None,
              seconds_per_mp: float | None = None) -> str | None:
    """One line on how to get the best result when it is worth it: ``--best`` runs the best method
    by recorded quality (:func:`gsprestore.methods.defaults.best_by_quality`) as its self-ensemble,
    and it is suggested only when that is recorded at least :data:`BEST_MIN_GAIN_DB` better than
    this run on both McM and Kodak (the self-ensemble's own record where there is one, else its
    one pass: a gain not on record is not promised). The line gives both Kodak figures and about
    how long ``megapixels`` of output take that way: from ``seconds_per_mp``, this run's measured
    pace (times the recorded speed ratio of the two methods, times the passes), else from the
    recorded speed. None when the rule says no. ``how``: how this run's method was chosen
    (``--method``, ``--prior gtv``, ``--fast``, ``--weights``, ``the default``), which ``--best``
    replaces."""
    from .defaults import best_by_quality, recorded_self_ensembles, recorded_speed
    from ..core.errors import WeightsError
    from ..core.heartbeat import about
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
    se = recorded_self_ensembles(task, manifest)
    target = {**scores.get(best.method, {}), **se.get(best.method, {})}
    here = {**scores.get(method, {}), **(se.get(method, {}) if self_ensemble else {})}
    if not all(d in target and d in here for d in ("mcm", "kodak")):
        return None
    gains = {d: target[d] - here[d] for d in ("mcm", "kodak")}
    if min(gains.values()) < BEST_MIN_GAIN_DB:
        return None
    option = how.split(",")[0]
    flag = ("--self-ensemble" if method == best.method else
            "--best" + (f" instead of {option}" if option.startswith("--") else ""))
    what = (f"{method} as its self-ensemble" if method == best.method else f"{best.method}, self-ensembled")
    what += f"; recorded McM / Kodak {target['mcm']:.2f} / {target['kodak']:.2f} dB vs {here['mcm']:.2f} / {here['kodak']:.2f}"
    passes = network_passes(best.method, task, True, manifest)
    mine, theirs = recorded_speed(method, task, device, manifest), recorded_speed(best.method, task, device, manifest)
    if seconds_per_mp and mine and theirs:  # this run's pace, scaled by the recorded ratio
        per_mp = seconds_per_mp * (mine / theirs) * passes / network_passes(method, task, self_ensemble, manifest)
        basis = "from this run's pace"
    elif theirs:
        per_mp, basis = passes / theirs, "at its recorded speed"
    else:
        return f"for the best quality add {flag} ({what}; its speed on {device} is not recorded)"
    when = (f"about {about(megapixels * per_mp)} for this job" if megapixels else f"about {about(per_mp)} per megapixel")
    return f"for the best quality add {flag} ({what}): {when} on {device} {basis}, {passes} passes"


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
