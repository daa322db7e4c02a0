"""Progress and messages on stderr while work runs, on a terminal or in a log (the clock that
drives them, :class:`gsprestore.core.heartbeat.Heartbeat`, is one layer down): :class:`Reporter`,
what a user sees while ``demosaic`` / ``upscale2x`` / ``mosaic`` work through files, with the
whole job's time remaining (:class:`JobClock`); :class:`CountProgress`, items done of a total
(the benchmark's images), or :class:`CountLines`, a line now and then (``train-pack``'s steps);
:func:`working`, a spinner or a line by the clock around one long
call (``compare``, ``explain``); :class:`TrainProgress`, what a training run reports to, and
:class:`RichProgress`, how ``gsprestore train`` draws it (a spinner while patches are cut, then a bar
on stderr: steps, epoch, running loss, patches/s, elapsed and ETA, and a line per epoch; where
stderr is not a terminal, the same figures as a line every 30 s) and :func:`summary_table`, the
run's final figures."""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from ..core.errors import one_line
from ..core.heartbeat import took

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime.folders import Job, Result


class JobClock:
    """The time left of a whole batch, by pixels: ``pixels`` per file (from the headers; a file
    whose header could not be read counts as the mean of the others), the current file's share
    done from its tiles. Left = elapsed x (1 - done) / done once any part is done; before that,
    ``expected`` seconds (the method's recorded speed, :func:`gsprestore.methods.defaults.expected_seconds`)
    less the elapsed time, so a first step longer than Rich's 30-s speed window (one image, one
    tile) still has an ETA. None: nothing to go by (no part done, and no expected time left)."""

    def __init__(self, pixels: list[int | None], expected: float | None = None):
        known = [p for p in pixels if p]
        mean = sum(known) / len(known) if known else 1.0
        self.weights = [float(p) if p else mean for p in pixels] or [1.0]
        self.total = sum(self.weights)
        self.expected = expected
        self.t0 = time.monotonic()
        self._done = 0.0
        self._current = 0
        self._share = 0.0

    def start(self, k: int) -> None:
        self._current, self._share = min(k, len(self.weights) - 1), 0.0

    def part(self, done: int, total: int) -> None:
        self._share = done / total if total > 0 else 0.0

    def finish(self, k: int) -> None:
        self._done += self.weights[min(k, len(self.weights) - 1)]
        self._share = 0.0

    def fraction(self) -> float:
        return min(1.0, (self._done + self.weights[self._current] * self._share) / self.total)

    def left(self) -> float | None:
        elapsed = time.monotonic() - self.t0
        f = self.fraction()
        if f > 0:
            return elapsed * (1 - f) / f
        if self.expected is not None and self.expected > elapsed:
            return self.expected - elapsed
        return None  # nothing done yet and past the expected time: no honest figure


