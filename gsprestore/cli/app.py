"""The ``gsprestore`` Typer app: a version callback and thin commands registered from one module
per command family. Domain errors (:class:`gsprestore.core.errors.GspError`) become one line on stderr
and the error's exit code (1, or 2 for usage); so does anything else that escapes a command (a
failed system call such as a full disk or a standard output that takes nothing, exit code 1; any
other exception, exit code 1, its traceback shown only with ``GSPRESTORE_TRACEBACK=1``). Ctrl-C,
SIGTERM and SIGHUP abandon the running write through the same clean-up (its ``.NAME.part`` temp
file and output claim are removed), then one line and exit code 128 + the signal number (a batch
first says what it finished and how to go on). The console script starts in
:mod:`gsprestore.cli.entry`, which turns a signal during start-up into the same line."""

import os
import signal
import sys
from typing import Annotated, Optional

import typer

from .._version import __version__
from ..core.errors import GspError, one_line
from ..core.process import (
    ClosedStream, Terminated, broken_install, cover_closed_streams, install_signal_handlers, os_error_line,
    restore_signal_handlers, stdout_fails,
)
from .shared_options import Command, Group

app = typer.Typer(
    name="gsprestore",
    cls=Group,
    help="Demosaicking and 2x interpolation with unrolled graph-smoothness priors (uGLR / uGTV).",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
    # --help is Click's plain listing, not Rich's panels: it answers in half the time (Rich's import
    # and table layout were most of a command's --help), and it reads the same at any width and in
    # a pipe (Rich's tables cut long option names below 100 columns)
    rich_markup_mode=None,
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


def _command_name(name: str | None, fn: object) -> str:
    """The name Typer gives a recorded command (its function's name, dashed, where none is set)."""
    return name or getattr(fn, "__name__", "").lower().replace("_", "-")


def _invoked(argv: list[str], names: set[str]) -> str | None:
    """The command ``argv`` runs when its first word is one (``demosaic`` in ``gsprestore demosaic
    --help``), else None: no command, a misspelt one, or shell completion asking for all."""
    if any(k.endswith("_COMPLETE") for k in os.environ) or len(argv) < 2:
        return None
    return argv[1] if argv[1] in names else None


def _register(argv: list[str] | None = None) -> None:
    """Add the commands (:mod:`.commands` imports the families, each records its functions in
    :mod:`.command_table`) to ``app``, in their ``--help`` order. Given ``argv`` whose first word
    names a command, only that one is added: Typer builds a parser for every added command before
    it runs one, and building the other nine is most of a subcommand's ``--help`` time. Imports are
    cheap: no torch at module level."""
    from . import commands  # noqa: F401
    from .command_table import COMMANDS

    named = [(_command_name(name, fn), fn, options) for name, fn, options in COMMANDS]
    wanted = _invoked(argv, {n for n, _, _ in named}) if argv is not None else None
    have = {id(info.callback) for info in app.registered_commands}
    chosen = [entry for entry in named if wanted is None or entry[0] == wanted or id(entry[1]) in have]
    if {id(fn) for _, fn, _ in chosen} == have:
        return  # all there already (a command once added stays: the app is shared in one process)
    app.registered_commands.clear()
    for name, fn, options in chosen:
        app.command(name, cls=Command, **options)(fn)  # --help labels: cli/shared_options.py


def _usage_error(exc: BaseException) -> None:
    """A command-line parser error as one line (``error: No such option: --metod (Possible options:
    ...); see `gsprestore demosaic --help` ``) and its exit code (2); no arguments at all print the
    help, as before."""
    ctx = getattr(exc, "ctx", None)
    code = int(getattr(exc, "exit_code", 2) or 2)
    if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
        typer.echo(ctx.get_help(), err=True)
        sys.exit(code)
    fmt = getattr(exc, "format_message", None)
    message = one_line(fmt() if callable(fmt) else str(exc)).rstrip(".")
    where = getattr(ctx, "command_path", None) or "gsprestore"
    typer.echo(f"error: {message}; see `{where} --help`", err=True)
    sys.exit(code)


def main() -> None:
    """Console entry point: Typer handles usage errors (exit 2); every error prints one line."""
    cover_closed_streams()
    previous = install_signal_handlers()
    try:
        try:
            _register(sys.argv)  # inside the error handling: a broken install or a signal here is one line too
            try:
                rv = app(standalone_mode=False)  # usage errors come here, not to Typer's boxes
            except typer.TyperException as exc:  # the parser's: unknown option, bad value, no command
                _usage_error(exc)
            sys.exit(rv if isinstance(rv, int) else 0)
        except SystemExit as done:  # how Click ends every run
            if stdout_fails():  # what the command printed could not be written (e.g. --json > /dev/full)
                closed = isinstance(sys.stdout, ClosedStream)
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
        broken = broken_install(exc)  # a shared library of an installed package that does not load
        if broken is not None:
            typer.echo(f"error: {broken}", err=True)
            sys.exit(1)
        typer.echo(f"error: {os_error_line(exc)}", err=True)
        sys.exit(1)
    except Terminated as exc:
        what = "interrupted" if exc.signum == signal.SIGINT else f"terminated ({signal.Signals(exc.signum).name})"
        typer.echo(f"{what}; unfinished outputs removed", err=True)
        sys.exit(128 + exc.signum)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug: one line all the same (GSPRESTORE_TRACEBACK=1 shows where)
        if os.environ.get("GSPRESTORE_TRACEBACK") == "1":
            raise
        broken = broken_install(exc)
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
