"""The ``gsprestore`` console script's first code (and ``python -m gsprestore``'s).

Importing the app (Typer, Rich, the command modules) takes a tenth of a second, before
:func:`gsprestore.cli.app.main` installs its signal handling: a Ctrl-C in that window would print
Python's traceback. Here it is one line and exit code 130 instead, like a Ctrl-C at any later
moment (SIGTERM there ends the process silently, Python's default)."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from .app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    run()