def _eta_column(reporter: "Reporter") -> Any:
    """A Rich column with the whole job's time left (:class:`JobClock`) on the files row; Rich's
    own ``TimeRemainingColumn`` needs a step within its 30-s speed window and shows ``-:--:--``
    while one image or one tile takes longer."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    from ..core.heartbeat import clock

    class Eta(ProgressColumn):
        def render(self, task: Any) -> Text:
            if task.id != reporter._files_task:
                return Text("")
            left = reporter.clock.left() if reporter.clock is not None else None
            return Text(f"eta {clock(left) if left is not None else '-:--'}", style="progress.remaining")

    return Eta()


class Reporter:
    """Progress and messages on stderr: a Rich progress display (files, and tiles of the current
    image) on a terminal; otherwise one line per file, and while a file takes long a line every
    :func:`gsprestore.core.heartbeat.progress_interval` seconds (30: elapsed time, tiles done, ETA);
    ``quiet`` keeps only errors."""

    def __init__(self, quiet: bool, total: int, verb: str, method: str | None = None):
        from rich.console import Console

        self.quiet = quiet
        self.total = total
        self.verb = verb
        #: The method that runs, as the per-file and summary lines name it (None: ``mosaic``).
        self.method = method
        #: The batch's jobs, set before the worker is built (its time estimate reads their sizes).
        self.jobs: list["Job"] = []
        #: The whole job's time left (:class:`JobClock`), set by the worker's set-up; None: by files.
        self.clock: JobClock | None = None
        #: Lines printed after the summary (what would give a better result, and its time).
        self.closing: list[str] = []
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.progress = None
        self._files_task = None
        self._tiles_task = None
        self._beat = None
        self._tiles: tuple[int, int] | None = None
        if not quiet and self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), _eta_column(self), console=self.console, transient=True)
            self._files_task = self.progress.add_task("files", total=total)

    def _clock(self) -> JobClock:
        if self.clock is None:  # no estimate was set up: every file weighs the same
            self.clock = JobClock([None] * max(self.total, 1))
        return self.clock

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
        self._clock().start(k)
        with_method = f" with {self.method}" if self.method else ""
        if self.progress is not None:
            self.progress.update(self._files_task, description=f"{self.verb} {job.input.name}{with_method}")
        elif not self.quiet:  # no live display: say by the clock that a long file is still going
            from ..core.heartbeat import Heartbeat, progress_interval

            self._stop_beat()
            self._tiles = None
            head = f"[{k + 1}/{self.total}] {self.verb} {job.input}{with_method}"
            self._beat = Heartbeat(progress_interval(), lambda t: self._still(head, t)).start()

    def _still(self, head: str, elapsed: float) -> None:
        from ..core.heartbeat import clock

        text = f"{head}: {clock(elapsed)} elapsed"
        if self._tiles is not None and self._tiles[1] > 1:
            text += f", tile {self._tiles[0]}/{self._tiles[1]}"
        left = self._clock().left()
        text += f", ETA {clock(left)} for the whole job" if left is not None else ""
        self.console.print(text, markup=False)

    def _stop_beat(self) -> None:
        if self._beat is not None:
            self._beat.stop()
            self._beat = None

    def tiles(self, done: int, total: int) -> None:
        self._tiles = (done, total)
        self._clock().part(done, total)
        if self.progress is None or total <= 1:
            return
        if self._tiles_task is None:
            self._tiles_task = self.progress.add_task("  tiles", total=total)
        self.progress.update(self._tiles_task, completed=done, total=total)

    def result(self, k: int, res: "Result") -> None:
        self._stop_beat()
        self._clock().finish(k)
        if self.progress is not None:
            self.progress.advance(self._files_task)
            if self._tiles_task is not None:
                self.progress.remove_task(self._tiles_task)
                self._tiles_task = None
        if res.status == "failed":
            self.error(res.error or "failed")
        elif not self.quiet and self.progress is None:
            from ..core.heartbeat import clock

            what = (f"skipped ({res.info.get('reason', 'exists')})" if res.status == "skipped"
                    else f"{res.info.get('method', self.method) + ', ' if self.method else ''}{took(res.seconds)}")
            left = self._clock().left() if k + 1 < self.total else None
            eta = f", ETA {clock(left)}" if left is not None else ""
            self.console.print(one_line(f"[{k + 1}/{self.total}] {res.input} -> {res.output}  {what}{eta}"),
                               markup=False)


def working(text: str) -> Any:
    """Feedback on stderr while ``text`` runs: a spinner on a terminal; otherwise, once it has run
    :func:`gsprestore.core.heartbeat.progress_interval` seconds (30), the text with the elapsed time
    every such interval, so a log file or a pipe shows that a minutes-long ``explain`` or
    ``compare`` is still going (a quick one prints nothing)."""
    from rich.console import Console

    from ..core.heartbeat import Heartbeat, clock, progress_interval

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    if console.is_terminal:
        return console.status(text, spinner="dots")
    return Heartbeat(progress_interval(), lambda t: console.print(f"{text} ({clock(t)} elapsed)", markup=False))


class CountProgress:
    """Items done / total with the elapsed time and an ETA: a Rich bar on a terminal, one line per
    item otherwise (logs and pipes). Used as ``with CountProgress(console, title) as step``;
    ``step(done, total, name)`` is e.g. :func:`gsprestore.evaluation.benchmark.run_benchmark`'s
    progress callback (``unit``: what is counted, ``images``)."""

    def __init__(self, console: Any, title: str, unit: str = "images"):
        self.console, self.title, self.unit, self.bar, self.job, self.t0 = console, title, unit, None, None, 0.0

    def __enter__(self) -> Any:
        self.t0 = time.perf_counter()
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            from ..core.heartbeat import eta_column

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn(self.unit), TimeElapsedColumn(), eta_column(), console=self.console,
                                transient=True)
            self.bar.start()
            self.job = self.bar.add_task(self.title, total=None)
        return self.step

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()

    def step(self, done: int, total: int, name: str) -> None:
        if self.bar is not None:
            self.bar.update(self.job, completed=done, total=total,
                            description=f"{self.title}" + (f": {name}" if name else ""))
            return
        if done == 0:
            return
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / done * (total - done)
        self.console.print(f"{self.title}: {done}/{total} {self.unit} ({name}), {elapsed:.0f} s elapsed, "
                           f"eta {eta:.0f} s", markup=False, highlight=False)


class CountLines:
    """``what: done/total`` lines on ``console``, at most one every ``every`` seconds (and the last
    one): a callable ``(what, done, total)`` for quick steps, such as
    :func:`gsprestore.training.trainpack.make_pack`'s progress."""

    def __init__(self, console: Any, every: float = 2.0):
        self.console, self.every, self.last = console, every, 0.0

    def __call__(self, what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last > self.every or done >= total:
            self.last = now
            self.console.print(f"{what}: {done}/{total}", highlight=False)


class TrainProgress:
    """What :func:`train` reports to; this one shows nothing. ``busy(text)`` is a context manager
    around a long preparation (cutting patches); ``start(total, completed)`` / ``stop()`` bracket
    the steps; ``update(step, epoch=, epochs=, loss=, pps=)`` follows each step, ``note(text)``
    is a line per epoch and ``message(text)`` a note about the run."""

    def busy(self, text: str):  # noqa: ARG002
        return nullcontext()

    def start(self, total: int, completed: int) -> None:
        pass

    def stop(self) -> None:
        pass

    def update(self, step: int, **fields_: Any) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def message(self, text: str) -> None:  # noqa: ARG002
        """A one-line note about the run itself (e.g. which model configuration ``--init`` adopted),
        shown even where no progress is drawn."""


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


def summary_table(result: Any) -> Any:
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
