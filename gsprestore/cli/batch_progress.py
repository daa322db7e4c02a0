"""The batch commands' progress and messages on stderr (:class:`Reporter`): what a user sees while
``demosaic`` / ``upscale2x`` / ``mosaic`` work through files, on a terminal or in a log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import one_line

if TYPE_CHECKING:  # pragma: no cover
    from ..batch import Job, Result


class Reporter:
    """Progress and messages on stderr: a Rich progress display (files, and tiles of the current
    image) on a terminal; otherwise one line per file, and while a file takes long a line every
    :func:`gsprestore.heartbeat.progress_interval` seconds (30: elapsed time, tiles done, ETA);
    ``quiet`` keeps only errors."""

    def __init__(self, quiet: bool, total: int, verb: str):
        from rich.console import Console

        self.quiet = quiet
        self.total = total
        self.verb = verb
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.progress = None
        self._tiles_task = None
        self._beat = None
        self._tiles: tuple[int, int] | None = None
        if not quiet and self.console.is_terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                     console=self.console, transient=True)
            self._files_task = self.progress.add_task("files", total=total)

    def __enter__(self) -> "Reporter":
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop_beat()
        if self.progress is not None:
            self.progress.stop()

    def notice(self, message: str) -> None:
        if not self.quiet:
            self.console.print(f"note: {one_line(message)}", markup=False)

    def error(self, message: str) -> None:
        self.console.print(f"error: {one_line(message)}", markup=False)

    def start(self, k: int, job: "Job") -> None:
        if self.progress is not None:
            self.progress.update(self._files_task, description=f"{self.verb} {job.input.name}")
        elif not self.quiet:  # no live display: say by the clock that a long file is still going
            from ..heartbeat import Heartbeat, progress_interval

            self._stop_beat()
            self._tiles = None
            head = f"[{k + 1}/{self.total}] {self.verb} {job.input}"
            self._beat = Heartbeat(progress_interval(), lambda t: self._still(head, t)).start()

    def _still(self, head: str, elapsed: float) -> None:
        from ..heartbeat import clock

        text = f"{head}: {clock(elapsed)} elapsed"
        if self._tiles is not None and self._tiles[1] > 1:
            done, total = self._tiles
            text += f", tile {done}/{total}"
            if done:
                text += f", ETA {clock(elapsed * (total - done) / done)}"
        self.console.print(text, markup=False)

    def _stop_beat(self) -> None:
        if self._beat is not None:
            self._beat.stop()
            self._beat = None

    def tiles(self, done: int, total: int) -> None:
        self._tiles = (done, total)
        if self.progress is None or total <= 1:
            return
        if self._tiles_task is None:
            self._tiles_task = self.progress.add_task("  tiles", total=total)
        self.progress.update(self._tiles_task, completed=done, total=total)

    def result(self, k: int, res: "Result") -> None:
        self._stop_beat()
        if self.progress is not None:
            self.progress.advance(self._files_task)
            if self._tiles_task is not None:
                self.progress.remove_task(self._tiles_task)
                self._tiles_task = None
        if res.status == "failed":
            self.error(res.error or "failed")
        elif not self.quiet and self.progress is None:
            what = f"skipped ({res.info.get('reason', 'exists')})" if res.status == "skipped" else f"{res.seconds:.2f} s"
            self.console.print(one_line(f"[{k + 1}/{self.total}] {res.input} -> {res.output}  {what}"), markup=False)
