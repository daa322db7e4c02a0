"""How a training run stops early: SIGINT / SIGTERM (:class:`GracefulStop`: finish the step, write
a checkpoint) and the wall-clock budget ``--time-budget`` (:class:`Deadline`: stop while there is
still time to validate, checkpoint and export; the clock of the ``cosine-time`` schedule)."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any


class GracefulStop:
    """While active, SIGINT / SIGTERM set :attr:`signum` instead of killing the process, so the
    loop finishes its step and writes a checkpoint. A second SIGINT interrupts at once. Signal
    handlers exist only in the main thread; elsewhere this does nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:  # noqa: ARG002
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()

    @property
    def name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name


#: A training step (forward with autograd, backward, Adam) costs about this many inference forwards
#: of the same batch: the estimate of the first step, before any step is measured.
STEP_OVER_FORWARD = 3.0


class Deadline:
    """The wall-clock budget of a run (``budget`` seconds from ``start``, a ``time.monotonic()``;
    None: no budget) and the measured durations it must keep in reserve: a validation
    (``val_s``), the next step (:meth:`next_step_s`) and a checkpoint (``save_s``; 0.2 s until
    the first one is measured).

    The step is budgeted like the rest: a step starts only if it, then a validation, the
    checkpoints and the export still fit. Its duration is estimated from the measured steps (the
    larger of their running mean and the last one, so a step that slows down is believed at
    once), and before the first step from a timed validation forward (:meth:`expect_step`:
    per-patch inference time x batch x :data:`STEP_OVER_FORWARD`), so that a first step longer
    than what is left of the budget is never started."""

    def __init__(self, budget: float | None, start: float):
        self.budget = budget
        self.at = None if budget is None else start + float(budget)
        self.val_s: float | None = None
        self.step_s: float | None = None
        self.last_step_s: float | None = None
        self.first_step_s: float | None = None
        self.save_s = 0.2
        self.t_loop = start

    def start_loop(self) -> None:
        """``cosine-time`` anneals over the time left at the first step."""
        self.t_loop = time.monotonic()

    def expect_step(self, forward_per_patch_s: float, batch: int) -> None:
        """The first step's estimate, from the inference time of one patch."""
        self.first_step_s = STEP_OVER_FORWARD * forward_per_patch_s * batch

    def step_took(self, dt: float) -> None:
        self.last_step_s = dt
        self.step_s = dt if self.step_s is None else 0.9 * self.step_s + 0.1 * dt

    def next_step_s(self) -> float:
        """The expected duration of the next step (0 when nothing is known)."""
        if self.step_s is None:
            return self.first_step_s or 0.0
        return max(self.step_s, self.last_step_s or 0.0)

    def out_of_time(self) -> bool:
        """True when the next step, then a validation + checkpoint + export, would not fit."""
        if self.at is None:
            return False
        val_s = self.val_s if self.val_s is not None else 0.0
        # the step about to start (with slack), a validation, checkpoint + best + export, and a
        # margin for a noisy machine
        reserve = 1.5 * self.next_step_s() + 1.5 * val_s + 3.0 * self.save_s + 0.5 + 0.02 * float(self.budget)
        return time.monotonic() + reserve > self.at

    def fraction(self) -> float | None:
        """The fraction of the loop's time spent (None without a budget)."""
        if self.at is None:
            return None
        return (time.monotonic() - self.t_loop) / max(self.at - self.t_loop, 1e-9)
