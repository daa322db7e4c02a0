"""The Rich display of a training run (the loop itself draws nothing): :class:`RichProgress`, the
``progress=`` object ``gsprestore train`` passes to :func:`gsprestore.training.train` (a spinner
while patches are cut, then a bar on stderr: steps, epoch, running loss, patches/s, elapsed and
ETA, and a line per epoch; where stderr is not a terminal, the same figures as a line every 30 s),
and :func:`summary_table`, the final figures."""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

from .report import TrainProgress, TrainResult


class RichProgress(TrainProgress):
    """Rich progress on ``console`` (stderr by default); ``enabled=False`` shows nothing.

    On a terminal: a spinner, then a live bar. Otherwise (a log file, a pipe, a job scheduler),
    where a live display would print nothing until the end: one line every
    :func:`gsprestore.core.heartbeat.progress_interval` seconds (30) with the step, epoch, loss,
    patches/s, elapsed time and ETA, whether or not a step ended in between, and the epoch lines."""

    def __init__(self, console=None, *, enabled: bool = True):
        if console is None:
            from rich.console import Console

            console = Console(stderr=True)
        self.console = console
        self.enabled = enabled
        self.progress = None
        self.live = bool(getattr(console, "is_terminal", False))
        self._beat = None
        self._state: dict[str, Any] = {}

    def _say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def busy(self, text: str):
        if not self.enabled:
            return nullcontext()
        if self.live:
            return self.console.status(text, spinner="dots")
        from ..core.heartbeat import Heartbeat, clock, progress_interval

        self._say(text)
        return Heartbeat(progress_interval(), lambda t: self._say(f"{text} ({clock(t)} elapsed)"))

    def start(self, total: int, completed: int) -> None:
        if not self.enabled:
            return
        if not self.live:
            from ..core.heartbeat import Heartbeat, progress_interval

            self._state = {"total": total, "first": completed, "step": completed, "epoch": "-", "epochs": "-",
                           "loss": None, "pps": None}
            self._beat = Heartbeat(progress_interval(), self._line).start()
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from ..core.heartbeat import eta_column

        self.progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}/{task.fields[epochs]}"), BarColumn(),
            MofNCompleteColumn(), TextColumn("loss {task.fields[loss]:.5f}"),
            TextColumn("{task.fields[pps]:.3g} patches/s"), TimeElapsedColumn(), eta_column("ETA"),
            console=self.console, transient=False)
        self.task = self.progress.add_task("train", total=total, completed=completed, epoch="-",
                                           epochs="-", loss=float("nan"), pps=0.0, first=completed)
        self.progress.start()

    def _line(self, elapsed: float) -> None:
        """The time-based progress line (not a terminal)."""
        from ..core.heartbeat import clock

        st = self._state
        done = st["step"] - st["first"]
        if done <= 0:
            self._say(f"step {st['step'] + 1}/{st['total']} running (the first one is the slowest), "
                      f"{clock(elapsed)} elapsed")
            return
        # the mean step time of the steps done, less what the running step has already spent
        per_step = (st["t_step"] - self._beat.t0) / done
        eta = clock(max(0.0, (st["total"] - st["step"]) * per_step - (time.monotonic() - st["t_step"])))
        loss = "" if st["loss"] is None else f", loss {st['loss']:.5f}"
        pps = "" if not st["pps"] else f", {st['pps']:.3g} patches/s"
        self._say(f"step {st['step']}/{st['total']} (epoch {st['epoch']}/{st['epochs']}){loss}{pps}, "
                  f"{clock(elapsed)} elapsed, ETA {eta}")

    def stop(self) -> None:
        if self._beat is not None:
            self._beat.stop()
            self._beat = None
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def update(self, step: int, **fields_: Any) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, **fields_)
        elif self._beat is not None:
            self._state.update(step=step, t_step=time.monotonic(), **fields_)

    def note(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(text)
        elif self._beat is not None:
            self._say(text)

    def message(self, text: str) -> None:
        """Printed with or without the bar (``--no-progress`` hides progress, not what the run is)."""
        self._say(text)


def summary_table(result: TrainResult):
    """A Rich table of a finished (or stopped) run's figures."""
    from rich.table import Table

    t = Table(title=f"training run {result.run_dir}", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")

    def fmt(v, f="{:.2f}"):
        return "-" if v is None else f.format(v)

    t.add_row("status", result.status + (f" ({result.signal})" if result.signal else ""))
    t.add_row("epochs done / steps", f"{result.epoch} / {result.step}")
    t.add_row("best val PSNR", fmt(result.best_psnr, "{:.3f} dB") + (f" (epoch {result.best_epoch})"
                                                                    if result.best_epoch else ""))
    t.add_row("last val PSNR", fmt(result.last_psnr, "{:.3f} dB"))
    t.add_row("training speed", fmt(result.patches_per_s, "{:.3g} patches/s"))
    if result.summary:
        t.add_row("train time", fmt(result.summary.get("train_time_s"), "{:.1f} s"))
        t.add_row("parameters", f"{result.summary.get('params', 0):,}")
        t.add_row("device", str(result.summary.get("device")))
    t.add_row("weights", str(result.model_path) if result.model_path else "- (resume to finish)")
    return t
