"""A console program's edges, where the operating system meets it: SIGTERM / SIGHUP as an
exception (:class:`Terminated`) so that clean-ups run as for Ctrl-C, standard streams closed at start
(:func:`cover_closed_streams`) or refusing what is written (:func:`stdout_fails`), the one line for a
failed system call (:func:`os_error_line`) and for an installation whose packages do not import
(:func:`broken_install`); the CPUs the process may use (:func:`usable_cpus`) and a map over them
(:func:`thread_map`); the OpenMP runtime's idle spinning cut short (:func:`configure_openmp`). Used by the
``gsprestore`` entry point (:func:`gsprestore.cli.app.main`)."""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from .errors import one_line

T = TypeVar("T")
R = TypeVar("R")


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM / SIGHUP, so ``finally`` clean-ups run as for Ctrl-C (not a
    KeyboardInterrupt: Click would turn that into "Aborted!" and exit 1)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container or ``taskset`` narrows;
    the machine's count where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        return os.cpu_count() or 1


#: GNU OpenMP's idle spin (``GOMP_SPINCOUNT``) that :func:`configure_openmp` sets: how many times a
#: worker thread polls for the next parallel region before it sleeps (libgomp's default with no
#: ``OMP_WAIT_POLICY``: 300,000). Chosen by ``benchmarks/bench_cpu_target.py`` runs of 1,000 /
#: 10,000 / 30,000 / 100,000 (``lab/notes/performance.md``): 1,000 wakes the workers too late for
#: PyTorch's back-to-back operations; 10,000-30,000 was the best for the CPU-size networks.
OPENMP_SPIN_COUNT = 20_000


def configure_openmp() -> bool:
    """Shorten PyTorch's OpenMP workers' idle spin (``GOMP_SPINCOUNT`` =
    :data:`OPENMP_SPIN_COUNT`, where the environment does not set it) before torch is imported.
    Between two PyTorch operations the workers poll for the next one; with libgomp's default they
    go on polling for milliseconds, so during the native kernels that run between them (which
    start threads of their own) they hold the CPUs those kernels need: on 2 cores the graph
    networks' native kernels ran at about half speed. Returns whether the setting can still take
    effect (torch not yet imported: libgomp reads it when it loads). Results do not depend on it."""
    if "torch" in sys.modules:
        return False
    os.environ.setdefault("GOMP_SPINCOUNT", str(OPENMP_SPIN_COUNT))
    return True


def thread_map(fn: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """``[fn(x) for x in items]``, in order, on up to ``threads`` threads (in this thread where that
    is 1 or there is one item): for work that releases the GIL (deflate, numpy on row blocks). A
    call's exception is raised here."""
    threads = min(threads, len(items))
    if threads < 2:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(fn, items))


def _on_signal(signum: int, frame: object) -> None:
    raise Terminated(signum)


def install_signal_handlers() -> dict:
    """Turn SIGINT (Ctrl-C), SIGTERM and SIGHUP into :class:`Terminated` (main thread only; a no-op
    elsewhere): Click would turn a KeyboardInterrupt into its own words and exit code, and the
    entry point says instead what was finished and how to go on. A signal the process was started
    with ignored (``nohup`` ignores SIGHUP, a background job of a script SIGINT) stays ignored.
    Returns the previous handlers, for :func:`restore_signal_handlers`."""
    previous = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                if signal.getsignal(sig) is signal.SIG_IGN:  # ignored by whoever started us (nohup, `cmd &`)
                    continue
                previous[sig] = signal.signal(sig, _on_signal)
            except ValueError:  # not the main thread
                break
    return previous


def restore_signal_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


class ClosedStream(io.TextIOBase):
    """Stands for a standard stream that was closed when gsprestore started (``gsprestore models
    >&-``): takes every write, keeps nothing, remembers that something was to be written."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text:
            self.wrote = True
        return len(text)


def cover_closed_streams() -> None:
    """Standard input, output or error closed at start: its descriptor is given the null device
    (so that no file this run opens takes descriptor 1 or 2 and receives what is printed), and
    ``sys.stdout`` / ``sys.stderr`` (None then) a :class:`ClosedStream`."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        except OSError:
            pass
        if name != "stdin" and getattr(sys, name) is None:
            setattr(sys, name, ClosedStream())


def stdout_fails() -> bool:
    """True when standard output cannot take what is waiting to be written (a full device, a
    closed pipe, a stream closed at start that was written to); it is then pointed at the null
    device, so that Python's own flush at exit cannot add a second message."""
    if sys.stdout is None:
        return False
    if isinstance(sys.stdout, ClosedStream):
        return sys.stdout.wrote
    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
    except (OSError, ValueError) as exc:
        if isinstance(exc, io.UnsupportedOperation):  # not a file (captured by a test): nothing to learn
            return False
        fd = None
    else:
        try:
            os.write(fd, b"")  # a zero-byte write fails where the device refuses data (/dev/full)
            return False
        except OSError:
            pass
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1 if fd is None else fd)
    except OSError:
        pass
    return True


#: Packages whose failed import means a broken installation (not a bug of gsprestore), with the
#: command that repairs it.
REPAIR = {
    "torch": "pip install --force-reinstall torch",
    "numpy": "pip install --force-reinstall numpy",
    "PIL": "pip install --force-reinstall pillow",
    "rawpy": "pip install --force-reinstall rawpy",
    "rich": "pip install --force-reinstall rich",
    "typer": "pip install --force-reinstall typer",
    "click": "pip install --force-reinstall click",
}


def broken_install(exc: BaseException) -> str | None:
    """The one line for an exception raised while importing an installed package (an
    ``ImportError`` such as a missing shared library or an undefined symbol, or an ``OSError``
    from loading one): the installation is broken, and how to repair it. None for anything else."""
    import traceback

    if not isinstance(exc, (ImportError, OSError)):
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    importing = isinstance(exc, ImportError) or any("importlib" in f.filename for f in frames)
    if not importing:
        return None
    name = getattr(exc, "name", None) or ""
    package = name.split(".")[0]
    if package not in REPAIR and package != "gsprestore":  # the package whose files were running when it failed
        for f in reversed(frames):
            parts = Path(f.filename).parts
            for pkg in REPAIR:
                if pkg in parts and ("site-packages" in parts or "dist-packages" in parts):
                    package = pkg
                    break
            if package in REPAIR:
                break
    text = str(exc).strip().splitlines()
    reason = f"{type(exc).__name__}" + (f": {one_line(text[0])}" if text else "")
    if package in REPAIR:
        return (f"the installation is broken: importing {package} failed ({reason}); reinstall it with: "
                f"{REPAIR[package]}")
    if package and package != "gsprestore":
        return (f"the installation is broken: importing {package} failed ({reason}); reinstall it with: "
                f"pip install --force-reinstall {package}")
    return f"the installation is broken ({reason}); reinstall gsprestore with: pip install --force-reinstall ."


def os_error_line(exc: OSError) -> str:
    """``FILE: reason`` of a failed system call; the file is standard output when that is what failed."""
    where = exc.filename if exc.filename is not None else ("standard output" if stdout_fails() else None)
    reason = exc.strerror or str(exc) or type(exc).__name__
    return one_line(f"{where}: {reason}" if where is not None else reason)
