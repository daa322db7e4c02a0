"""Feedback on long work by the clock, not by events: :class:`Heartbeat` calls a function every
``interval`` seconds from a daemon thread while a piece of work runs, so a run whose stderr is a
log file, a pipe or a job scheduler still says what it is doing (a single image for minutes, one
training step longer than the log interval, a validation...).

``PROGRESS_INTERVAL_S`` (stderr lines when stderr is not a terminal) and ``LOG_INTERVAL_S`` (the
longest gap between two ``log.jsonl`` records of a training run) are read at run time from this
module, so tests may shorten them; ``GSPRESTORE_PROGRESS_INTERVAL`` (seconds) overrides the first.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

#: Seconds between two progress lines on a stderr that is not a terminal.
PROGRESS_INTERVAL_S = 30.0
#: Longest gap, in seconds, between two records of a training run's ``log.jsonl``.
LOG_INTERVAL_S = 60.0


def progress_interval() -> float:
    """:data:`PROGRESS_INTERVAL_S`, or ``$GSPRESTORE_PROGRESS_INTERVAL`` when it is a positive number."""
    try:
        value = float(os.environ.get("GSPRESTORE_PROGRESS_INTERVAL", ""))
    except ValueError:
        return PROGRESS_INTERVAL_S
    return value if value > 0 else PROGRESS_INTERVAL_S


def clock(seconds: float) -> str:
    """``75.4`` -> ``"1:15"``, ``3725`` -> ``"1:02:05"``."""
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def took(seconds: float) -> str:
    """A measured duration, the same way wherever it is said: ``0.04 s``, ``3.21 s``, ``41.1 s``,
    then :func:`clock` from a minute (``1:15``)."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return clock(seconds)


def about(seconds: float) -> str:
    """A duration as people say it, for "about ..." estimates: ``"a second"`` under 1.5 s, then
    ``"4 s"``, ``"40 s"``, ``"1.5 min"``, ``"12 min"``, ``"1 h 5 min"``."""
    if seconds < 1.5:
        return "a second"
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 9.75:
        return f"{round(minutes * 2) / 2:g} min"
    if minutes < 59.5:
        return f"{minutes:.0f} min"
    h, m = divmod(int(round(minutes)), 60)
    return f"{h} h {m} min" if m else f"{h} h"


def eta_column(label: str = "eta") -> object:
    """A Rich progress column with ``label`` and the time left from the task's own average pace,
    elapsed x (total - done) / done (``done`` counted from the task's field ``first``, if any, so a
    resumed run's earlier steps do not count as this run's pace): Rich's ``TimeRemainingColumn`` uses the speed over its last
    30 s only and shows ``-:--:--`` whenever one step (an image, a training step) takes longer."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Eta(ProgressColumn):
        def render(self, task: object) -> Text:
            first = task.fields.get("first", 0)  # steps done before this run (a resumed training)
            done, total, elapsed = task.completed - first, task.total, task.elapsed
            if not total or done <= 0 or elapsed is None:
                return Text(f"{label} -:--", style="progress.remaining")
            return Text(f"{label} {clock(elapsed * (total - task.completed) / done)}", style="progress.remaining")

    return Eta()


class Heartbeat:
    """While active (``with Heartbeat(interval, beat):``), calls ``beat(elapsed_seconds)`` every
    ``interval`` seconds from a daemon thread; ``interval`` None or <= 0: never. ``touch()``
    restarts the wait (something else just reported), so beats come only after ``interval``
    seconds of silence. An exception in ``beat`` ends the beats, never the work."""

    def __init__(self, interval: float | None, beat: Callable[[float], None]):
        self.interval = interval
        self.beat = beat
        self.t0 = time.monotonic()
        self._last = self.t0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def touch(self) -> None:
        self._last = time.monotonic()

    def start(self) -> "Heartbeat":
        if self.interval and self.interval > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gsprestore-heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._thread = None

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        assert self.interval is not None
        while not self._stop.wait(max(0.01, min(self.interval, self._last + self.interval - time.monotonic()))):
            now = time.monotonic()
            if now - self._last >= self.interval:
                self._last = now
                try:
                    self.beat(now - self.t0)
                except Exception:  # feedback must never break the work
                    return
