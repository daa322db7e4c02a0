"""Which method ``gsprestore demosaic`` / ``upscale2x`` run and what it will cost: ``--method``, the
``--weights`` file's network, or the task's default on the device (``--fast`` / ``--best``;
:mod:`gsprestore.defaults`), and the one line on stderr that says how long a file will take when
that is long (from the method's recorded speed). No torch import at module level."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # pragma: no cover
    from ..batch import Job

#: A file expected to take longer than this (seconds, by the method's recorded speed) gets a note.
LONG_FILE_S = 10.0


def chosen_method(method: str | None, weights: str | None, task: str, device: str = "cpu",
                  prefer: str | None = None) -> str:
    """``--method``, else the method of the ``--weights`` file, else the task's default on this kind
    of device (``prefer``: ``--fast`` / ``--best``; :func:`gsprestore.defaults.choose_default`)."""
    from ..file_restore import default_method  # an unreadable manifest is an error, not a silent fallback
    from ..weights import file_method

    if method is not None:
        return method
    return file_method(weights) if weights is not None else default_method(task, device, prefer)


def fast_or_best(fast: bool, best: bool, method: str | None, weights: str | None) -> str | None:
    """``--fast`` / ``--best`` as ``choose_default``'s ``prefer``, refused beside a named method."""
    from ..errors import UsageError

    if fast and best:
        raise UsageError("--fast and --best exclude each other")
    flag = "--fast" if fast else "--best" if best else None
    if flag and (method is not None or weights is not None):
        raise UsageError(f"{flag} chooses the method: leave out --method / --prior / --weights")
    return "fast" if fast else "best" if best else None


def time_note(method: str, task: str, device: str, how: str,
              notice: Callable[[str], None], passes: int = 1) -> Callable[["Job", float], None]:
    """``expect(job, megapixels)`` for the worker: the first file whose expected time (the method's
    recorded speed on this kind of device, times ``passes``: 2 with ``--self-ensemble``) passes
    :data:`LONG_FILE_S` gets one line saying which method runs, how it was chosen, about how long
    it takes and what is faster."""
    from ..defaults import CLASSICAL_DEFAULT, expected_seconds, speed_conditions
    from ..heartbeat import clock

    said = []

    def expect(job: "Job", megapixels: float) -> None:
        if said:
            return
        seconds = expected_seconds(method, task, device, megapixels)
        if seconds is not None:
            seconds *= passes
        if seconds is None or seconds < LONG_FILE_S:
            return
        said.append(True)
        fast = CLASSICAL_DEFAULT[task]
        where = speed_conditions(device)
        notice(f"{task} with {method} ({how}) on {device}: about {clock(seconds)} for {job.input.name} "
               f"({megapixels:.2g} MP at {seconds / megapixels:.0f} s/MP, its recorded speed"
               + (f" on {where.split(':')[0]}" if where else "")
               + (f", {passes} passes" if passes > 1 else "") + ")"
               + ("" if method == fast else f"; --fast ({fast}) takes about a second"))

    return expect
