"""The Rich display of a training run (the loop itself draws nothing): :class:`RichProgress`, the
``progress=`` object ``gsprestore train`` passes to :func:`gsprestore.training.train` (a spinner
while patches are cut, then a bar on stderr: steps, epoch, running loss, patches/s, elapsed and
ETA, and a line per epoch), and :func:`summary_table`, the final figures."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from .report import TrainProgress, TrainResult


class RichProgress(TrainProgress):
    """Rich progress on ``console`` (stderr by default); ``enabled=False`` shows nothing."""

    def __init__(self, console=None, *, enabled: bool = True):
        if console is None:
            from rich.console import Console

            console = Console(stderr=True)
        self.console = console
        self.enabled = enabled
        self.progress = None

    def busy(self, text: str):
        return self.console.status(text, spinner="dots") if self.enabled else nullcontext()

    def start(self, total: int, completed: int) -> None:
        if not self.enabled:
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}/{task.fields[epochs]}"), BarColumn(),
            MofNCompleteColumn(), TextColumn("loss {task.fields[loss]:.5f}"),
            TextColumn("{task.fields[pps]:.3g} patches/s"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), console=self.console, transient=False)
        self.task = self.progress.add_task("train", total=total, completed=completed, epoch="-",
                                           epochs="-", loss=float("nan"), pps=0.0)
        self.progress.start()

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def update(self, step: int, **fields_: Any) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, **fields_)

    def note(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(text)

    def message(self, text: str) -> None:
        """Printed with or without the bar (``--no-progress`` hides progress, not what the run is)."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


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
