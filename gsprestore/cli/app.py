"""The ``gsprestore`` Typer app: a version callback and thin commands registered from one module
per command family. Domain errors (:class:`gsprestore.errors.GspError`) become one line on stderr
and the error's exit code (1, or 2 for usage)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from .. import __version__
from ..errors import GspError

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


def _register() -> None:
    # Each command module adds its commands to ``app`` (imports are cheap: no torch at module level).
    from . import commands  # noqa: F401


def main() -> None:
    """Console entry point: Typer handles usage errors (exit 2); domain errors print one line."""
    _register()
    try:
        app()
    except GspError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
