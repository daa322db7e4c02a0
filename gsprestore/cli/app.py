"""The ``gsprestore`` Typer app: a version callback and thin commands registered from one module
per command family. Domain errors (:class:`gsprestore.core.errors.GspError`) become one line on stderr
and the error's exit code (1, or 2 for usage); so does anything else that escapes a command (a
failed system call such as a full disk or a standard output that takes nothing, exit code 1; any
other exception, exit code 1, its traceback shown only with ``GSPRESTORE_TRACEBACK=1``). SIGTERM
(and SIGHUP) are handled like Ctrl-C: the running write is abandoned through the same clean-up
(its ``.NAME.part`` temp file and output claim are removed), then one line and exit code 128 +
the signal number."""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .._version import __version__
from ..core.errors import GspError, one_line

app = typer.Typer(
    name="gsprestore",
    help="Demosaicking and 2x interpolation with unrolled graph-smoothness priors (uGLR / uGTV).",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gsprestore {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit."),
    ] = None,
) -> None:
    """Demosaic Bayer mosaics and upscale images 2x with graph-smoothness priors."""


_registered: set[int] = set()

#: The placeholder ``--help`` shows after an option that takes a value, by the option's name;
#: other options get one by the value's type (:data:`_TYPE_LABELS`). Flags get none.
_NAME_LABELS = {
    "output": "PATH", "out": "FOLDER", "resume": "FOLDER", "data": "FOLDER", "data_dir": "FOLDER",
    "init": "FILE", "weights": "FILE", "json": "FILE", "csv": "FILE", "markdown": "FILE",
    "method": "METHOD", "methods": "M1,M2,...", "prior": "glr|gtv", "task": "TASK", "pattern": "PATTERN",
    "device": "DEVICE", "precision": "PRECISION", "crop": "X,Y,W,H", "pixel": "X,Y", "ext": "EXT",
    "suffix": "TEXT", "model_opt": "KEY=VALUE", "noise_sigma": "S1,S2,...", "time_budget": "SECONDS",
    "wb": "WB", "output_space": "SPACE", "bright": "auto|none|FACTOR", "dataset": "NAME", "schedule": "NAME",
    "loss": "NAME", "codec": "NAME",
}
_TYPE_LABELS = {"int": "N", "float": "NUMBER", "str": "TEXT", "Path": "PATH"}


def _value_label(param: object, ctx: object) -> str | None:
    """What ``--help`` shows after an option: nothing for a flag (typer 0.29 prints ``<bool>``
    there, as if it took a value), the option's own metavar, a word for what it takes (by its
    name, else its type: ``N``, ``NUMBER``, ``TEXT``, ``PATH``; ``...`` when repeatable) instead
    of a Python type tag (``<str>``, ``<list[str]>``). Arguments show none: their name says it."""
    if getattr(param, "param_type_name", "") == "argument":
        return None
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    if getattr(param, "metavar", None) is not None:
        return param.metavar
    name = getattr(param, "name", "") or ""
    label = "[METHOD=]FILE" if name == "weights" and getattr(param, "multiple", False) else _NAME_LABELS.get(name)
    if label is None:
        try:
            kind = param.bare_type()
        except Exception:  # noqa: BLE001 - an unusual annotation: a neutral word
            kind = "str"
        kind = kind[5:-1] if kind.startswith("list[") else kind
        label = _TYPE_LABELS.get(kind, "VALUE")
    return label + ("..." if getattr(param, "multiple", False) else "")


def _plain_value_labels() -> None:
    """Use :func:`_value_label` in every command's ``--help`` (Typer's own shows Python type tags)."""
    from typer import core

    for cls in (core.TyperOption, core.TyperArgument):
        cls.display_type_rich = _value_label


def _register() -> None:
    """Add every command (:mod:`.commands` imports the families, each records its functions in
    :mod:`.registry`) to ``app``, once. Imports are cheap: no torch at module level."""
    from . import commands  # noqa: F401
    from .registry import COMMANDS

    _plain_value_labels()

    for name, fn, options in COMMANDS:
        if id(fn) not in _registered:
            _registered.add(id(fn))
            app.command(name, **options)(fn)


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM / SIGHUP, so ``finally`` clean-ups run as for Ctrl-C (not a
    KeyboardInterrupt: Click would turn that into "Aborted!" and exit 1)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame: object) -> None:
    raise Terminated(signum)


def install_signal_handlers() -> dict:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` (main thread only; a no-op elsewhere).
    Returns the previous handlers, for :func:`restore_signal_handlers`."""
    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                previous[sig] = signal.signal(sig, _on_signal)
            except ValueError:  # not the main thread
                break
    return previous


def restore_signal_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


class _ClosedStream(io.TextIOBase):
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


def _cover_closed_streams() -> None:
    """Standard input, output or error closed at start: its descriptor is given the null device
    (so that no file this run opens takes descriptor 1 or 2 and receives what is printed), and
    ``sys.stdout`` / ``sys.stderr`` (None then) a :class:`_ClosedStream`."""
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
            setattr(sys, name, _ClosedStream())


def _stdout_fails() -> bool:
    """True when standard output cannot take what is waiting to be written (a full device, a
    closed pipe, a stream closed at start that was written to); it is then pointed at the null
    device, so that Python's own flush at exit cannot add a second message."""
    if sys.stdout is None:
        return False
    if isinstance(sys.stdout, _ClosedStream):
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
_REPAIR = {
    "torch": "pip install --force-reinstall torch",
    "numpy": "pip install --force-reinstall numpy",
    "PIL": "pip install --force-reinstall pillow",
    "rawpy": "pip install --force-reinstall rawpy",
    "rich": "pip install --force-reinstall rich",
    "typer": "pip install --force-reinstall typer",
    "click": "pip install --force-reinstall click",
}


def _broken_install(exc: BaseException) -> str | None:
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
    if package not in _REPAIR:  # the package whose files were running when the import failed
        for f in reversed(frames):
            parts = Path(f.filename).parts
            for pkg in _REPAIR:
                if pkg in parts and ("site-packages" in parts or "dist-packages" in parts):
                    package = pkg
                    break
            if package in _REPAIR:
                break
    text = str(exc).strip().splitlines()
    reason = f"{type(exc).__name__}" + (f": {one_line(text[0])}" if text else "")
    if package in _REPAIR:
        return (f"the installation is broken: importing {package} failed ({reason}); reinstall it with: "
                f"{_REPAIR[package]}")
    if package and package != "gsprestore":
        return (f"the installation is broken: importing {package} failed ({reason}); reinstall it with: "
                f"pip install --force-reinstall {package}")
    return f"the installation is broken ({reason}); reinstall gsprestore with: pip install --force-reinstall ."


def _os_error_line(exc: OSError) -> str:
    """``FILE: reason`` of a failed system call; the file is standard output when that is what failed."""
    where = exc.filename if exc.filename is not None else ("standard output" if _stdout_fails() else None)
    reason = exc.strerror or str(exc) or type(exc).__name__
    return one_line(f"{where}: {reason}" if where is not None else reason)


def main() -> None:
    """Console entry point: Typer handles usage errors (exit 2); every error prints one line."""
    _cover_closed_streams()
    previous = install_signal_handlers()
    _register()
    try:
        try:
            app()
        except SystemExit as done:  # how Click ends every run
            if _stdout_fails():  # what the command printed could not be written (e.g. --json > /dev/full)
                closed = isinstance(sys.stdout, _ClosedStream)
                typer.echo("error: standard output" + (" is closed" if closed else "") + ": cannot write the output",
                           err=True)
                sys.exit(done.code or 1)
            raise
    except GspError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # a system call no command turned into a GspError (disk full, stdout closed...)
        if os.environ.get("GSPRESTORE_TRACEBACK") == "1":
            raise
        broken = _broken_install(exc)  # a shared library of an installed package that does not load
        if broken is not None:
            typer.echo(f"error: {broken}", err=True)
            sys.exit(1)
        typer.echo(f"error: {_os_error_line(exc)}", err=True)
        sys.exit(1)
    except Terminated as exc:
        typer.echo(f"terminated ({signal.Signals(exc.signum).name}); unfinished outputs removed", err=True)
        sys.exit(128 + exc.signum)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug: one line all the same (GSPRESTORE_TRACEBACK=1 shows where)
        if os.environ.get("GSPRESTORE_TRACEBACK") == "1":
            raise
        broken = _broken_install(exc)
        if broken is not None:
            typer.echo(f"error: {broken}", err=True)
            sys.exit(1)
        text = str(exc).strip().splitlines()
        typer.echo(f"error: unexpected {type(exc).__name__}" + (f": {one_line(text[0])}" if text else "")
                   + " (a bug in gsprestore; GSPRESTORE_TRACEBACK=1 shows where)", err=True)
        sys.exit(1)
    finally:
        restore_signal_handlers(previous)


if __name__ == "__main__":  # pragma: no cover
    # Run as ``python -m gsprestore.cli.app``: this file is then ``__main__``, a second copy of the
    # module whose ``app`` the commands never register on; call the package's own entry point.
    from .app import main as _package_main

    _package_main()
